#!/usr/bin/env bash
# The GPU test suite into LOG, each finished case named with its time (--durations yes):
#   tools/cuda-tests.sh LOG [FILTER]      (FILTER: a Catch2 tag expression; default [cuda], the whole suite)
# The whole suite runs its [train][cuda] cases first (determinism, resume, the chain's probe): in the suite's own order
# they come last, and two device calls whose limits cut the suite never reached them. Exit: the worse of the two runs.
set -uo pipefail
cd "$(dirname "$0")/.."
log=${1:?usage: tools/cuda-tests.sh LOG [FILTER]}
filter=${2:-[cuda]}
rc=0
if [ "$filter" = "[cuda]" ]; then
  build/ufp4_tests "[train][cuda]" --durations yes > "$log" 2>&1 || rc=$?
  build/ufp4_tests "[cuda]~[train]" --durations yes >> "$log" 2>&1 || rc=$?
else
  build/ufp4_tests "$filter" --durations yes > "$log" 2>&1 || rc=$?
fi
exit $rc
