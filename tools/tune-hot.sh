#!/usr/bin/env bash
# Sweep the columnwise SR kernel's knobs on a GPU node after tools/gpu-build.sh: for each setting,
# rebuild the hot kernel alone (CHECK=1: and hold it to the CPU reference), and time the fused kernels
# (RTNE and SR, E2M1 and E1M2, rowwise and columnwise) in one run, printing SR / RTNE throughput per
# shape. The build is left at the defaults.
#   tools/tune-hot.sh [build-dir] ["BLOCKS TILES EARLY_DRAWS RELOAD DIRECT PREFETCH L2_LINE" ...]    e.g. tools/tune-hot.sh build "7 2 1 0 1 0 1" "6 2 1 0 0"
# (fields left out keep the kernel's defaults)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
settings=("$@")
[ ${#settings[@]} -eq 0 ] && settings=("7 2 1 0 1 0 1" "7 2 1 0 1 0 0" "8 2 0 0 1 0 1" "6 2 1 0 0 0")
knobs=(UFP4_HOT_COL_SR_BLOCKS UFP4_HOT_COL_SR_TILES UFP4_HOT_COL_SR_EARLY_DRAWS UFP4_HOT_COL_SR_RELOAD UFP4_HOT_COL_SR_DIRECT UFP4_HOT_COL_SR_PREFETCH UFP4_HOT_COL_SR_L2_LINE)
for s in "${settings[@]}"; do
  read -r -a vals <<< "$s"
  defs=""
  for i in "${!vals[@]}"; do defs="$defs${defs:+;}${knobs[$i]}=${vals[$i]}"; done
  cmake "$build" -DUFP4_HOT_TUNE="$defs" > /dev/null &&
    cmake --build "$build" --target ufp4 -j "$(nproc)" > /dev/null || { echo "tune-hot: build failed for $s" >&2; continue; }
  # Each setting is a different kernel: CHECK=1 holds each to the CPU reference (slow: it relinks and
  # runs the test binary); otherwise run the [cuda] tests on the setting you choose.
  if [ "${CHECK:-0}" = 1 ]; then
    cmake --build "$build" --target ufp4_tests -j "$(nproc)" > /dev/null &&
      "$build/ufp4_tests" "CUDA == CPU on the hot kernel*" > /dev/null 2>&1 || { echo "tune-hot: the hot kernel's [cuda] test failed for $s"; continue; }
  fi
  out=$(mktemp -d)
  "$build/ufp4" bench kernels --out-dir "$out" --filter '^quantize/fused/e[12]m[12]/(rtne|sr)/(row|col)/(16384x2048|16384x5632|8192x8192)/' \
    > "$out/log" 2>&1 || { echo "tune-hot: bench failed for $s"; tail -n 3 "$out/log"; continue; }
  python3 - "$out/kernels.json" "$s" <<'PY'
import json, sys
t = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        f = b["run_name"].split("/")
        t[(f[2], f[3], f[4], f[5])] = b["real_time"]
print("blocks, tiles, early draws, reload, direct, prefetch, l2 line = %s:" % sys.argv[2].replace(" ", ", "))
for lay in ("row", "col"):
    print("  %s:" % lay, "  ".join("%s %s SR/RTNE %.3f (%.1f us)" % (g, s, t[(g, "rtne", l, s)] / t[(g, "sr", l, s)], t[(g, "sr", l, s)])
                                   for (g, r, l, s) in sorted(t) if r == "sr" and l == lay and (g, "rtne", l, s) in t))
PY
  rm -rf "$out"
done
cmake "$build" -DUFP4_HOT_TUNE="" > /dev/null && cmake --build "$build" -j "$(nproc)" > /dev/null
