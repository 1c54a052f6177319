#!/usr/bin/env bash
# Packing on one GPU: K independent runs of a proxy at once (ufp4 run --gpus 1 --per-gpu K), for each K
# on a GPU of its own (all four K at once on a 4-GPU node; one after another on fewer), and the tokens/s
# they reach together (the sum of each run's training-loop tokens/s). Writes $LOGS/packing.csv and a
# Markdown table $LOGS/packing.md with the fastest K a model. After `make gpu` and the corpus.
#   UFP4_GIT_COMMIT=<commit> [MODELS="dense-ne2.4m dense-ne6.6m"] [PACK="1 2 4 9"] [TOKENS=52428800] tools/gpu-packing.sh
set -uo pipefail
export UFP4_REUSE=${UFP4_REUSE:-off}  # what it checks, it trains: no run copied from another folder
cd "$(dirname "$0")/.."
LOGS=${LOGS:-logs/packing}
mkdir -p "$LOGS"
MODELS=${MODELS:-dense-ne2.4m dense-ne6.6m}
PACK=${PACK:-1 2 4 9}
TOKENS=${TOKENS:-52428800}  # tokens a GPU trains for each K, split over its K runs
ngpu=$(nvidia-smi -L | wc -l)
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
echo "device,model,per_gpu,runs,steps_each,tokens_per_s_sum,tokens_per_s_each_mean,wall_s" > "$LOGS/packing.csv"
for model in $MODELS; do
  i=0
  pids=()
  for k in $PACK; do
    steps=$(( TOKENS / (k * 32768) ))
    seeds=$(seq -s, 1 "$k")
    m=build/packing/$model-k$k.toml
    mkdir -p build/packing
    sed -e "s/^name = \"dense-ne2.4m\"/name = \"$model\"/" -e "s/^steps = 400/steps = $steps/" \
        -e "s|^dir = \"build/packing\"|dir = \"build/packing/$model-k$k\"|" experiments/bench/packing.toml > "$m"
    printf '\n[sweep]\n"train.seed" = [%s]\n' "$seeds" >> "$m"
    gpu=$(( i % ngpu ))
    (
      s=$(date +%s.%N)
      CUDA_VISIBLE_DEVICES=$gpu build/ufp4 run --force --gpus 1 --per-gpu "$k" "$m" > "$LOGS/$model-k$k.log" 2>&1
      rc=$?
      wall=$(python3 -c "print(round($(date +%s.%N) - $s, 1))")
      # Each run's last progress line gives its training-loop tokens/s.
      sum=$(for l in build/packing/$model-k$k/logs/*.log; do grep -o '[0-9]* tok/s' "$l" | tail -n 1; done |
            awk '{s += $1; n += 1} END {printf "%.0f,%.0f,%d", s, n ? s / n : 0, n}')
      IFS=, read -r total each runs <<< "$sum"
      echo "$device,$model,$k,$runs,$steps,$total,$each,$wall" >> "$LOGS/packing.csv"
      echo "$model per-gpu $k: $runs runs of $steps steps, $total tok/s together ($each each), ${wall} s wall, exit $rc"
    ) &
    pids+=($!)
    i=$((i + 1))
    if [ $(( i % ngpu )) -eq 0 ]; then wait "${pids[@]}"; pids=(); fi
  done
  wait "${pids[@]}" 2>/dev/null
done
{
  echo "# Packing: independent runs a GPU (tools/gpu-packing.sh)"
  echo
  echo "$device x $ngpu, commit ${UFP4_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null)}, $(date -u +%Y-%m-%dT%H:%MZ); ufp4 recipe, 32 x 1024 tokens a step,"
  echo "$TOKENS tokens a GPU for each K (split over its K runs, each K on a GPU of its own). Tokens/s together: the sum of each"
  echo "run's training-loop tokens/s (the last progress line of its log)."
  echo
  echo "| model | runs a GPU (K) | steps a run | tokens/s together | tokens/s a run | wall (s) |"
  echo "|---|---|---|---|---|---|"
  tail -n +2 "$LOGS/packing.csv" | sort -t, -k2,2 -k3,3n | awk -F, '{printf "| %s | %s | %s | %s | %s | %s |\n", $2, $3, $5, $6, $7, $8}'
  echo
  for model in $MODELS; do
    best=$(grep ",$model," "$LOGS/packing.csv" | sort -t, -k6,6n | tail -n 1 | cut -d, -f3)
    echo "- $model: fastest at K = $best"
  done
} > "$LOGS/packing.md"
cat "$LOGS/packing.md"
