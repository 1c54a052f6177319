#!/usr/bin/env bash
# The run scheduler's liveness stress on this machine's GPUs: experiments/stress/stress.toml (18 runs of
# the dense proxy whose runs stalled, a checkpoint every 100 steps, PER_GPU a GPU), trained from scratch
# REPEAT times, then once more stopped by SIGTERM after TERM_AT seconds, timing the stop. Prints a line
# a repetition (runs done, stalled runs, kernel waits stopped, time); the logs go into $OUT.
#   UFP4_GIT_COMMIT=<commit> [REPEAT=3] [PER_GPU=4] [STALL=60] [TERM_AT=30] tools/gpu-stress.sh
source "$(dirname "$0")/gpu-common.sh" stress
ngpu=$(nvidia-smi -L | wc -l)
m=experiments/stress/stress.toml
runs=$(build/ufp4 plan "$m" 2>/dev/null | grep -c '^stress-')
ensure_default_corpus
for rep in $(seq 1 "${REPEAT:-3}") stop; do
  rm -rf build/stress
  limit=100000
  [ "$rep" = stop ] && limit=${TERM_AT:-30}
  s=$(date +%s)
  timeout -s TERM "$limit" build/ufp4 run "$m" --gpus "$ngpu" --per-gpu "${PER_GPU:-4}" --stall-timeout "${STALL:-60}" > "$LOGS/run-$rep.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - s ))
  done_runs=$(ls build/stress/*.h5 2>/dev/null | wc -l)
  stalled=$(grep -l "no progress for" build/stress/logs/*.log 2>/dev/null | wc -l)
  stopped_waits=$(grep -l "ufp4 attention backward: .* waited" build/stress/logs/*.log 2>/dev/null | wc -l)
  line="stress $rep: exit $rc, $done_runs of $runs runs done, $stalled stalled, $stopped_waits kernel waits stopped, $took s"
  [ "$rep" = stop ] && line="$line (SIGTERM at $limit s: the command ended $(( took - limit )) s after it)"
  echo "$line (total $(elapsed))"
  mkdir -p "$LOGS/$rep" && cp build/stress/logs/*.log "$LOGS/$rep/" 2>/dev/null
done
[ -z "${OUT:-}" ] || tar czf "$OUT/stress-logs.tgz" -C "$LOGS" .
