#!/usr/bin/env bash
# Sweep the columnwise SR kernel's knobs on a GPU node after tools/gpu-build.sh: for each setting,
# rebuild the hot kernel alone and time the fused columnwise kernels (RTNE and SR, E2M1 and E1M2)
# in one run, printing SR / RTNE throughput per shape. The build is left at the defaults.
#   tools/tune-hot.sh [build-dir] ["BLOCKS TILES" ...]    e.g. tools/tune-hot.sh build "6 2" "8 2" "8 4"
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
shift || true
settings=("$@")
[ ${#settings[@]} -eq 0 ] && settings=("6 2" "8 1" "8 2" "8 4" "10 2")
for s in "${settings[@]}"; do
  read -r blocks tiles <<< "$s"
  cmake "$build" -DUFP4_HOT_TUNE="UFP4_HOT_COL_SR_BLOCKS=$blocks;UFP4_HOT_COL_SR_TILES=$tiles" > /dev/null &&
    cmake --build "$build" --target ufp4 -j "$(nproc)" > /dev/null || { echo "tune-hot: build failed for $s" >&2; continue; }
  out=$(mktemp -d)
  "$build/ufp4" bench kernels --out-dir "$out" --filter '^quantize/fused/e[12]m[12]/(rtne|sr)/col/(16384x2048|16384x5632|8192x8192)/' \
    > "$out/log" 2>&1 || { echo "tune-hot: bench failed for $s"; tail -n 3 "$out/log"; continue; }
  python3 - "$out/kernels.json" "$s" <<'PY'
import json, sys
t = {}
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    if b.get("aggregate_name") == "median":
        f = b["run_name"].split("/")
        t[(f[2], f[3], f[5])] = b["real_time"]
print("blocks, tiles = %s:" % sys.argv[2].replace(" ", ", "),
      "  ".join("%s %s SR/RTNE %.3f (%.1f us)" % (g, s, t[(g, "rtne", s)] / t[(g, "sr", s)], t[(g, "sr", s)])
                for (g, r, s) in sorted(t) if r == "sr" and (g, "rtne", s) in t))
PY
  rm -rf "$out"
done
cmake "$build" -DUFP4_HOT_TUNE="" > /dev/null && cmake --build "$build" --target ufp4 -j "$(nproc)" > /dev/null
