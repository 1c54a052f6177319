#!/usr/bin/env bash
# One call: where a campaign proxy's training step spends its time on this GPU. For each model of $MODELS
# (default the two campaign proxies): `ufp4 bench step` at the campaign's shape (32 x 1024 tokens; every
# row, the attention alone, uncaptured and nondeterministic beside the graph-replayed step), the same at
# batch $BIG_BATCH (what larger kernels would give), and Nsight Compute's time of every kernel of one
# step of each recipe of $NCU_RECIPES (default ufp4 and bf16) (summed by name with dev/ncu_kernel_sums.py). Logs and CSVs to $LOGS as each ends.
# NCU_METRICS=sol adds each kernel's SM and memory throughput (dev/ncu_speed_of_light.py: how busy the step keeps the
# GPU, and the least time a packing of its kernels could take); its replays make the profile slower.
#   LOGS=logs/profile MODELS="dense-ne6.6m moe-ne5.8m" tools/gpu-step-profile.sh
source "$(dirname "$0")/gpu-common.sh" step-profile
MODELS=${MODELS:-"dense-ne6.6m moe-ne5.8m"}
BIG_BATCH=${BIG_BATCH:-128}  # 0: no run at a larger batch
NCU_RECIPES=${NCU_RECIPES:-ufp4 bf16}
NCU_METRICS=${NCU_METRICS:-time}
case "$NCU_METRICS" in
  time) metrics=gpu__time_duration.sum ;;
  sol) metrics=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed ;;
  *) echo "NCU_METRICS=$NCU_METRICS: allowed values time, sol" >&2; exit 2 ;;
esac
for m in $MODELS; do
  timeout 150 build/ufp4 bench step --models "$m:1024" --batch 32 --recipes bf16,ufp4 --reference none --moe-layers none \
    --steps 30 --out-dir "$LOGS/step-$m" > "$LOGS/bench-step-$m.log" 2>&1
  echo "bench step $m (exit $?): $(elapsed)"
  [ "$BIG_BATCH" = 0 ] && continue
  timeout 120 build/ufp4 bench step --models "$m:1024" --batch "$BIG_BATCH" --recipes ufp4 --reference none --moe-layers none \
    --no-nondeterministic --steps 20 --out-dir "$LOGS/step-$m-b$BIG_BATCH" > "$LOGS/bench-step-$m-b$BIG_BATCH.log" 2>&1
  echo "bench step $m batch $BIG_BATCH (exit $?): $(elapsed)"
done
if command -v ncu > /dev/null; then
  for m in $MODELS; do
    for r in $NCU_RECIPES; do
      timeout 150 ncu --csv --metrics "$metrics" --cache-control none --clock-control none -c 3000 \
        build/ufp4 bench step --models "$m:1024" --batch 32 --recipes "$r" --warmup 0 --steps 1 --reference none \
        --no-nondeterministic --moe-layers none --out-dir "$LOGS/ncu-tmp" 2> "$LOGS/ncu-$r-$m.err" | gzip > "$LOGS/ncu-step-$r-$m.csv.gz"
      echo "ncu $r $m (exit ${PIPESTATUS[0]}; 124: its timeout, the CSV cut short): $(elapsed)"
    done
  done
  rm -rf "$LOGS/ncu-tmp"
fi
