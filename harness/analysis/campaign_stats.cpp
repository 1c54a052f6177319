#include "harness/analysis/campaign_stats.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "harness/io/run_results.h"

namespace ufp4 {

CampaignRuns read_campaign_runs(const RunSet& set) {
  CampaignRuns out;
  for (const auto& p : set.runs) {
    if (p.path.empty()) continue;
    const RunResults r = read_run_results(p.path);
    RunMetrics m;
    m.path = p.path;
    m.commit = r.attr("git_commit");
    m.device = r.attr("device");
    m.content_sha256 = r.attr("content_sha256");
    m.final_val = r.final_eval_loss;
    m.train_tail = r.mean_loss_last_k;
    m.last_k = r.last_k;
    m.epochs = r.epochs;
    m.steps = r.steps_done;
    m.loss = r.curves.loss;
    out[p.model][p.recipe][p.seed] = m;
  }
  return out;
}

std::vector<double> moving_average(const std::vector<double>& x, size_t w) {
  std::vector<double> out;
  double acc = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    acc += x[i] - (i >= w ? x[i - w] : 0.0);
    if (i + 1 >= w) out.push_back(acc / static_cast<double>(w));
  }
  return out;  // out[j] averages x[j] .. x[j + w - 1]
}

namespace {

// Per seed with all three recipes: the gaps of a and b to the baseline, in percent.
void gaps(const std::map<std::string, std::map<int64_t, RunMetrics>>& rs, const RegisteredClaim& c, bool train, ClaimTest& t,
          std::vector<double>& a, std::vector<double>& b) {
  if (!rs.count(c.a) || !rs.count(c.b) || !rs.count(c.baseline)) return;
  for (const auto& [seed, base] : rs.at(c.baseline)) {
    if (!rs.at(c.a).count(seed) || !rs.at(c.b).count(seed)) continue;
    const double l0 = train ? base.train_tail : base.final_val;
    const double la = train ? rs.at(c.a).at(seed).train_tail : rs.at(c.a).at(seed).final_val;
    const double lb = train ? rs.at(c.b).at(seed).train_tail : rs.at(c.b).at(seed).final_val;
    if (!train) t.seeds.push_back(seed);
    a.push_back(100 * (la - l0) / l0);
    b.push_back(100 * (lb - l0) / l0);
  }
}

}  // namespace

std::vector<ClaimTest> test_claims(const Registration& reg, const CampaignRuns& runs) {
  std::vector<ClaimTest> out;
  std::vector<double> p, p_train;
  for (const auto& c : reg.claims) {
    ClaimTest t;
    t.claim = c;
    if (runs.count(c.model)) {
      const auto& rs = runs.at(c.model);
      gaps(rs, c, false, t, t.gap_a, t.gap_b);
      std::vector<double> ta, tb;
      gaps(rs, c, true, t, ta, tb);
      t.diff = paired_difference(t.gap_a, t.gap_b, 1 - reg.alpha);
      t.diff_train = paired_difference(ta, tb, 1 - reg.alpha);
    }
    t.p = paired_t_p(t.diff);
    t.p_train = paired_t_p(t.diff_train);
    t.mdd = minimal_detectable_difference(t.diff.sd, t.diff.n, reg.alpha, reg.power);
    t.mdd_train = minimal_detectable_difference(t.diff_train.sd, t.diff_train.n, reg.alpha, reg.power);
    p.push_back(t.p);
    p_train.push_back(t.p_train);
    out.push_back(t);
  }
  const std::vector<double> holm = holm_adjust(p), holm_train = holm_adjust(p_train);
  for (size_t i = 0; i < out.size(); ++i) {
    ClaimTest& t = out[i];
    t.p_holm = holm[i];
    t.p_train_holm = holm_train[i];
    t.verdict = registered_verdict(t.diff, t.claim.direction, t.p_holm, reg.alpha, t.claim.paper_effect);
    t.verdict_train = registered_verdict(t.diff_train, t.claim.direction, t.p_train_holm, reg.alpha, t.claim.paper_effect);
  }
  return out;
}

SeedPlan plan_seeds(const SeedPlan& policy, const Registration& reg, const std::vector<ClaimTest>& pilot) {
  SeedPlan s = policy;
  s.seeds.clear();
  for (const auto& t : pilot) {
    if (t.diff.n < static_cast<size_t>(policy.pilot))
      throw Error("campaign: claim " + t.claim.id + " has " + std::to_string(t.diff.n) + " complete pilot seeds of " + std::to_string(policy.pilot) +
                  ": the seeds are decided once the whole pilot is in");
    const int64_t need = seeds_for_power(t.diff.sd, t.claim.effect_of_interest, reg.alpha, reg.power, 100000);
    s.pilot_sd[t.claim.id] = t.diff.sd;
    s.seeds_for_power[t.claim.id] = need;
    const int64_t n = std::min(policy.max, std::max(policy.min, need));
    s.seeds[t.claim.model] = std::max(s.seeds.count(t.claim.model) ? s.seeds[t.claim.model] : 0, n);
  }
  return s;
}

namespace {


// The averaging window: 50 steps, or a tenth of a shorter run (at least 2).
size_t window_of(size_t steps) { return std::max<size_t>(2, std::min<size_t>(50, steps / 10)); }

// The first step whose trailing average is at or below `level`; NaN when never.
double first_reach(const std::vector<double>& loss, double level) {
  const size_t w = window_of(loss.size());
  const std::vector<double> ma = moving_average(loss, w);
  for (size_t j = 0; j < ma.size(); ++j)
    if (ma[j] <= level) return static_cast<double>(j + w - 1);
  return NAN;
}

}  // namespace

std::vector<TransitionDelay> transition_delays(const CampaignRuns& runs, const std::string& baseline) {
  std::vector<TransitionDelay> out;
  for (const auto& [model, rs] : runs) {
    if (!rs.count(baseline)) continue;
    double level = 0;
    int n = 0;
    for (const auto& [seed, m] : rs.at(baseline)) {
      const size_t w = window_of(m.loss.size());
      const std::vector<double> ma = moving_average(m.loss, w);
      const size_t at = m.loss.size() / 4;
      if (at + 1 >= w && at + 1 - w < ma.size()) level += ma[at + 1 - w], ++n;
    }
    if (n == 0) continue;
    level /= n;
    std::map<int64_t, double> base_steps;
    for (const auto& [seed, m] : rs.at(baseline)) base_steps[seed] = first_reach(m.loss, level);
    for (const auto& [recipe, seeds] : rs) {
      TransitionDelay d;
      d.model = model;
      d.recipe = recipe;
      d.level = level;
      std::vector<double> steps, a, b;
      for (const auto& [seed, m] : seeds) {
        const double s = first_reach(m.loss, level);
        if (std::isnan(s)) continue;
        steps.push_back(s);
        if (base_steps.count(seed) && !std::isnan(base_steps[seed])) a.push_back(s), b.push_back(base_steps[seed]);
      }
      d.steps = mean_interval(steps);
      d.delay = paired_difference(a, b);
      out.push_back(d);
    }
  }
  return out;
}

}  // namespace ufp4
