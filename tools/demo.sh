#!/usr/bin/env bash
# `make demo`: a quick look at the paper's mechanism and at how ufp4 reaches a verdict, CPU or GPU.
# 1. Per-bin rounding bias of E2M1 against E1M2 (Eq. 2) and the shrinkage it adds up to under 1x16
#    max scaling; 2. a Gaussian and an outlier-heavy tensor quantized with and without RHT-16 (SQNR,
#    alpha (Eq. 3), bucket ratio (Eq. 6)); 3. the tiny model trained with bf16, e2m1_ref and ufp4 at
#    three seeds as a registered campaign, its paired test and report. Each part says what its numbers
#    mean; the end says where everything went and what to try next.
set -euo pipefail
build=${1:-build}
ufp4="$build/ufp4"
say() { printf '%s\n' "$@"; }

# The build first (about 35 minutes from a fresh clone on two cores, seconds after that), with a line
# at least every 4 s: the compiler's own lines, or how long it has been at it.
t0=$(date +%s)
cmake --build "$build" -j "$(nproc)" 2>&1 | {
  while true; do
    if IFS= read -r -t 4 line; then printf '%s\n' "$line"
    elif [ $? -gt 128 ]; then echo "build: still compiling, $(( $(date +%s) - t0 )) s so far"
    else break
    fi
  done
}

say "== 1. Eq. 2: where rounding to a 4-bit grid is biased ==" \
  "Each level's bin reaches l below it and r above it. With a locally uniform density the expected" \
  "rounding error in the bin is (l - r) / 2: negative (magnitudes shrink) where the bin is wider above" \
  "the level. E2M1's step doubles at 2 and 4, so those bins shrink values; E1M2's grid is uniform, so none" \
  "does. Below each table: under 1x16 max scaling, per density, the bias b_G, alpha = E[qt] / E[t^2] (Eq. 3;" \
  "below 1 is shrinkage) and the SQNR (signal over quantization noise, dB, higher is better), by" \
  "integration and by Monte Carlo (2^14 blocks here; 'agree' when they match within their errors)." ""
"$ufp4" analyze bias --grid e2m1 --samples 16384
"$ufp4" analyze bias --grid e1m2 --samples 16384

say "" "== 2. A 2048 x 2048 tensor quantized in 1x16 blocks, without RHT (rht=off) and with RHT-16 ==" \
  "SQNR in dB (higher is better); NMSE = mean squared error over mean square; alpha as above; B_eff" \
  "(Eq. 6) = exp(entropy of the magnitude buckets' use) / 8: 1 when all eight buckets are used equally."
for kind in gaussian outliers; do
  say "" "-- $kind tensor (seed 0) --"
  for grid in e2m1 e1m2; do
    for rht in 0 16; do
      "$ufp4" -q quantize --in "synthetic:$kind:2048x2048:0" --out - --grid $grid --rht $rht --rht-seed 1 --stats
    done
  done
done
say "The paper's direction (its Figs. 4-5, outlier-heavy linear_fc2 inputs): RHT lowers E2M1's SQNR and" \
  "raises E1M2's, with a higher bucket ratio. Compare the outliers lines above."

say "" "== 3. The tiny model (CI corpus) with bf16, e2m1_ref and ufp4, seeds 1-3: a registered campaign ==" \
  "experiments/demo/campaign.toml registers the claim and its test before anything runs, as the paper's" \
  "campaigns do (experiments/figure8/campaign.toml). Finished runs are found by run id and skipped." ""
"$ufp4" campaign run experiments/demo/campaign.toml
report=build/demo/report.md  # beside the runs (experiments/demo/*.toml write to build/demo/)
mkdir -p "$(dirname "$report")"
"$ufp4" report figure8 --campaign experiments/demo/campaign.toml --out "$report" > /dev/null
say "" "Per recipe, the mean over the 3 seeds with its 95% interval. Gap = 100 (L - L_bf16) / L_bf16 of the" \
  "same seed, in percent; val = the final validation loss; train = the mean training loss of the last K steps:"
awk '/^## Cells/ { on = 1 } /^## Verdicts/ { on = 0 } on && /^\| [a-z]/' "$report" | cut -d'|' -f2-11 | sed 's/ |$//'
say "" "The claim's test: the paired difference gap(ufp4) - gap(e2m1_ref) in percentage points, its 95%" \
  "interval over seeds, the paired t test's p (Holm-adjusted within the family), the minimal detectable" \
  "difference (MDD) at these seeds, the paper's effect at Dense 1.5B, and the verdict (reports/README.md):"
grep -E '^\| (claim \| metric|tiny \| final|tiny \| train)' "$report"
row=$(grep -E '^\| tiny \| final val' "$report")
read -r lo hi < <(sed -E 's/.*\[([-+0-9.]+), ([-+0-9.]+)\].*/\1 \2/' <<< "$row")
if awk -v a="$lo" -v b="$hi" 'BEGIN { exit !(a <= 0 && b >= 0) }'; then
  say "Read: the interval [$lo, $hi] pp contains 0, so at this scale the difference between ufp4 and" \
    "e2m1_ref is within seed noise; the verdict compares the interval with the paper's effect."
else
  say "Read: the interval [$lo, $hi] pp excludes 0: across these 3 seeds the difference is more than seed" \
    "noise, at a scale (150 steps of a tiny model) that says nothing about the paper's models."
fi

say "" "== Where things went ==" \
  "  runs (HDF5, one a run, named <run>-<run id>.h5):  build/demo/runs/" \
  "  the campaign's report (Markdown, figures):         $report" \
  "  the paper's Figure 8 at the decisive design:       reports/figure8.md (153 H200 runs in results/figure8/)" \
  "" "== Next ==" \
  "  make reproduce-figure-8                  # the real campaign on GPUs (ufp4 campaign run ... --gpus N)" \
  "  build/ufp4 plan experiments/table3/ci.toml && build/ufp4 run experiments/table3/ci.toml   # an ablation" \
  "  build/ufp4 report figure8                # re-render a report from its run set (reports/figure8.md)"
