#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "harness/analysis/campaign_stats.h"
#include "harness/analysis/stats.h"
#include "harness/report/campaign_text.h"
#include "tests/catch.h"

using namespace ufp4;

TEST_CASE("Student-t quantiles match the published table", "[stats]") {
  // Two-sided 95% (p = 0.975) and the 80% power term (p = 0.80), e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2.
  const struct {
    double df, p, t;
  } table[] = {{1, 0.975, 12.706}, {2, 0.975, 4.303}, {4, 0.975, 2.776}, {9, 0.975, 2.262}, {29, 0.975, 2.045},
               {100, 0.975, 1.984}, {2, 0.80, 1.061}, {4, 0.80, 0.941}, {9, 0.80, 0.883}, {1, 0.90, 3.078}};
  for (const auto& r : table) {
    INFO("df " << r.df << " p " << r.p);
    CHECK(std::fabs(student_t_quantile(r.p, r.df) - r.t) < 5e-4);
    CHECK(std::fabs(student_t_cdf(r.t, r.df) - r.p) < 2e-4);  // the table's t is rounded to 3 decimals
  }
  CHECK(student_t_quantile(0.025, 4) == -student_t_quantile(0.975, 4));
  CHECK(std::fabs(student_t_cdf(0, 3) - 0.5) < 1e-15);
  CHECK(std::fabs(student_t_quantile(0.975, 1e6) - 1.95996) < 1e-4);  // the normal limit
}

TEST_CASE("intervals, paired differences and verdicts", "[stats]") {
  // 1, 2, 3: mean 2, sd 1, half-width t(0.975, 2) / sqrt(3).
  Interval i = mean_interval({1, 2, 3});
  CHECK(i.n == 3);
  CHECK(i.mean == 2);
  CHECK(i.sd == 1);
  CHECK(std::fabs(i.hi - i.mean - 4.302653 / std::sqrt(3.0)) < 1e-5);
  CHECK(std::fabs(i.mean - i.lo - (i.hi - i.mean)) < 1e-12);
  // One seed: a mean but no interval, and so no verdict.
  Interval one = mean_interval({1.5});
  CHECK(!one.defined());
  CHECK(std::isnan(one.lo));
  CHECK(verdict(one, -1) == Verdict::kInconclusive);
  CHECK(format_interval(one) == "1.5000 (one seed)");
  // Paired: a constant offset with little noise is detected in both directions.
  std::vector<double> a = {3.10, 3.20, 3.05}, b = {3.13, 3.22, 3.09};
  Interval d = paired_difference(a, b);
  CHECK(std::fabs(d.mean + 0.03) < 1e-12);
  CHECK(verdict(d, -1) == Verdict::kHolds);
  CHECK(verdict(d, +1) == Verdict::kContradicted);
  CHECK(std::string(verdict_name(verdict(d, -1))) == "holds");
  // Unpaired noise larger than the offset: inconclusive.
  CHECK(verdict(paired_difference({3.1, 3.3, 3.0}, {3.2, 3.1, 3.15}), -1) == Verdict::kInconclusive);
  CHECK_THROWS(paired_difference({1, 2}, {1}));
  // Minimal detectable difference: (t.975 + t.80) sd / sqrt(n); shrinks with seeds.
  CHECK(std::fabs(minimal_detectable_difference(1.0, 3) - (4.302653 + 1.060660) / std::sqrt(3.0)) < 1e-5);
  CHECK(minimal_detectable_difference(1.0, 10) < minimal_detectable_difference(1.0, 3));
  CHECK(std::isnan(minimal_detectable_difference(1.0, 1)));
  CHECK(format_interval(i, "%.1f") == "2.0 [-0.5, 4.5]");
}

