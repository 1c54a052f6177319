#!/usr/bin/env bash
# One GPU command that builds, runs the [cuda] tests, and trains/analyses what the committed results
# lack, all GPUs busy at once; results land in results/ and reports/, logs in $LOGS.
#   UFP4_GIT_COMMIT=<commit> tools/gpu-session.sh [seconds for the training runs]
set -uo pipefail
export UFP4_REUSE=${UFP4_REUSE:-off}  # what it checks, it trains: no run copied from another folder
cd "$(dirname "$0")/.."
LOGS=${LOGS:-logs}
BUDGET=${1:-420}
mkdir -p "$LOGS"
# Run outputs live in an ignored folder (logs/) behind a link, so a warm node's re-synced work tree
# keeps them and a second command resumes from the checkpoints.
for d in results/figure9 results/analysis; do
  [ -L "$d" ] || { mkdir -p "$LOGS/keep/$d"; rm -rf "$d"; mkdir -p "$(dirname "$d")"; ln -s "$PWD/$LOGS/keep/$d" "$d"; }
done
t0=$(date +%s)
make gpu > "$LOGS/build.log" 2>&1 || { tail -n 40 "$LOGS/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
[ -f data/python/data.toml ] || build/ufp4 data prepare --out data/python > "$LOGS/data.log" 2>&1
ngpu=$(nvidia-smi -L | wc -l)
last=$((ngpu - 1))
( CUDA_VISIBLE_DEVICES=$last build/ufp4_tests "[cuda]" > "$LOGS/cuda-tests.log" 2>&1; echo "cuda tests exit $?" >> "$LOGS/cuda-tests.log" ) &
tests=$!
# The analysis capture run, then its analysis, next to the ladder.
( CUDA_VISIBLE_DEVICES=0 timeout "$BUDGET" bash tools/reproduce-analysis.sh build proxy > "$LOGS/analysis.log" 2>&1 ) &
analysis=$!
# The ladder, largest first; its middle point is the Figure 8 MoE proxy.
ladder=(experiments/figure9/proxy/moe-ne5.8m.toml experiments/figure9/proxy/moe-ne4.0m.toml experiments/figure8/moe_proxy.toml
        experiments/figure9/proxy/moe-ne1.5m.toml experiments/figure9/proxy/moe-ne0.65m.toml)
timeout "$BUDGET" build/ufp4 run --gpus "$ngpu" --per-gpu 12 "${ladder[@]}" > "$LOGS/ladder.log" 2>&1
echo "ladder exit $? after $(( $(date +%s) - t0 )) s"
wait "$analysis"; echo "analysis exit $?"
wait "$tests"; tail -n 3 "$LOGS/cuda-tests.log"
build/ufp4 fit --results results/figure9 results/figure8 --prefix figure9_,figure8_moe --out results/fits/figure9-proxy.h5 > "$LOGS/fit.log" 2>&1 && \
  build/ufp4 report figure9 > /dev/null 2>> "$LOGS/fit.log"
tail -n 12 "$LOGS/fit.log"
echo "total $(( $(date +%s) - t0 )) s"
