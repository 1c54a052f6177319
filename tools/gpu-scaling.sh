#!/usr/bin/env bash
# One command on a machine of several GPUs for data parallelism (reports/bench.md "Data-parallel
# scaling" and "Data-parallel correctness"): build, then
#  1. correctness: experiments/dist/dp_correctness.toml (dense-20m, bf16 and ufp4) on one GPU with seeds
#     1-3 (side by side, one run a GPU), then seed 1 of each recipe on each world size N >= 2 twice
#     (`ufp4 run --nproc-per-node N`); the results go to $OUT_DIR/data-parallel/;
#  2. scaling: `ufp4 bench scaling` at world sizes 1, 2, 4, 8 up to the GPUs here ($OUT_DIR/scaling.h5).
# NCCL's NVLink multicast stays as the machine sets it (NCCL_NVLS_ENABLE=0 is inherited by every rank).
#   UFP4_GIT_COMMIT=<commit> OUT_DIR=<dir> [PACK=<file.tgz>] tools/gpu-scaling.sh [extra `ufp4 bench scaling` options]
# PACK: also one archive of $OUT_DIR's results and $LOGS (a machine that returns only a few files).
source "$(dirname "$0")/gpu-common.sh" scaling
OUT_DIR=${OUT_DIR:-results/bench}
gpus=$(nvidia-smi -L | wc -l)
sizes=1; for n in 2 4 8; do [ "$n" -le "$gpus" ] && sizes="$sizes,$n"; done
echo "$gpus GPUs; world sizes $sizes"
nvidia-smi topo -m > "$LOGS/topology.log" 2>&1
env | grep -E '^(NCCL|TORCH_SYMM|NVSHMEM)' | sort > "$LOGS/nccl-env.log"
echo "multicast switches: $(tr '\n' ' ' < "$LOGS/nccl-env.log")"
m=experiments/dist/dp_correctness.toml
runs=build/dp/runs
dp=$OUT_DIR/data-parallel
rm -rf "$dp" && mkdir -p "$dp"
rm -rf "$runs"
build/ufp4 run --force "$m" --gpus "$gpus" > "$LOGS/dp-1gpu.log" 2>&1
echo "1 GPU, 6 runs: exit $? ($(elapsed))"
for f in "$runs"/*.h5; do cp "$f" "$dp/1gpu-$(basename "$f")"; done
for n in ${sizes//,/ }; do
  [ "$n" = 1 ] && continue
  for recipe in bf16 ufp4; do
    for rep in a b; do
      rm -rf "$runs"
      build/ufp4 run --force "$m" --only "dp_dense20m-$recipe-1" --nproc-per-node "$n" > "$LOGS/dp-${n}gpu-$recipe-$rep.log" 2>&1
      echo "$n GPUs $recipe $rep: exit $? ($(elapsed)); $(grep -h 'data parallel:' "$LOGS/dp-${n}gpu-$recipe-$rep.log" | head -n 1)"
      cp "$runs"/dp_dense20m-"$recipe"-1-*.h5 "$dp/${n}gpu-$rep-dp_dense20m-$recipe-1.h5"
    done
    rm -rf build/dp/ref && mkdir -p build/dp/ref && cp "$dp/${n}gpu-a-dp_dense20m-$recipe-1.h5" build/dp/ref/
    build/ufp4 check "$dp/${n}gpu-b-dp_dense20m-$recipe-1.h5" --reference build/dp/ref --exact \
      > "$LOGS/check-${n}gpu-$recipe-rerun.log" 2>&1
    echo "  rerun check exit $?: $(grep -c '^ok' "$LOGS/check-${n}gpu-$recipe-rerun.log") ok, $(grep -c '^FAIL' "$LOGS/check-${n}gpu-$recipe-rerun.log") FAIL"
  done
done
build/ufp4 bench scaling --gpus "$sizes" --out-dir "$OUT_DIR" "$@" > "$LOGS/bench-scaling.log" 2>&1
echo "bench scaling exit $? ($(elapsed))"
grep "bench scaling:.*tok/s" "$LOGS/bench-scaling.log"
if [ -n "${PACK:-}" ]; then
  tar czf "$PACK" -C "$(dirname "$OUT_DIR")" "$(basename "$OUT_DIR")" -C "$(cd "$(dirname "$LOGS")" && pwd)" "$(basename "$LOGS")"
  echo "packed: $PACK"
fi