TEST_CASE("slope of a line with its t interval", "[stats]") {
  // y = 1 + 2x + e, e = +-0.1 alternating: slope and its standard error by hand.
  const std::vector<double> x = {0, 1, 2, 3}, y = {1.1, 2.9, 5.1, 6.9};
  const Interval s = slope_interval(x, y);
  // sxx = 5, sxy = 9.8 -> slope 1.96, intercept 1.06; residuals 0.04, -0.12, 0.12, -0.04 -> sse 0.032,
  // standard error sqrt(0.032 / 2 / 5).
  CHECK(s.mean == Approx(1.96).epsilon(1e-12));
  CHECK(s.sd == Approx(std::sqrt(0.0032)).epsilon(1e-9));
  CHECK(s.hi - s.mean == Approx(4.302653 * s.sd).epsilon(1e-5));  // t(0.975, 2)
  CHECK(verdict(s, +1) == Verdict::kHolds);
  // Flat noisy data: the interval holds zero. Two points or one x: no interval.
  CHECK(verdict(slope_interval({0, 1, 2, 3}, {1, 1.2, 0.9, 1.05}), +1) == Verdict::kInconclusive);
  CHECK(!slope_interval({0, 1}, {1, 2}).defined());
  CHECK(!slope_interval({1, 1, 1}, {1, 2, 3}).defined());
  CHECK_THROWS(slope_interval({1, 2}, {1}));
}

TEST_CASE("a campaign's claims: signed sums of gaps (an interaction), Holm apart for the unpowered ones, seeds set by the powered ones", "[stats]") {
  // Losses per seed chosen so that each gap (percent of bf16's 2.0) is exact: gap = 50 (L - 2).
  CampaignRuns runs;
  const std::map<std::string, std::vector<double>> loss = {{"bf16", {2.0, 2.0, 2.0, 2.0}},
                                                           {"a", {2.02, 2.03, 2.02, 2.04}},
                                                           {"b", {2.04, 2.04, 2.05, 2.05}},
                                                           {"c", {2.06, 2.05, 2.06, 2.07}},
                                                           {"d", {2.01, 2.02, 2.01, 2.02}}};
  for (const auto& [recipe, ls] : loss)
    for (size_t s = 0; s < ls.size(); ++s) {
      RunMetrics m;
      m.final_val = ls[s];
      m.train_tail = ls[s] + 0.5;
      runs["m"][recipe][static_cast<int64_t>(s + 1)] = m;
    }
  runs["m"]["d"].erase(4);  // seed 4 lacks d: the interaction has three complete seeds
  Registration reg;
  RegisteredClaim pairwise, interaction, other;
  pairwise.id = "ab", pairwise.model = "m", pairwise.plus = {"a"}, pairwise.minus = {"b"}, pairwise.direction = -1, pairwise.paper_effect = -1;
  pairwise.effect_of_interest = -1;
  interaction = pairwise;
  interaction.id = "inter", interaction.plus = {"a", "d"}, interaction.minus = {"b", "c"};
  other = pairwise;
  other.id = "cb", other.plus = {"c"}, other.minus = {"b"}, other.direction = 1, other.powered = false;
  reg.claims = {pairwise, interaction, other};
  CHECK(interaction.contrast_text() == "gap(a) + gap(d) - gap(b) - gap(c)");
  const std::vector<ClaimTest> t = test_claims(reg, runs);
  REQUIRE(t.size() == 3);
  // (a + d - b - c) per seed, in pp: seed 1: 1 + 0.5 - 2 - 3 = -3.5; seed 2: 1.5 + 1 - 2 - 2.5 = -2; seed 3: 1 + 0.5 - 2.5 - 3 = -4.
  REQUIRE(t[1].values.size() == 3);
  CHECK(std::fabs(t[1].values[0] + 3.5) < 1e-9);
  CHECK(std::fabs(t[1].values[1] + 2.0) < 1e-9);
  CHECK(std::fabs(t[1].values[2] + 4.0) < 1e-9);
  CHECK(t[1].seeds == std::vector<int64_t>{1, 2, 3});
  CHECK(t[0].diff.n == 4);
  CHECK(std::fabs(t[0].diff.mean - (-1 - 0.5 - 1.5 - 0.5) / 4) < 1e-9);  // a - b: -1, -0.5, -1.5, -0.5
  // Holm: the two powered claims adjust each other; the unpowered one is a family of one (its p unchanged).
  CHECK(t[2].p_holm == t[2].p);
  const std::vector<double> holm = holm_adjust({t[0].p, t[1].p});
  CHECK(t[0].p_holm == holm[0]);
  CHECK(t[1].p_holm == holm[1]);
  // Seeds: only powered claims set them; a model whose claims are all unpowered takes the floor.
  SeedPlan policy;
  policy.pilot = 3, policy.min = 5, policy.max = 40;
  const SeedPlan plan = plan_seeds(policy, reg, t);
  CHECK(plan.pilot_sd.count("cb") == 0);
  CHECK(plan.seeds_for_power.count("ab") == 1);
  CHECK(plan.seeds.at("m") >= 5);
  Registration unpowered;
  unpowered.claims = {other};
  CHECK(plan_seeds(policy, unpowered, test_claims(unpowered, runs)).seeds.at("m") == 5);
}

