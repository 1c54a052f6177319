#!/usr/bin/env bash
# One GPU command for trustworthy runs: build, the [cuda] tests, then for a dense and a MoE proxy
# (experiments/determinism/*.toml) two uninterrupted runs and one stopped by SIGTERM and resumed,
# compared bit for bit (ufp4 check --exact: loss, grad norm, eval loss, telemetry, final weights),
# then make check-gpu. MAKE_REFERENCE=1 first writes results/reference/gpu/<GPU model>/ from a run on this GPU.
# CUDA_TESTS narrows the [cuda] tests (e.g. "[cuda][train]"; none: skip them), CHECK_GPU=0 skips make check-gpu
# (a call that ran them first, alone). Logs and results land in $LOGS
# (default logs/determinism).
#   UFP4_GIT_COMMIT=<commit> [MAKE_REFERENCE=1] tools/gpu-determinism.sh
source "$(dirname "$0")/gpu-common.sh" determinism
if [ "${CUDA_TESTS:-}" != none ]; then
  tools/cuda-tests.sh "$LOGS/cuda-tests.log" "${CUDA_TESTS:-[cuda]}"
  echo "cuda tests exit $? after $(elapsed): $(tail -n 2 "$LOGS/cuda-tests.log" | tr '\n' ' ')"
fi
status=0
for m in experiments/determinism/*.toml; do
  name=$(basename "$m" .toml)
  runs=build/determinism/runs
  rm -rf "$runs" build/determinism/{a,b,c}-"$name"
  s0=$(date +%s%N)
  build/ufp4 run --force "$m" > "$LOGS/$name-a.log" 2>&1 || { echo "$name: run a failed"; tail -n 5 "$LOGS/$name-a.log"; status=1; continue; }
  wall=$(python3 -c "print(round(($(date +%s%N) - $s0) / 1e9, 2))")
  mkdir -p build/determinism/{a,b,c}-"$name"
  mv "$runs"/*.h5 build/determinism/a-"$name"/
  build/ufp4 run --force "$m" > "$LOGS/$name-b.log" 2>&1
  mv "$runs"/*.h5 build/determinism/b-"$name"/
  # c: SIGTERM at 60% of run a's wall time; the run checkpoints at the next step boundary and exits 130.
  at=$(python3 -c "print(round($wall * 0.6, 2))")
  timeout --preserve-status -s TERM "$at" build/ufp4 run --force "$m" > "$LOGS/$name-c1.log" 2>&1
  rc=$?
  echo "$name: run a took ${wall} s; SIGTERM after ${at} s: exit $rc, $(grep -o 'stopped after step [0-9]*' "$LOGS/$name-c1.log")"
  [ "$rc" = 130 ] || { echo "$name: the signal did not stop the run mid-way"; status=1; }
  build/ufp4 run "$m" > "$LOGS/$name-c2.log" 2>&1
  grep -o "resumed from .* at step [0-9]*" "$LOGS/$name-c2.log"
  mv "$runs"/*.h5 build/determinism/c-"$name"/
  for x in b c; do
    build/ufp4 check build/determinism/$x-"$name" --reference build/determinism/a-"$name" --exact > "$LOGS/$name-check-$x.log" 2>&1 || status=1
    echo "$name: run $x against run a (exit $?):"; cat "$LOGS/$name-check-$x.log"
  done
  for x in a b c; do cp build/determinism/$x-"$name"/*.h5 "$LOGS/$name-$x.h5"; done
done
if [ "${MAKE_REFERENCE:-0}" = 1 ]; then
  build/ufp4 run --force experiments/gpu/check.toml > "$LOGS/reference.log" 2>&1 || { tail -n 5 "$LOGS/reference.log"; exit 1; }
  # One folder a GPU model (make check-gpu is bit-exact against the reference of the model it runs on).
  ref="results/reference/gpu/$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 | tr 'A-Z ' 'a-z-')"
  rm -rf "$ref" && mkdir -p "$ref" && cp build/gpu-check/runs/*.h5 "$ref/"
  cp "$ref"/*.h5 "$LOGS/"
  echo "reference: $(ls "$ref")"
fi
if [ "${CHECK_GPU:-1}" = 1 ]; then
  make check-gpu > "$LOGS/check-gpu.log" 2>&1
  echo "make check-gpu exit $?:"; grep -E "^(ok|FAIL|note)" "$LOGS/check-gpu.log"
fi
echo "total $(elapsed)"
exit $status
