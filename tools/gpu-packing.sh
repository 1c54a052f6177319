#!/usr/bin/env bash
# Packing on one GPU: K independent runs of a proxy at once (ufp4 run --gpus 1 --per-gpu K), with and
# without CUDA MPS (--mps on|off), each setting on a GPU of its own (as many at once as the node has GPUs),
# and the tokens/s they reach together (the sum of each run's training-loop tokens/s). Then, for each
# model, seed 1 of the most packed MPS setting trained again alone and compared bit for bit
# (`ufp4 check --exact`): a run's bits must not depend on what shares its GPU. Writes $LOGS/packing.csv,
# $LOGS/exact.log and a Markdown table $LOGS/packing.md (the fastest setting a model, and its tokens/s
# against one run a GPU without MPS). After `make gpu` and the corpus.
#   UFP4_GIT_COMMIT=<commit> [MODELS="dense-ne6.6m moe-ne4.0m"] [PACK="1 2 4 8"] [MPS="off on"] [TOKENS=52428800] [GPUS="0 1"] tools/gpu-packing.sh
# UFP4_BIN: the binary that trains (default build/ufp4), e.g. one built from an earlier commit for a before/after.
set -uo pipefail
export UFP4_REUSE=${UFP4_REUSE:-off}  # what it checks, it trains: no run copied from another folder
cd "$(dirname "$0")/.."
LOGS=${LOGS:-logs/packing}
# Each invocation's runs in a folder of its own: two invocations side by side (a before and an after on two GPUs)
# once shared build/packing/<setting>, removed each other's runs and wrote one log, whose last line gave both rates.
work=build/packing/p$$
rm -rf "$work"
mkdir -p "$LOGS" "$work"
MODELS=${MODELS:-dense-ne6.6m moe-ne4.0m moe-ne5.8m}
PACK=${PACK:-1 2 4 8}
MPS=${MPS:-off on}
TOKENS=${TOKENS:-52428800}  # tokens a GPU trains for each K, split over its K runs
BIN=${UFP4_BIN:-build/ufp4}
# GPUS: the GPUs to use (default: all), e.g. "1 2 3" beside another job on GPU 0.
gpus=(${GPUS:-$(seq 0 $(( $(nvidia-smi -L | wc -l) - 1 )))})
ngpu=${#gpus[@]}
device=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
t0=$(date +%s)
echo "device,model,per_gpu,runs,steps_each,tokens_per_s_sum,tokens_per_s_each_mean,wall_s,mps" > "$LOGS/packing.csv"

manifest() {  # manifest MODEL K DIR: the packing manifest for K runs (seeds 1..K) of MODEL into DIR
  local steps=$(( TOKENS / ($2 * 32768) ))
  sed -e "s/^name = \"dense-ne2.4m\"/name = \"$1\"/" -e "s/^steps = 400/steps = $steps/" \
      -e "s|^dir = \"build/packing\"|dir = \"$3\"|" experiments/bench/packing.toml
  printf '\n[sweep]\n"train.seed" = [%s]\n' "$(seq -s, 1 "$2")"
}

measure() {  # measure MODEL K MODE GPU: one setting on one GPU, its row appended to packing.csv
  local model=$1 k=$2 mode=$3 gpu=$4 name=$1-k$2-mps$3
  local dir=$work/$name steps=$(( TOKENS / ($2 * 32768) ))
  rm -rf "$dir"
  manifest "$model" "$k" "$dir" > $work/$name.toml
  local s=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=$gpu "$BIN" run --force --gpus 1 --per-gpu "$k" --mps "$mode" $work/$name.toml > "$LOGS/$name.log" 2>&1
  local rc=$?
  local wall=$(python3 -c "print(round($(date +%s.%N) - $s, 1))")
  # Each run's last progress line gives its training-loop tokens/s.
  local sum=$(for l in "$dir"/logs/*.log; do grep -o '[0-9]* tok/s' "$l" | tail -n 1; done |
              awk '{s += $1; n += 1} END {printf "%.0f,%.0f,%d", s, n ? s / n : 0, n}')
  local total each runs
  IFS=, read -r total each runs <<< "$sum"
  # A row only where every one of the K runs finished (its results file is there): a partial sum is no rate.
  local done=$(ls "$dir"/*.h5 2>/dev/null | wc -l)
  if [ "$done" = "$k" ] && [ "$runs" = "$k" ]; then
    echo "$device,$model,$k,$runs,$steps,$total,$each,$wall,$([ "$mode" = on ] && echo 1 || echo 0)" >> "$LOGS/packing.csv"
  else
    echo "$model K $k MPS $mode: NOT RECORDED ($done of $k runs finished)"
  fi
  echo "$model K $k MPS $mode: $runs runs of $steps steps, $total tok/s together ($each each), ${wall} s wall, exit $rc ($(( $(date +%s) - t0 )) s)"
  grep -h "CUDA MPS" "$LOGS/$name.log" | head -n 2 | sed 's/^/  /'
}

i=0
pids=()
for model in $MODELS; do
  for mode in $MPS; do
    for k in $PACK; do
      [ "$mode" = on ] && [ "$k" = 1 ] && continue  # one run a GPU shares it with nothing
      measure "$model" "$k" "$mode" "${gpus[i % ngpu]}" &
      pids+=($!)
      i=$((i + 1))
      if [ $(( i % ngpu )) -eq 0 ]; then wait "${pids[@]}"; pids=(); fi
    done
  done
done
wait "${pids[@]}" 2>/dev/null

# Bits: seed 1 of the most packed MPS setting, alone on a GPU without MPS, against its packed self.
kmax=$(echo $PACK | tr ' ' '\n' | sort -n | tail -n 1)
: > "$LOGS/exact.log"
if [[ " $MPS " == *" on "* ]]; then
  i=0
  for model in $MODELS; do
    (
      packed=$work/$model-k$kmax-mpson alone=$work/$model-k$kmax-alone
      rm -rf "$alone"
      manifest "$model" "$kmax" "$alone" > "$alone.toml"
      first=$(ls "$packed"/*-1-*.h5 2>/dev/null | head -n 1)
      [ -n "$first" ] || { echo "$model: no packed run to check (the K = $kmax MPS setting left no results)" >> "$LOGS/exact.log"; exit 0; }
      name=$(basename "$first" | sed 's/-[0-9a-f]\{16\}\.h5$//')
      CUDA_VISIBLE_DEVICES=${gpus[i % ngpu]} "$BIN" run --force --only "$name" "$alone.toml" > "$LOGS/$model-alone.log" 2>&1
      # The reference folder holds that run only (every reference run must be among the files checked).
      rm -rf "$alone-ref" && mkdir -p "$alone-ref" && cp "$packed/$name"-*.h5 "$alone-ref/"
      "$BIN" check "$alone"/*.h5 --reference "$alone-ref" --exact > "$LOGS/$model-exact.log" 2>&1
      echo "$model: $name alone against its run among $kmax under MPS: check exit $?: $(grep -c '^ok' "$LOGS/$model-exact.log") ok, $(grep -c '^FAIL' "$LOGS/$model-exact.log") FAIL" >> "$LOGS/exact.log"
    ) &
    i=$((i + 1))
    [ $(( i % ngpu )) -eq 0 ] && wait  # alone: one run a GPU
  done
  wait
  cat "$LOGS/exact.log"
fi

{
  echo "# Packing: independent runs a GPU, with and without CUDA MPS (tools/gpu-packing.sh)"
  echo
  echo "$device x $ngpu, commit ${UFP4_GIT_COMMIT:-$(git rev-parse --short=12 HEAD 2>/dev/null)}, $(date -u +%Y-%m-%dT%H:%MZ); ufp4 recipe, 32 x 1024 tokens a step,"
  echo "$TOKENS tokens a GPU for each setting (split over its K runs, each setting on a GPU of its own). Tokens/s together: the"
  echo "sum of each run's training-loop tokens/s (the last progress line of its log)."
  echo
  echo "| model | runs a GPU (K) | MPS | steps a run | tokens/s together | tokens/s a run | wall (s) |"
  echo "|---|---|---|---|---|---|---|"
  tail -n +2 "$LOGS/packing.csv" | sort -t, -k2,2 -k9,9n -k3,3n |
    awk -F, '{printf "| %s | %s | %s | %s | %s | %s | %s |\n", $2, $3, ($9 == 1 ? "on" : "off"), $5, $6, $7, $8}'
  echo
  echo "| model | one run a GPU (tokens/s) | fastest without MPS | fastest | fastest over one run a GPU |"
  echo "|---|---|---|---|---|"
  for model in $MODELS; do
    grep ",$model," "$LOGS/packing.csv" | awk -F, -v m="$model" '
      $3 == 1 && $9 == 0 { one = $6 }
      $9 == 0 && $6 > off { off = $6; koff = $3 }
      $6 > best { best = $6; kb = $3; mb = $9 }
      END { printf "| %s | %s | %s | %.0f (K = %d%s) | %s |\n", m, (one > 0 ? sprintf("%.0f", one) : "not measured"),
                   (off > 0 ? sprintf("%.0f (K = %d)", off, koff) : "not measured"), best, kb, (mb == 1 ? ", MPS" : ""),
                   (one > 0 ? sprintf("%.2fx", best / one) : "-") }'
  done
  if [[ " $MPS " == *" on "* ]]; then
    echo
    echo "Bits (seed 1 of K = $kmax under MPS, trained again alone without MPS, \`ufp4 check --exact\`):"
    echo
    sed 's/^/- /' "$LOGS/exact.log"
  fi
} > "$LOGS/packing.md"
cat "$LOGS/packing.md"
rm -rf "$work"  # the runs' rates and checks are in $LOGS
