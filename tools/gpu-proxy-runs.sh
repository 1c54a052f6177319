#!/usr/bin/env bash
# On a GPU node, after `make gpu`: prepares the default corpus once, then runs the dense proxy under
# bf16, e2m1_ref and ufp4 plus dense-1.5b (20 steps) concurrently, one run per GPU (round-robin
# when there are fewer GPUs), and a kill-and-resume check of a small proxy. Logs go to $LOGS.
set -uo pipefail
export UFP4_REUSE=${UFP4_REUSE:-off}  # what it checks, it trains: no run copied from another folder
cd "$(dirname "$0")/.."
LOGS=${LOGS:-logs}
mkdir -p "$LOGS"
ufp4=build/ufp4
[ -f data/python/data.toml ] || $ufp4 data prepare --out data/python > "$LOGS/data.log" 2>&1 || { cat "$LOGS/data.log"; exit 1; }
ngpu=$(nvidia-smi -L | wc -l)
runs=(experiments/proxy/dense113m_bf16.toml experiments/proxy/dense113m_e2m1_ref.toml experiments/proxy/dense113m_ufp4.toml
      experiments/proxy/dense1p5b_ufp4_20steps.toml)
pids=()
for i in "${!runs[@]}"; do
  gpu=$((i % ngpu))
  name=$(basename "${runs[$i]}" .toml)
  if [ "$ngpu" -ge "${#runs[@]}" ] || [ "$i" -lt "$ngpu" ]; then
    CUDA_VISIBLE_DEVICES=$gpu $ufp4 run "${runs[$i]}" > "$LOGS/$name.log" 2>&1 &
    pids+=($!)
  else
    wait "${pids[$gpu]}"
    CUDA_VISIBLE_DEVICES=$gpu $ufp4 run "${runs[$i]}" > "$LOGS/$name.log" 2>&1 &
    pids[$gpu]=$!
  fi
done
# Resume check on the last GPU: whole run, then the same run stopped at step 17 and resumed.
gpu=$((ngpu - 1))
m=experiments/proxy/resume_dense20m_ufp4.toml
CUDA_VISIBLE_DEVICES=$gpu $ufp4 run $m > "$LOGS/resume_whole.log" 2>&1
mkdir -p results/resume/whole && mv results/resume/*.h5 results/resume/whole/
CUDA_VISIBLE_DEVICES=$gpu $ufp4 run $m --stop-after 17 > "$LOGS/resume_part1.log" 2>&1
CUDA_VISIBLE_DEVICES=$gpu $ufp4 run $m > "$LOGS/resume_part2.log" 2>&1
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
python3 - <<'PY'
import glob, h5py, numpy as np
w = glob.glob("results/resume/whole/*.h5")[0]; r = glob.glob("results/resume/*.h5")[0]
a = h5py.File(w)["train/loss"][:]; b = h5py.File(r)["train/loss"][:]
print(f"resume check: {len(a)} steps, identical: {np.array_equal(a.view(np.uint32), b.view(np.uint32))}, max |diff| {np.abs(a-b).max():.3g}")
PY
exit $status
