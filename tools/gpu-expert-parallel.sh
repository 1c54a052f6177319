#!/usr/bin/env bash
# One GPU command for expert parallelism on a machine of 2 or 4 GPUs: build, then
#  correctness: the MoE proxy moe-ne4.0m (16 routed experts) of experiments/dist/ep_correctness*.toml,
#    - at learning rate 0 (ep_correctness_lr0.toml: every layout computes the same function of the same
#      tokens), by one process and by all the GPUs at EP 1 (data parallelism), 2 and 4: each layout's loss
#      at every step against one process's, within `ufp4 check`'s 2e-3 (bf16 and ufp4);
#    - trained 200 steps (ep_correctness.toml) at EP 2 twice and once stopped and resumed: bit for bit
#      (`ufp4 check --exact`, bf16 and ufp4);
#    - trained 200 steps by one process and at EP 1, 2, 4: the final validation losses side by side (a
#      trajectory drifts from any change in the order of sums; one process against data parallelism is
#      the yardstick of that drift);
#  moe7.9b: moe-7.9b trained 300 steps of bf16 and ufp4 at EP 2 x DP 2 (experiments/dist/moe7.9b_ep.toml);
#  bench: `ufp4 bench scaling` of moe-7.9b's step at EP 2 x DP 2 and of one moe-124b MoE layer on 1 GPU and
#    at EP 4 (results/bench/expert_parallel{,_layer}.h5).
# Logs, results and bench files land in $LOGS (default logs/expert-parallel); STAGES picks some of:
# correctness moe7.9b bench. STACKS_AFTER=S: a moe7.9b or bench stage still running S seconds after it began has its
# processes' stacks written to $LOGS/stacks-<stage>.log (stack_watch, gpu-common.sh; it disturbs the timings after).
#   UFP4_GIT_COMMIT=<commit> [STAGES="correctness moe7.9b bench"] tools/gpu-expert-parallel.sh
source "$(dirname "$0")/gpu-common.sh" expert-parallel
export NCCL_NVLS_ENABLE=0
ensure_default_corpus
stages=${STAGES:-correctness moe7.9b bench}
# 4 GPUs where the node has 4 or more, else 2: the proxy's batch of 16 in micro-batches of 4 splits over 2 or 4
# ranks, and EP 2 and 4 must divide them.
gpus=$(nvidia-smi -L | wc -l)
if [ "$gpus" -ge 4 ]; then gpus=4; elif [ "$gpus" -ge 2 ]; then gpus=2; else echo "expert parallelism needs 2 GPUs or more"; exit 1; fi
export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((gpus - 1)))
status=0
m=experiments/dist/ep_correctness.toml
m0=experiments/dist/ep_correctness_lr0.toml
train() {  # train NAME MANIFEST ARGS...: into build/ep/runs, kept as build/ep/NAME
  local name=$1 manifest=$2
  shift 2
  rm -rf build/ep/runs
  local s0=$(date +%s)
  build/ufp4 run "$manifest" --force "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(( $(date +%s) - s0 )) s ($*)"
  [ "$rc" = 0 ] || { tail -n 8 "$LOGS/$name.log"; status=1; }
  rm -rf build/ep/"$name" && cp -r build/ep/runs build/ep/"$name"
  for f in build/ep/"$name"/*.h5; do [ -f "$f" ] && cp "$f" "$LOGS/$name-$(basename "$f")"; done
}
check() {  # check A B [--exact]: A's runs against B's
  build/ufp4 check build/ep/"$1"/*.h5 --reference build/ep/"$2" ${3:-} > "$LOGS/check-$1-vs-$2.log" 2>&1 || status=1
  echo "check $1 against $2 ${3:-}:"; sed 's/^/  /' "$LOGS/check-$1-vs-$2.log"
}
layouts="1 2"; [ "$gpus" -ge 4 ] && layouts="1 2 4"
if [[ " $stages " == *" correctness "* ]]; then
  train lr0-one "$m0"
  for e in $layouts; do
    train lr0-ep$e "$m0" --nproc-per-node "$gpus" --ep "$e"
    check lr0-ep$e lr0-one
  done
  train ep2a "$m" --nproc-per-node "$gpus" --ep 2
  train ep2b "$m" --nproc-per-node "$gpus" --ep 2
  rm -rf build/ep/runs
  build/ufp4 run "$m" --nproc-per-node "$gpus" --ep 2 --stop-after 100 > "$LOGS/ep2c-stop.log" 2>&1
  echo "ep2c: $(grep -o 'stopped after step [0-9]*' "$LOGS/ep2c-stop.log" | head -n 1)"
  build/ufp4 run "$m" --nproc-per-node "$gpus" --ep 2 > "$LOGS/ep2c.log" 2>&1 || status=1
  rm -rf build/ep/ep2c && cp -r build/ep/runs build/ep/ep2c
  check ep2b ep2a --exact
  check ep2c ep2a --exact
  train one "$m"
  for e in $layouts; do [ "$e" = 2 ] || train ep$e "$m" --nproc-per-node "$gpus" --ep "$e"; done
  echo "final validation loss after 200 steps (one process; then $gpus ranks at EP $(echo $layouts | sed 's/ /, /g')):"
  for r in bf16 ufp4; do
    line="  $r:"
    for x in one $(for e in $layouts; do [ "$e" = 2 ] && echo ep2a || echo ep$e; done); do
      line="$line $x $(grep -h "ep_correctness-$r: step 200 validation loss" "$LOGS/$x.log" | awk '{print $NF}')"
    done
    echo "$line"
  done
fi
if [ "$gpus" -lt 4 ] && [[ " $stages " == *" moe7.9b "* || " $stages " == *" bench "* ]]; then
  echo "moe7.9b and bench: skipped (EP 2 x DP 2 and EP 4 need 4 GPUs; this node has $gpus)"
  stages=${stages//moe7.9b/}
  stages=${stages//bench/}
fi
if [[ " $stages " == *" moe7.9b "* ]]; then
  rm -rf build/ep/moe7.9b
  s0=$(date +%s)
  watch=$(stack_watch "${STACKS_AFTER:-}" "$LOGS/stacks-moe7.9b.log")
  build/ufp4 run experiments/dist/moe7.9b_ep.toml --nproc-per-node 4 > "$LOGS/moe7.9b.log" 2>&1
  rc=$?
  [ -n "$watch" ] && kill "$watch" 2> /dev/null
  [ -f "$LOGS/stacks-moe7.9b.log" ] && head -n 1 "$LOGS/stacks-moe7.9b.log"
  [ "$rc" = 0 ] || status=1
  echo "moe7.9b: exit $rc after $(( $(date +%s) - s0 )) s"; grep -h "data parallel:\|validation loss\|step 300/300" "$LOGS/moe7.9b.log" | sed 's/^/  /'
  cp build/ep/moe7.9b/*.h5 "$LOGS/" 2>/dev/null
  build/ufp4 plan --model moe-7.9b --gpus 4 --micro-batch 1 > "$LOGS/plan-moe7.9b.log" 2>&1
fi
if [[ " $stages " == *" bench "* ]]; then
  watch=$(stack_watch "${STACKS_AFTER:-}" "$LOGS/stacks-bench.log")
  # One command a recipe, each row kept as it finishes (--append; the layer's file after each world size too).
  rm -f "$LOGS/expert_parallel.h5" "$LOGS/expert_parallel_layer.h5" "$LOGS/bench-moe7.9b.log" "$LOGS/bench-moe124b-layer.log"
  for r in bf16 ufp4; do
    build/ufp4 bench scaling --models moe-7.9b --recipes "$r" --gpus 4 --ep 2 --batch 1 --micro-batch 1 --seq 4096 --out-dir "$LOGS" --append >> "$LOGS/bench-moe7.9b.log" 2>&1 || status=1
  done
  grep "bench scaling: 4 rank(s) moe" "$LOGS/bench-moe7.9b.log"
  for r in bf16 ufp4; do
    build/ufp4 bench scaling --models moe-124b --recipes "$r" --gpus 1,4 --ep 4 --moe-layer --batch 1 --micro-batch 1 --seq 4096 --out-dir "$LOGS" --append >> "$LOGS/bench-moe124b-layer.log" 2>&1 || status=1
  done
  grep "bench scaling: [14] rank(s) moe" "$LOGS/bench-moe124b-layer.log"
  [ -n "$watch" ] && kill "$watch" 2> /dev/null
  [ -f "$LOGS/stacks-bench.log" ] && head -n 1 "$LOGS/stacks-bench.log"
fi
echo "total $(elapsed), status $status"
exit $status
