#!/usr/bin/env bash
# One GPU command for registered campaigns (experiments/*/campaign.toml): build, prepare the default
# corpus once (timed), then `ufp4 campaign run` on every GPU until RUN_UNTIL seconds after this script
# started (its --time-limit: it starts no run that would not end by then, and stops the rest then; every
# run checkpoints and the same command resumes them), and the time from the limit to the command's end is
# printed. Each campaign's results folder lives in an ignored
# folder behind a link (logs/keep/), so a warm node keeps finished runs and checkpoints between device
# calls; finished results and logs are packed into $OUT (see pack) when the command ends.
# ONLY="--models M,... --recipes R,...": train only those of the missing runs (ufp4 campaign run's filter).
#   UFP4_GIT_COMMIT=<commit> [RUN_UNTIL=S] [PER_GPU=K] [MPS=auto|on|off] [STALL=S] [GPUS=N] [ONLY=...] [UFP4_BUILT=1] tools/gpu-campaign.sh CAMPAIGN...
source "$(dirname "$0")/gpu-common.sh" campaign
# GPUS=N: the first N GPUs of CUDA_VISIBLE_DEVICES (others left to a command beside this one).
ngpu=${GPUS:-$(nvidia-smi -L | wc -l)}
for c in "$@"; do
  r=$(awk -F' = ' '/^results = /{print $2; exit}' "$c" | tr -d '"')
  keep_results "$r"
done
ensure_default_corpus
# Finished results (<name>-<seed>-<run id>.h5, no checkpoint), logs and seeds.toml of every campaign
# named, as one tarball cut into 15 MiB parts ($OUT/campaigns.tgz.NN; the device returns at most 8
# files of 16 MiB). Unpack in the repository root: cat campaigns.tgz.* | tar xz
pack() {
  [ -n "${OUT:-}" ] || return 0
  local files=() c r
  for c in "$@"; do
    r=$(awk -F' = ' '/^results = /{print $2; exit}' "$c" | tr -d '"')
    files+=($(cd "$(readlink -f "$r")" && ls | grep -E -- "-[0-9]+-[0-9a-f]{16}\.h5$|^seeds\.toml$|^logs$" | sed "s|^|$r/|"))
  done
  [ ${#files[@]} -gt 0 ] || return 0
  tar czf - --dereference "${files[@]}" | split -b 15m -d - "$OUT/campaigns.tgz."
  echo "packed ${#files[@]} entries into $(ls "$OUT"/campaigns.tgz.* | wc -l) part(s)"
}
for c in "$@"; do build/ufp4 campaign plan "$c" > "$LOGS/plan-$(basename "$(dirname "$c")").log" 2>&1; head -n 4 "$LOGS/plan-$(basename "$(dirname "$c")").log"; done
left=$(( ${RUN_UNTIL:-100000} - ($(date +%s) - t0) ))
echo "training for at most $left s on $ngpu GPU(s), ${PER_GPU:-auto} a GPU, CUDA MPS ${MPS:-auto}"
s=$(date +%s)
for c in "$@"; do
  # The scheduler keeps the time itself (--time-limit: no run started that its model's finished runs say
  # would not end in time, the rest stopped at the limit with their checkpoints); the timeout is a backstop.
  # A stopped run gets 20 s to checkpoint, and the backstop comes after that.
  [ "$left" -gt 30 ] || break
  timeout -k 5 -s TERM $(( left + 25 )) build/ufp4 campaign run "$c" --gpus "$ngpu" --per-gpu "${PER_GPU:-auto}" --mps "${MPS:-auto}" --stall-timeout "${STALL:-120}" \
    --stop-grace 20 --time-limit "$left" ${ONLY:-} > "$LOGS/run-$(basename "$(dirname "$c")").log" 2>&1
  rc=$?
  end=$(date +%s)
  echo "campaign $c: exit $rc after $(( end - s )) s (total $(elapsed)); time limit $left s$([ $(( end - s )) -ge "$left" ] && echo ", the command ended $(( end - s - left )) s after it")$([ "$rc" = 130 ] && echo "; runs left for the next call (stopped with their checkpoints, or not started for want of time)")"
  left=$(( left - (end - s) ))
  s=$end
done
for c in "$@"; do build/ufp4 campaign plan "$c" 2>&1 | head -n 4; done
pack "$@"
