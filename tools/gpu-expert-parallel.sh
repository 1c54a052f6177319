#!/usr/bin/env bash
# One GPU command for expert parallelism on a 4-GPU machine: build; the MoE proxy of
# experiments/dist/ep_correctness.toml on 4 ranks at EP 1, 2 (twice, and once stopped and resumed) and 4,
# compared by `ufp4 check` (bf16: every layout against EP 1 within the tolerance; ufp4: reruns and the
# resume bit for bit); moe-7.9b trained 300 steps of bf16 and ufp4 at EP 2 x DP 2
# (experiments/dist/moe7.9b_ep.toml); `ufp4 bench scaling` of moe-7.9b's step at EP 2 x DP 2 and of one
# moe-124b MoE layer on 1 GPU and at EP 4 (results/bench/expert_parallel{,_layer}.h5). Logs, results and
# bench files land in $LOGS (default logs/expert-parallel); STAGES picks some of: correctness moe7.9b bench.
#   UFP4_GIT_COMMIT=<commit> [STAGES="correctness moe7.9b bench"] tools/gpu-expert-parallel.sh
source "$(dirname "$0")/gpu-common.sh" expert-parallel
export NCCL_NVLS_ENABLE=0
ensure_default_corpus
stages=${STAGES:-correctness moe7.9b bench}
status=0
m=experiments/dist/ep_correctness.toml
train() {  # train NAME ARGS...: 4 ranks into build/ep/runs, kept as build/ep/NAME
  local name=$1; shift
  rm -rf build/ep/runs
  local s0=$(date +%s)
  build/ufp4 run "$m" --force --nproc-per-node 4 "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(( $(date +%s) - s0 )) s ($*)"
  [ "$rc" = 0 ] || { tail -n 8 "$LOGS/$name.log"; status=1; }
  rm -rf build/ep/"$name" && cp -r build/ep/runs build/ep/"$name" && cp build/ep/"$name"/*.h5 "$LOGS/" 2>/dev/null
}
check() {  # check A B RECIPES [--exact]: A's runs of those recipes against B's
  local files=()
  for r in $3; do files+=(build/ep/"$1"/ep_correctness-"$r"-*.h5); done
  build/ufp4 check "${files[@]}" --reference build/ep/"$2" ${4:-} > "$LOGS/check-$1-vs-$2.log" 2>&1 || status=1
  echo "check $1 against $2 ($3) ${4:-}:"; sed 's/^/  /' "$LOGS/check-$1-vs-$2.log"
}
if [[ " $stages " == *" correctness "* ]]; then
  train ep1 --ep 1
  train ep2a --ep 2
  train ep2b --ep 2
  train ep4 --ep 4
  rm -rf build/ep/runs
  build/ufp4 run "$m" --nproc-per-node 4 --ep 2 --stop-after 100 > "$LOGS/ep2c-stop.log" 2>&1
  echo "ep2c: stopped: $(grep -o 'stopped after step [0-9]*' "$LOGS/ep2c-stop.log" | head -n 1); files: $(ls build/ep/runs | tr '\n' ' ')"
  build/ufp4 run "$m" --nproc-per-node 4 --ep 2 > "$LOGS/ep2c.log" 2>&1 || status=1
  rm -rf build/ep/ep2c && cp -r build/ep/runs build/ep/ep2c
  check ep2b ep2a "bf16 ufp4" --exact
  check ep2c ep2a "bf16 ufp4" --exact
  # Across layouts bf16 only: 4-bit rounding turns summation-order differences into other codes (README).
  check ep2a ep1 bf16
  check ep4 ep1 bf16
fi
if [[ " $stages " == *" moe7.9b "* ]]; then
  rm -rf build/ep/moe7.9b
  s0=$(date +%s)
  build/ufp4 run experiments/dist/moe7.9b_ep.toml --nproc-per-node 4 > "$LOGS/moe7.9b.log" 2>&1
  rc=$?
  [ "$rc" = 0 ] || status=1
  echo "moe7.9b: exit $rc after $(( $(date +%s) - s0 )) s"; grep -h "data parallel:\|validation loss\|step 300/300" "$LOGS/moe7.9b.log" | sed 's/^/  /'
  cp build/ep/moe7.9b/*.h5 "$LOGS/" 2>/dev/null
  build/ufp4 plan --model moe-7.9b --gpus 4 --micro-batch 1 > "$LOGS/plan-moe7.9b.log" 2>&1
fi
if [[ " $stages " == *" bench "* ]]; then
  build/ufp4 bench scaling --models moe-7.9b --recipes bf16,ufp4 --gpus 4 --ep 2 --batch 1 --micro-batch 1 --seq 4096 --out-dir "$LOGS" > "$LOGS/bench-moe7.9b.log" 2>&1 || status=1
  grep "bench scaling: 4 rank(s) moe" "$LOGS/bench-moe7.9b.log"
  build/ufp4 bench scaling --models moe-124b --recipes bf16,ufp4 --gpus 1,4 --ep 4 --moe-layer --batch 1 --seq 4096 --out-dir "$LOGS" > "$LOGS/bench-moe124b-layer.log" 2>&1 || status=1
  grep "bench scaling: [14] rank(s) moe" "$LOGS/bench-moe124b-layer.log"
fi
echo "total $(elapsed), status $status"
exit $status
