#!/usr/bin/env bash
# Device call 2b (2 GPUs, warm after 2a): 5027eb7's binary built beside HEAD's; the proxies' tokens/s a GPU before (5027eb7,
# one run a GPU) and after (HEAD: one run a GPU; 8 and 16 a GPU under MPS), 104,857,600 tokens a setting; the bit check.
set -uo pipefail
export NCCL_NVLS_ENABLE=0
OLD=5027eb7e640cd5cbf5766ca089edcb82aaf8a08c
t0=$(date +%s); el() { echo "$(( $(date +%s) - t0 )) s"; }
L=$OUT/c2b; mkdir -p $L
{
rm -rf before-5027eb7/.gpu-deps && ln -s "$PWD/.gpu-deps" before-5027eb7/.gpu-deps
( cd before-5027eb7 && UFP4_GIT_COMMIT=$OLD UFP4_BUILD_TARGETS=ufp4 bash tools/gpu-build.sh ../build-5027eb7 > $L/build-5027eb7.log 2>&1; echo "build 5027eb7 exit $? $(el)" )
export UFP4_BUILT=1 LOGS=$L
source tools/gpu-common.sh c2b
ensure_default_corpus
TOK=104857600; MODELS="moe-ne5.8m dense-ne6.6m"
( UFP4_GIT_COMMIT=$OLD UFP4_BIN=build-5027eb7/ufp4 LOGS=$L/before-5027eb7 GPUS=0 MODELS="$MODELS" PACK=1 MPS=off TOKENS=$TOK timeout 200 bash tools/gpu-packing.sh > $L/before.console 2>&1; echo "before exit $? $(el)" ) &
( LOGS=$L/after-alone GPUS=1 MODELS="$MODELS" PACK=1 MPS=off TOKENS=$TOK timeout 200 bash tools/gpu-packing.sh > $L/after-alone.console 2>&1; echo "after alone exit $? $(el)" ) &
wait
tar -C $OUT -czf $OUT/c2b-1.tgz c2b
LOGS=$L/after-mps GPUS="0 1" MODELS="$MODELS" PACK="8 16" MPS=on TOKENS=$TOK timeout $(( 570 - ($(date +%s) - t0) )) bash tools/gpu-packing.sh > $L/after-mps.console 2>&1; echo "after MPS exit $? $(el)"
for d in before-5027eb7 after-alone after-mps; do echo "== $d"; cat $L/$d/packing.csv; cat $L/$d/exact.log 2>/dev/null; done
echo "total $(el)"
} 2>&1 | tee $OUT/console2b.log
tar -C $OUT -czf $OUT/c2b-2.tgz c2b && rm -rf $OUT/c2b
