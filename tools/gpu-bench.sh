#!/usr/bin/env bash
# One GPU command for issue 8: build, the bit-exact [cuda] tests, then the kernel suite and the
# training-step benchmark (nothing else on the GPU while they run), and the report. Outputs land
# in $BENCH (default results/bench), logs in $LOGS.
#   UFP4_GIT_COMMIT=<commit> tools/gpu-bench.sh [extra `ufp4 bench step` options]
set -uo pipefail
export UFP4_REUSE=${UFP4_REUSE:-off}  # what it checks, it trains: no run copied from another folder
cd "$(dirname "$0")/.."
LOGS=${LOGS:-logs}
BENCH=${BENCH:-results/bench}
mkdir -p "$LOGS" "$BENCH"
t0=$(date +%s)
make gpu > "$LOGS/build.log" 2>&1 || { tail -n 40 "$LOGS/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
# The hot kernel's machine code, for reading instruction counts against Nsight Compute's.
command -v cuobjdump >/dev/null && cuobjdump -sass build/CMakeFiles/ufp4_cuda.dir/kernels/quantize/quantize_hot_cuda.cu.o > "$LOGS/sass-quantize-hot.txt" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > "$LOGS/gpu-state.log" 2>&1
tools/cuda-tests.sh "$LOGS/cuda-tests.log"
echo "cuda tests exit $? after $(( $(date +%s) - t0 )) s: $(tail -n 2 "$LOGS/cuda-tests.log" | tr '\n' ' ')"
build/ufp4 bench kernels --out-dir "$BENCH" > "$LOGS/bench-kernels.log" 2>&1
echo "bench kernels exit $? after $(( $(date +%s) - t0 )) s"
build/ufp4 bench step --out-dir "$BENCH" "$@" > "$LOGS/bench-step.log" 2>&1
echo "bench step exit $? after $(( $(date +%s) - t0 )) s"
grep "bench step:" "$LOGS/bench-step.log" | tail -n 12
# Profile evidence: Nsight Compute on the fused kernels of one large shape (PROFILE=0 skips it;
# NCU_CASES: other `bench kernels` names, e.g. quantize/segments32/e1m2/sr/pair/131072x384, the MoE pair kernel).
NCU_CASES=${NCU_CASES:-"quantize/fused/e2m1/rtne/row/16384x5632 quantize/fused/e2m1/rtne/col/16384x5632 quantize/fused/e2m1/sr/row/16384x5632 quantize/fused/e2m1/sr/col/16384x5632 quantize/fused/e1m2/sr/row/16384x5632"}
if [ "${PROFILE:-1}" = 1 ] && command -v ncu >/dev/null; then
  for f in $NCU_CASES; do
    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis \
        --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        -k 'regex:quantize|segments' -c 1 build/ufp4 bench kernels --out-dir "$LOGS/ncu-tmp" --filter "^$f/" --iterations 1 --repetitions 1 \
        > "$LOGS/ncu-$(echo "$f" | tr / _).log" 2>&1
  done
  rm -rf "$LOGS/ncu-tmp"
  echo "ncu done after $(( $(date +%s) - t0 )) s"
fi
build/ufp4 report bench --results "$BENCH" --out "$LOGS/bench.md" > /dev/null 2> "$LOGS/report.log"
awk '/^## Targets/ {on = 1; print; next} /^## / {on = 0} on' "$LOGS/bench.md"
echo "total $(( $(date +%s) - t0 )) s"
