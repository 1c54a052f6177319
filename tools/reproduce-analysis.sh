#!/usr/bin/env bash
# Figures 2, 4-7, 12 and the attenuation chain: train the capture run (skipped when its results exist),
# analyse the captured operands and chains (skipped when their outputs exist), render the report.
#   tools/reproduce-analysis.sh BUILD SCALE     SCALE = proxy (one H200, ~4 min) | ci (CPU, seconds)
set -euo pipefail
BUILD=${1:-build}
SCALE=${2:-proxy}
UFP4="$BUILD/ufp4"
case "$SCALE" in
  proxy) OUT=results/analysis; TAG=dense113m; REPORT=reports/analysis.md; TOKENS=2048; DIM=768 ;;
  ci)    OUT=build/ci/analysis; TAG=tiny; REPORT=build/ci/reports/analysis.md; TOKENS=256; DIM=64 ;;
  *) echo "reproduce-analysis: SCALE '$SCALE' is not allowed (allowed: proxy, ci)" >&2; exit 2 ;;
esac
MANIFEST=experiments/analysis/$SCALE.toml
mkdir -p "$OUT"
"$UFP4" run "$MANIFEST"
[ -f "$OUT/tensors-$TAG.h5" ] || "$UFP4" analyze tensors "$MANIFEST" --tokens "$TOKENS" --out "$OUT/tensors-$TAG.h5"
[ -f "$OUT/chain-random.h5" ] || "$UFP4" analyze chain --depth 16 --dim "$DIM" --tokens "$TOKENS" --input student-t --out "$OUT/chain-random.h5"
[ -f "$OUT/chain-captured.h5" ] || "$UFP4" analyze chain --capture "$MANIFEST" --input captured --depth 16 --tokens "$TOKENS" --out "$OUT/chain-captured.h5"
mkdir -p "$(dirname "$REPORT")"
"$UFP4" report analysis --tensors "$OUT/tensors-$TAG.h5" --chain "$OUT/chain-random.h5" "$OUT/chain-captured.h5" --out "$REPORT" > /dev/null
echo "report written: $REPORT"
