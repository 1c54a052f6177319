#!/usr/bin/env bash
# One GPU command for an experiment campaign: build, prepare the default corpus of each vocabulary
# the manifests ask for (timed; the corpus is this node's Python and CUDA sources), plan, then run
# the manifests several to a GPU and gather results and logs. RUN_SECONDS=S sends SIGTERM after S
# seconds of training: every run checkpoints and stops, and the same command resumes them
# (bit-identical) on a machine that still holds the checkpoints. Results stay in the manifests'
# outputs folders; logs land in $LOGS. Between device calls the working tree is synchronised again:
# result files (not git-ignored) that are not in the local tree are deleted there, checkpoints
# (ignored) stay. Unpack each call's results here before the next call, or finished runs train again.
#   UFP4_GIT_COMMIT=<commit> PER_GPU=9 [RUN_SECONDS=S | RUN_UNTIL=T] tools/gpu-campaign.sh MANIFEST...
source "$(dirname "$0")/gpu-common.sh" campaign
# Each data folder the manifests name, prepared once (ufp4 run would prepare it too, untimed).
for dv in $(grep -h -A4 '^\[data\]' "$@" | awk -F' = ' '/^path/{p=$2} /^vocab_size/{print p":"$2}' | tr -d '"' | sort -u); do
  dir=${dv%%:*}; vocab=${dv##*:}
  if [ ! -f "$dir/data.toml" ]; then
    s=$(date +%s)
    build/ufp4 data prepare --out "$dir" --vocab-size "$vocab" > "$LOGS/data-$(basename "$dir").log" 2>&1 || { tail -n 20 "$LOGS/data-$(basename "$dir").log"; exit 1; }
    echo "data $dir (vocab $vocab): $(( $(date +%s) - s )) s, $(du -sb "$dir" | cut -f1) bytes on disk"
    grep -E "documents|train and" "$LOGS/data-$(basename "$dir").log"
  fi
done
build/ufp4 plan "$@" > "$LOGS/plan.log" 2>&1 || { cat "$LOGS/plan.log"; exit 2; }
cat "$LOGS/plan.log"
s=$(date +%s)
# RUN_UNTIL=T: stop training T seconds after this script started (a device call's time limit).
[ -n "${RUN_UNTIL:-}" ] && RUN_SECONDS=$(( RUN_UNTIL - (s - t0) ))
echo "training for at most ${RUN_SECONDS:-unlimited} s"
timeout -s TERM "${RUN_SECONDS:-100000}" build/ufp4 run --gpus "${GPUS:-1}" --per-gpu "${PER_GPU:-1}" "$@" > "$LOGS/run.log" 2>&1
rc=$?
echo "run exit $rc after $(( $(date +%s) - s )) s (total $(elapsed))"
for f in $(ls -d $(grep -h -A2 '^\[outputs\]' "$@" | awk -F' = ' '/^dir/{print $2}' | tr -d '"' | sort -u) 2>/dev/null); do
  for l in "$f"/logs/*.log; do echo "$(basename "$l"): $(grep -E "tok/s" "$l" | tail -n 1)"; done
done
exit $rc