TEST_CASE("a claim whose seeds are in waits for its Holm family unless no p value of theirs can change its verdict", "[stats]") {
  // Three powered claims, one family. gap = 50 (L - 2) against bf16's 2.0 and v's 2.0: u - v per seed is
  // 50 (u - 2) pp. Model a: -1, -2, -0.8, -2.2 (p about 0.024: below alpha / 2, not below alpha / 3);
  // model c: -5, -4.5, -5, -4.5 (p far below alpha / 3); model b: one seed, no p yet, its seeds short. The
  // family counts b: at 2 p (the claims with a p) a would be settled, at 3 p it is not. The training
  // loss (secondary) is the validation loss + 0.5, so its gaps are 0.8 times these, its p the same.
  CampaignRuns runs;
  const std::map<std::string, std::vector<double>> u = {{"a", {1.98, 1.96, 1.984, 1.956}}, {"b", {1.90}}, {"c", {1.90, 1.91, 1.90, 1.91}}};
  for (const auto& [model, ls] : u)
    for (size_t s = 0; s < ls.size(); ++s)
      for (const auto& [recipe, loss] : std::map<std::string, double>{{"bf16", 2.0}, {"v", 2.0}, {"u", ls[s]}}) {
        RunMetrics& m = runs[model][recipe][static_cast<int64_t>(s + 1)];
        m.final_val = loss;
        m.train_tail = loss + 0.5;
      }
  Registration reg;
  for (const std::string model : {"a", "b", "c"}) {
    RegisteredClaim c;
    c.id = model, c.model = model, c.plus = {"u"}, c.minus = {"v"}, c.direction = -1, c.paper_effect = NAN, c.effect_of_interest = -0.5;
    reg.claims.push_back(c);
  }
  const std::vector<ClaimTest> t = test_claims(reg, runs);
  REQUIRE(t.size() == 3);
  CHECK(t[0].p > 0.05 / 3);
  CHECK(t[0].p < 0.05 / 2);
  CHECK(std::isnan(t[1].p));
  CHECK(t[0].p_holm < 0.05);  // c far below: Holm leaves a at its own p, and it holds for now
  CHECK(t[0].verdict == Verdict::kHolds);
  CHECK(!t[0].settled);       // at 3 p it would not hold
  CHECK(!t[0].settled_train);
  CHECK(t[2].settled);        // 3 p is still below alpha
  CHECK(t[2].settled_train);
  RunSet set;
  set.seeds.seeds = {{"a", 4}, {"b", 4}, {"c", 4}};
  CHECK(!seeds_short(set, t[0]));
  CHECK(seeds_short(set, t[1]));
  CHECK(interim(set, t, t[0]));
  CHECK(interim(set, t, t[0], /*train=*/true));
  CHECK(!interim(set, t, t[2]));
  const std::string waits =
      "**inconclusive** (its seeds are in, not yet those of its Holm family, whose p values can still move its Holm p across alpha: the test gives holds now)";
  CHECK(shown_verdict(set, t, t[0]) == waits);
  CHECK(shown_verdict(set, t, t[0], /*train=*/true) == waits);
  CHECK(shown_verdict(set, t, t[1]) == "**inconclusive** (waiting for runs: fewer than two complete seeds, no test yet)");
  CHECK(shown_verdict(set, t, t[2]) == "**holds**");
  set.seeds.seeds["b"] = 1;  // b's registered seeds all in (a family complete as registered): a's verdict is its Holm p's
  CHECK(shown_verdict(set, t, t[0]) == "**holds**");
}

