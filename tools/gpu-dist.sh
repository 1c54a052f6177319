#!/usr/bin/env bash
# One GPU command for data parallelism on one GPU (experiments/dist/dense20m_ufp4.toml): build, make
# check-gpu (the single-process step still matches its committed reference bit for bit), then the
# proxy trained by one process, by torchrun with one NCCL rank, twice by torchrun with two ranks
# sharing the GPU over Gloo, and by `ufp4 run --nproc-per-node 2 --backend gloo` stopped at step 60
# and resumed; `ufp4 check` compares them. Logs and the results land in $LOGS (default logs/dist).
#   UFP4_GIT_COMMIT=<commit> tools/gpu-dist.sh
source "$(dirname "$0")/gpu-common.sh" dist
make check-gpu > "$LOGS/check-gpu.log" 2>&1
echo "check-gpu exit $?: $(grep -c '^ok' "$LOGS/check-gpu.log") ok, $(grep -c '^FAIL' "$LOGS/check-gpu.log") FAIL"
m=experiments/dist/dense20m_ufp4.toml
runs=build/dist/runs
torchrun=$(command -v torchrun || echo "python3 -m torch.distributed.run")
status=0
run() {  # run NAME COMMAND...: trains into $runs, keeps the result as $LOGS/NAME.h5
  local name=$1; shift
  rm -rf "$runs"
  local s0=$(date +%s%N)
  "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc, $(python3 -c "print(round(($(date +%s%N) - $s0) / 1e9, 1))") s: $*"
  grep -h "data parallel:\|rank 0 of\|stopped after\|resumed from" "$LOGS/$name.log" | sed 's/^/  /'
  [ "$rc" = 0 ] || { tail -n 8 "$LOGS/$name.log"; status=1; }
  mkdir -p build/dist/"$name"
  cp "$runs"/*.h5 build/dist/"$name"/ 2>/dev/null && cp "$runs"/*.h5 "$LOGS/$name.h5"
}
run single build/ufp4 run --force "$m"
run nccl1 $torchrun --standalone --nproc-per-node 1 --no-python build/ufp4 run --force "$m"
run gloo2a $torchrun --standalone --nproc-per-node 2 --no-python build/ufp4 run --force "$m" --backend gloo
run gloo2b $torchrun --standalone --nproc-per-node 2 --no-python build/ufp4 run --force "$m" --backend gloo
rm -rf "$runs"
build/ufp4 run --force "$m" --nproc-per-node 2 --backend gloo --stop-after 60 > "$LOGS/gloo2c-stop.log" 2>&1
echo "gloo2c: stop at 60: exit $? ($(grep -o 'stopped after step [0-9]*' "$LOGS/gloo2c-stop.log")); files: $(ls $runs | tr '\n' ' ')"
cp -r "$runs" build/dist/keep-runs
run gloo2c build/ufp4 run "$m" --nproc-per-node 2 --backend gloo
for pair in "nccl1 single" "gloo2a single" "gloo2b gloo2a --exact" "gloo2c gloo2a --exact"; do
  set -- $pair
  build/ufp4 check build/dist/$1 --reference build/dist/$2 ${3:-} > "$LOGS/check-$1-vs-$2.log" 2>&1
  echo "check $1 against $2 ${3:-} (exit $?):"; sed 's/^/  /' "$LOGS/check-$1-vs-$2.log"
done
for r in single nccl1 gloo2a; do echo "== $r"; grep -h "validation loss\|step 120/120" "$LOGS/$r.log" | sed 's/^/  /'; done
exit $status
