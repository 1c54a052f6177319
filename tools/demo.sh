#!/usr/bin/env bash
# `make demo`: a quick look at the paper's mechanism on what ufp4 has today, CPU or GPU.
# Per-bin shrinkage bias of E2M1 vs E1M2 (Eq. 2), block quantization of a Gaussian and an
# outlier-heavy tensor with and without RHT-16 (SQNR, alpha (Eq. 3), bucket ratio (Eq. 6)), and the
# tiny model trained with three recipes.
set -euo pipefail
build=${1:-build}
ufp4="$build/ufp4"
echo "== Eq. 2: per-bin rounding bias =="
"$ufp4" analyze bias --grid e2m1
"$ufp4" analyze bias --grid e1m2
for kind in gaussian outliers; do
  echo
  echo "== 1x16 FP32-scale quantization of a 2048x2048 $kind tensor (seed 0) =="
  for grid in e2m1 e1m2; do
    for rht in 0 16; do
      "$ufp4" -q quantize --in "synthetic:$kind:2048x2048:0" --out - --grid $grid --rht $rht --rht-seed 1 --stats
    done
  done
done
echo
echo "The paper's direction (its Figs. 4-5, outlier-heavy linear_fc2 inputs): RHT lowers E2M1's SQNR and"
echo "raises E1M2's, with a higher bucket ratio. Compare with the lines above."
echo
echo "== The tiny model trained on the CI corpus with bf16, e2m1_ref and ufp4 (finished runs are skipped) =="
"$ufp4" -q run experiments/demo/tiny_bf16.toml experiments/demo/tiny_e2m1_ref.toml experiments/demo/tiny_ufp4.toml