TEST_CASE("a one-factor group: the paper's choice best, beaten, or tied within the MDD; Holm within each group", "[stats]") {
  CampaignRuns runs;
  const std::map<std::string, std::vector<double>> loss = {{"bf16", {2.0, 2.0, 2.0, 2.0, 2.0}},
                                                           {"ref", {2.10, 2.11, 2.10, 2.12, 2.11}},
                                                           {"worse", {2.20, 2.22, 2.21, 2.22, 2.21}},
                                                           {"better", {2.00, 2.01, 2.01, 2.02, 2.00}},
                                                           {"same", {2.12, 2.09, 2.11, 2.10, 2.12}}};
  for (const auto& [recipe, ls] : loss)
    for (size_t s = 0; s < ls.size(); ++s) runs["m"][recipe][static_cast<int64_t>(s + 1)].final_val = ls[s];
  auto level = [](const std::string& group, const std::string& l) {
    RegisteredClaim c;
    c.id = group + "-" + l, c.group = group, c.model = "m", c.plus = {l}, c.minus = {"ref"}, c.direction = 1;
    c.paper_effect = NAN, c.effect_of_interest = 0.29;
    return c;
  };
  Registration reg;
  reg.claims = {level("g1", "worse"), level("g2", "worse"), level("g2", "better"), level("g3", "worse"), level("g3", "same")};
  const std::vector<ClaimTest> t = test_claims(reg, runs);
  CHECK(t[0].p_holm == t[0].p);  // g1 has one claim: Holm leaves it
  CHECK(t[1].p_holm == holm_adjust({t[1].p, t[2].p})[0]);
  const std::vector<GroupAnswer> g = group_answers(t);
  REQUIRE(g.size() == 3);
  CHECK(g[0].group == "g1");
  CHECK(g[0].choice == "ref");
  CHECK(g[0].answer == "best");
  CHECK(g[0].best_level == "ref");
  CHECK(g[1].answer == "beaten");
  CHECK(g[1].beaten_by == std::vector<std::string>{"better"});
  CHECK(g[1].best_level == "better");
  CHECK(g[1].best_contrast < -4);
  CHECK(g[2].answer == "tied within the MDD");
  CHECK(g[2].levels == std::vector<std::string>{"worse", "same"});
  CHECK(g[2].largest_mdd > 0);
}

TEST_CASE("a trend claim: the slope of a recipe's gap over log10 compute, each size one point, its t test and MDD; no interval below three sizes", "[stats]") {
  CampaignRuns runs;
  const std::vector<std::string> models = {"s1", "s2", "s3", "s4"};
  const std::vector<double> seed_noise = {0.01, -0.02, 0.015, -0.005}, size_noise = {0.02, -0.03, 0.01, 0.0};
  for (size_t m = 0; m < models.size(); ++m)
    for (int64_t seed = 1; seed <= 4; ++seed) {
      const double compute = std::pow(10.0, 14.0 + static_cast<double>(m));  // one decade a size
      const double gap = 3.0 - 0.5 * static_cast<double>(m) + size_noise[m] + seed_noise[static_cast<size_t>(seed - 1)];  // percent
      RunMetrics base, r;
      base.final_val = base.train_tail = 2.0, base.compute = compute;
      r.final_val = r.train_tail = 2.0 * (1 + gap / 100), r.compute = compute;
      runs[models[m]]["bf16"][seed] = base;
      runs[models[m]]["ufp4"][seed] = r;
    }
  RegisteredClaim trend;
  trend.id = "shrinks", trend.trend_models = models, trend.plus = {"ufp4"}, trend.direction = -1, trend.powered = false;
  trend.paper_effect = NAN, trend.effect_of_interest = -0.46;
  CHECK(trend.contrast_text() == "slope of gap(ufp4) over log10 compute (pp a decade)");
  Registration reg;
  reg.claims = {trend};
  const ClaimTest t = test_claims(reg, runs).front();
  CHECK(t.diff.n == 4);  // the sizes: a size's seeds are one point (their mean; the seed noise cancels here)
  CHECK(t.values.size() == 16);
  // The slope through the size means (3.02, 2.47, 2.01, 1.5 at log10 C = 14..17): least squares by hand.
  const std::vector<double> x = {14, 15, 16, 17}, y = {3.02, 2.47, 2.01, 1.5};
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < 4; ++i) sxy += (x[i] - 15.5) * (y[i] - 2.25), sxx += (x[i] - 15.5) * (x[i] - 15.5);
  CHECK(t.diff.mean == Approx(sxy / sxx).margin(1e-9));
  CHECK(t.p < 0.01);
  CHECK(t.verdict == Verdict::kHolds);
  CHECK(t.mdd > 0);
  CHECK(t.model_seeds.at("s3") == 4);
  // Two sizes only: no slope is tested.
  runs.erase("s3"), runs.erase("s4");
  const ClaimTest two = test_claims(reg, runs).front();
  CHECK(!two.diff.defined());
  CHECK(two.verdict == Verdict::kInconclusive);
}

