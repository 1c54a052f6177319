#!/usr/bin/env bash
# One GPU command for the mechanism (tools/reproduce-analysis.sh proxy): build, prepare the default corpus
# once (timed), then the capture analysis's shards on the GPUs of CUDA_VISIBLE_DEVICES (all if unset) until
# RUN_UNTIL seconds after this script started (each run checkpoints; the same command resumes it). The
# results folder lives in an ignored folder behind a link (logs/keep/), so a warm node keeps finished runs
# and checkpoints between device calls; the runs, their analysed steps, the shards' logs and the report are
# packed into $OUT/analysis.tgz.NN (15 MiB parts) when the command ends. Unpack in the repository root:
# cat analysis.tgz.* | tar xz
#   UFP4_GIT_COMMIT=<commit> [RUN_UNTIL=S] [SHARDS_PER_GPU=K] [UFP4_BUILT=1] tools/gpu-analysis.sh
source "$(dirname "$0")/gpu-common.sh" analysis
r=results/analysis/mechanism
keep=logs/keep/$r
keep_results "$r"
ensure_default_corpus
left=$(( ${RUN_UNTIL:-100000} - ($(date +%s) - t0) ))
echo "analysing for at most $left s on GPU(s) ${CUDA_VISIBLE_DEVICES:-all}, ${SHARDS_PER_GPU:-1} shard(s) a GPU"
s=$(date +%s)
timeout -s TERM "$left" bash tools/reproduce-analysis.sh build proxy > "$LOGS/reproduce-analysis.log" 2>&1
rc=$?
echo "reproduce-analysis exit $rc after $(( $(date +%s) - s )) s (total $(elapsed))"
tail -n 3 "$LOGS/reproduce-analysis.log"
cp logs/analysis-shard*.log "$LOGS/" 2>/dev/null
for f in "$LOGS"/analysis-shard*.log; do echo "$(basename "$f"): $(grep -c 'analysed' "$f") step(s) analysed; last: $(tail -n 1 "$f" | cut -c1-160)"; done
if [ -n "${OUT:-}" ]; then
  files=$(cd "$keep" && ls | grep -E -- "-[0-9a-f]{16}(\.h5|\.capture)$" | sed "s|^|$r/|")
  tar czf - --dereference $files "$LOGS" $([ -f reports/mechanism.md ] && echo reports/mechanism.md) | split -b 15m -d - "$OUT/analysis.tgz."
  echo "packed into $(ls "$OUT"/analysis.tgz.* | wc -l) part(s), $(du -ch "$OUT"/analysis.tgz.* | tail -n 1 | cut -f1)"
fi
exit $rc
