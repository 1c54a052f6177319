#!/usr/bin/env bash
# The shrinkage-bias analysis.
#   SCALE = proxy (GPUs): the mechanism on current-corpus runs (experiments/analysis/mechanism_{dense,moe}.toml:
#     12-layer dense and MoE proxies, bf16 / e2m1_ref / ufp4 x 3 seeds, operands captured at three steps and
#     analysed as they train), `ufp4 analyze capture` shards on every GPU (SHARDS_PER_GPU each, default 1: a
#     captured step's operands stay on the GPU while they are analysed; finished runs skipped, partial ones
#     resumed), then reports/mechanism.md.
#   SCALE = ci (CPU, seconds): the same at CI scale into build/ci (experiments/analysis/mechanism_ci.toml), and
#     Figures 2, 4-7, 12 and the attenuation chain from a capture file (experiments/analysis/ci.toml).
# The archived analysis of the earlier corpus renders with `ufp4 report analysis` (reports/archive/analysis.md).
#   tools/reproduce-analysis.sh BUILD SCALE
set -euo pipefail
BUILD=${1:-build}
SCALE=${2:-proxy}
UFP4="$BUILD/ufp4"
case "$SCALE" in
  proxy)
    # The GPUs of CUDA_VISIBLE_DEVICES when it is set (a command beside this one may hold the others), else all.
    if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then IFS=, read -ra devs <<< "$CUDA_VISIBLE_DEVICES"
    else mapfile -t devs < <(nvidia-smi -L 2>/dev/null | grep '^GPU' | sed 's/^GPU \([0-9]*\):.*/\1/'); fi
    gpus=${#devs[@]}
    [ "$gpus" -ge 1 ] || { echo "reproduce-analysis: SCALE=proxy trains on GPUs and nvidia-smi lists none here (SCALE=ci runs on the CPU)" >&2; exit 2; }
    # The data once, before the shards start (they would each prepare it).
    [ -f data/python-8k/data.toml ] || "$UFP4" data prepare --out data/python-8k --vocab-size 8192 > /dev/null
    mkdir -p logs
    n=$(( gpus * ${SHARDS_PER_GPU:-1} ))
    # The MoE proxy's runs first: the longest, and those a call cut short would leave the report without.
    pids=()
    for i in $(seq 0 $(( n - 1 ))); do
      CUDA_VISIBLE_DEVICES=${devs[$(( i % gpus ))]} "$UFP4" analyze capture experiments/analysis/mechanism_moe.toml experiments/analysis/mechanism_dense.toml \
        --shard "$i/$n" > "logs/analysis-shard$i.log" 2>&1 &
      pids+=($!)
    done
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    [ "$status" = 0 ] || { echo "reproduce-analysis: a shard failed (logs/analysis-shard*.log; run again to resume)" >&2; exit 1; }
    "$UFP4" report mechanism --force > /dev/null
    echo "report written: reports/mechanism.md"
    ;;
  ci)
    OUT=build/ci/analysis; REPORT=build/ci/reports/analysis.md; MANIFEST=experiments/analysis/ci.toml
    mkdir -p "$OUT" build/ci/reports
    "$UFP4" run "$MANIFEST"
    [ -f "$OUT/tensors-tiny.h5" ] || "$UFP4" analyze tensors "$MANIFEST" --tokens 256 --out "$OUT/tensors-tiny.h5"
    [ -f "$OUT/chain-random.h5" ] || "$UFP4" analyze chain --depth 16 --dim 64 --tokens 256 --input student-t --out "$OUT/chain-random.h5"
    [ -f "$OUT/chain-captured.h5" ] || "$UFP4" analyze chain --capture "$MANIFEST" --input captured --depth 16 --tokens 256 --out "$OUT/chain-captured.h5"
    "$UFP4" report analysis --tensors "$OUT/tensors-tiny.h5" --chain "$OUT/chain-random.h5" "$OUT/chain-captured.h5" --out "$REPORT" > /dev/null
    echo "report written: $REPORT"
    "$UFP4" analyze capture experiments/analysis/mechanism_ci.toml > /dev/null
    "$UFP4" report mechanism --results build/ci/mechanism --out build/ci/reports/mechanism.md > /dev/null
    echo "report written: build/ci/reports/mechanism.md"
    ;;
  *) echo "reproduce-analysis: SCALE '$SCALE' is not allowed (allowed: proxy, ci)" >&2; exit 2 ;;
esac