TEST_CASE("how far the seeds lie apart: the sd over seeds at each evaluation, and whether it has fallen by the end", "[stats]") {
  // Evaluations after 500, 1000 and 1500 steps (the files hold the steps' indices 499, 999, 1499).
  CampaignRuns runs;
  const std::vector<std::vector<double>> settling = {{3.0, 2.5, 2.0}, {3.2, 2.5, 2.0}, {3.4, 2.7, 2.2}};
  const std::vector<std::vector<double>> parting = {{3.0, 2.6, 2.0}, {3.0, 2.5, 2.4}, {3.1, 2.6, 2.8}};
  for (size_t s = 0; s < 3; ++s) {
    RunMetrics a, b;
    a.eval_step = b.eval_step = {499, 999, 1499};
    a.eval_loss = settling[s];
    b.eval_loss = parting[s];
    runs["m"]["settles"][static_cast<int64_t>(s + 1)] = a;
    runs["m"]["parts"][static_cast<int64_t>(s + 1)] = b;
  }
  RunMetrics lone;  // one seed of its own: no spread to give
  lone.eval_step = {499};
  lone.eval_loss = {3.0};
  runs["m"]["lone"][1] = lone;
  runs["m"]["parts"][3].eval_step.pop_back(), runs["m"]["parts"][3].eval_loss.pop_back();  // a seed without the last evaluation
  RunMetrics flat;  // every seed alike; a diverged seed's NaN is left out
  flat.eval_step = {499, 999};
  flat.eval_loss = {3.0, 2.0};
  runs["m"]["flat"][1] = runs["m"]["flat"][2] = flat;
  runs["m"]["flat"][3] = flat;
  runs["m"]["flat"][3].eval_loss[1] = NAN;

  const std::vector<SeedSpread> spreads = seed_spreads(runs);
  REQUIRE(spreads.size() == 3);  // "lone" has no step that two seeds reached
  const SeedSpread& flat_spread = spreads[0];
  const SeedSpread& parts = spreads[1];
  const SeedSpread& settles = spreads[2];
  CHECK(flat_spread.seeds == std::vector<size_t>{3, 2});
  CHECK(flat_spread.sd == std::vector<double>{0.0, 0.0});
  CHECK(std::isnan(flat_spread.end_to_largest()));
  CHECK(!flat_spread.not_fallen());
  CHECK(parts.recipe == "parts");
  CHECK(settles.recipe == "settles");
  CHECK(settles.steps == std::vector<double>{500, 1000, 1500});
  CHECK(settles.seeds == std::vector<size_t>{3, 3, 3});
  CHECK(settles.sd[0] == Approx(0.2).epsilon(1e-12));
  CHECK(settles.sd[1] == Approx(std::sqrt(0.04 / 3)).epsilon(1e-12));
  CHECK(settles.end_to_largest() == Approx(std::sqrt(0.04 / 3) / 0.2).epsilon(1e-12));  // 0.58: fallen
  CHECK(!settles.not_fallen());
  CHECK(parts.seeds == std::vector<size_t>{3, 3, 2});
  CHECK(parts.sd[2] == Approx(0.4 / std::sqrt(2.0)).epsilon(1e-12));  // 2.0 and 2.4
  CHECK(parts.end_to_largest() == 1.0);
  CHECK(parts.not_fallen());
}
