#!/usr/bin/env bash
# Device call 2a (2 GPUs): build HEAD; GPU 1 the whole [cuda] suite; GPU 0 the rerun-determinism runs and make check-gpu,
# then the step profile of both proxies; the default corpus prepared meanwhile for call 2b.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 UFP4_BUILD_TARGETS="ufp4 ufp4_tests"
export LOGS=$OUT/c2a
mkdir -p $LOGS
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
{
source tools/gpu-common.sh c2a
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
( ensure_default_corpus ) > $LOGS/corpus.console 2>&1 &
( CUDA_VISIBLE_DEVICES=1 timeout 420 tools/cuda-tests.sh $LOGS/cuda-tests.log; echo "cuda tests exit $? $(el): $(tail -n 3 $LOGS/cuda-tests.log | tr '\n' ' ')" ) &
tests=$!
CUDA_VISIBLE_DEVICES=0 UFP4_BUILT=1 CUDA_TESTS=none LOGS=$LOGS/determinism timeout 240 tools/gpu-determinism.sh > $LOGS/determinism.console 2>&1
echo "determinism exit $? $(el)"; grep -E "^(ok|FAIL)|exit|resumed|SIGTERM" $LOGS/determinism.console | head -40
rm -f $LOGS/determinism/*.h5
tar -C $OUT -czf $OUT/c2a-1.tgz c2a
CUDA_VISIBLE_DEVICES=0 BIG_BATCH=0 NCU_RECIPES=ufp4 LOGS=$LOGS/profile UFP4_BUILT=1 timeout 200 tools/gpu-step-profile.sh > $LOGS/profile.console 2>&1
echo "profile exit $? $(el)"; cat $LOGS/profile.console
for m in dense-ne6.6m moe-ne5.8m; do grep -E "bench step: $m ufp4 " $LOGS/profile/bench-step-$m.log; python3 dev/ncu_kernel_sums.py $LOGS/profile/ncu-step-ufp4-$m.csv.gz 2>&1 | head -3; done
rm -rf $LOGS/profile/step-*
wait $tests
grep -E "FAILED|failed" $LOGS/cuda-tests.log | head -20
wait
cat $LOGS/corpus.console
echo "total $(el)"
} 2>&1 | tee $OUT/console2a.log
tar -C $OUT -czf $OUT/c2a-2.tgz c2a && rm -rf $OUT/c2a
