#include "harness/analysis/campaign_stats.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "common/error.h"
#include "common/text.h"
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
    // flops_per_token is a root attribute, outside the content hash of a file written before content_scope: it must
    // be what the run's model gives, or the trends' compute would read an edited number.
    if (p.flops_per_token > 0 && r.flops_per_token != p.flops_per_token)
      throw Error(p.path + ": flops_per_token " + all_digits(r.flops_per_token) + " is not what its model " + p.model + " gives (" +
                  all_digits(p.flops_per_token) + "): the file was edited after the run, or train_flops_per_token changed since it; remove it (a run trains it again)");
    m.compute = r.flops_per_token * r.epochs * static_cast<double>(r.data_train_tokens);
    m.loss = r.curves.loss;
    m.eval_step = r.curves.eval_step;
    m.eval_loss = r.curves.eval_loss;
    out[p.model][p.recipe][p.seed] = m;
  }
  return out;
}

std::string baseline_recipe(const Registration& reg) { return reg.claims.empty() ? "bf16" : reg.claims.front().baseline; }

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

// Per seed with the baseline and every recipe of the contrast: the contrast of the gaps to the
// baseline, in percentage points (the sum of the plus recipes' gaps minus the minus recipes').
std::vector<double> contrast_values(const std::map<std::string, std::map<int64_t, RunMetrics>>& rs, const RegisteredClaim& c, bool train,
                                    std::vector<int64_t>* seeds) {
  std::vector<double> out;
  if (!rs.count(c.baseline)) return out;
  for (const auto& [seed, base] : rs.at(c.baseline)) {
    const double l0 = train ? base.train_tail : base.final_val;
    double v = 0;
    bool complete = true;
    for (const auto* side : {&c.plus, &c.minus})
      for (const auto& recipe : *side) {
        const auto it = rs.find(recipe);
        if (it == rs.end() || !it->second.count(seed)) {
          complete = false;
          continue;
        }
        const RunMetrics& m = it->second.at(seed);
        v += (side == &c.plus ? 1 : -1) * 100 * ((train ? m.train_tail : m.final_val) - l0) / l0;
      }
    if (!complete) continue;
    if (seeds) seeds->push_back(seed);
    out.push_back(v);
  }
  return out;
}

// A trend claim: each size is one point (log10 of its baseline runs' mean training compute, the mean of
// its per-seed contrasts), so a size's departure from the line counts as the noise it is and every size
// weighs the same; the least-squares slope over the sizes, its t test (sizes - 2 degrees of freedom) and
// its MDD. Fewer than three sizes: no interval.
void test_trend(const Registration& reg, const CampaignRuns& runs, ClaimTest& t) {
  std::vector<double> x, y, yt;
  for (const auto& model : t.claim.trend_models) {
    if (!runs.count(model)) continue;
    const auto& rs = runs.at(model);
    std::vector<int64_t> seeds;
    const std::vector<double> v = contrast_values(rs, t.claim, false, &seeds), vt = contrast_values(rs, t.claim, true, nullptr);
    if (v.size() < 2) continue;
    double lc = 0;
    for (const int64_t seed : seeds) lc += std::log10(rs.at(t.claim.baseline).at(seed).compute) / static_cast<double>(seeds.size());
    x.push_back(lc);
    y.push_back(mean_interval(v).mean);
    yt.push_back(mean_interval(vt).mean);
    t.model_seeds[model] = v.size();
    t.values.insert(t.values.end(), v.begin(), v.end());
  }
  if (x.size() < 3) x.clear(), y.clear(), yt.clear();
  t.diff = slope_interval(x, y, 1 - reg.alpha);
  t.diff_train = slope_interval(x, yt, 1 - reg.alpha);
  t.p = slope_t_p(t.diff);
  t.p_train = slope_t_p(t.diff_train);
  t.mdd = slope_mdd(t.diff, reg.alpha, reg.power);
  t.mdd_train = slope_mdd(t.diff_train, reg.alpha, reg.power);
}

}  // namespace

bool same_family(const RegisteredClaim& a, const RegisteredClaim& b) { return a.powered == b.powered && a.group == b.group; }

std::vector<ClaimTest> test_claims(const Registration& reg, const CampaignRuns& runs) {
  std::vector<ClaimTest> out;
  for (const auto& c : reg.claims) {
    ClaimTest t;
    t.claim = c;
    if (c.trend()) {
      test_trend(reg, runs, t);
    } else if (runs.count(c.model)) {
      const auto& rs = runs.at(c.model);
      t.values = contrast_values(rs, c, false, &t.seeds);
      t.diff = mean_interval(t.values, 1 - reg.alpha);
      t.diff_train = mean_interval(contrast_values(rs, c, true, nullptr), 1 - reg.alpha);
      t.model_seeds[c.model] = t.values.size();
    }
    if (!c.trend()) {
      t.p = paired_t_p(t.diff);
      t.p_train = paired_t_p(t.diff_train);
      t.mdd = minimal_detectable_difference(t.diff.sd, t.diff.n, reg.alpha, reg.power);
      t.mdd_train = minimal_detectable_difference(t.diff_train.sd, t.diff_train.n, reg.alpha, reg.power);
    }
    out.push_back(t);
  }
  // Holm within the registered family: the powered claims (of one group, where claims name groups); the
  // contrasts reported without power form a family of their own, so they never weaken the claims the
  // seeds were set for.
  std::vector<bool> done(out.size(), false);
  for (size_t first = 0; first < out.size(); ++first) {
    if (done[first]) continue;
    std::vector<double> p, p_train;
    std::vector<size_t> at;
    for (size_t i = first; i < out.size(); ++i)
      if (same_family(out[i].claim, out[first].claim)) p.push_back(out[i].p), p_train.push_back(out[i].p_train), at.push_back(i), done[i] = true;
    const std::vector<double> holm = holm_adjust(p), holm_train = holm_adjust(p_train);
    const double m = static_cast<double>(at.size());
    for (size_t j = 0; j < at.size(); ++j) {
      ClaimTest& t = out[at[j]];
      t.p_holm = holm[j];
      t.p_train_holm = holm_train[j];
      const auto verdict_at = [&](const Interval& d, double p_adjusted) {
        return registered_verdict(d, t.claim.direction, p_adjusted, reg.alpha, t.claim.paper_effect);
      };
      // Whatever p values the family's other claims come to, Holm makes of this p at least p and at most
      // m p (m counts the whole registered family, those without a p yet too).
      const auto settled_at = [&](const Interval& d, double p) { return verdict_at(d, p) == verdict_at(d, std::min(1.0, m * p)); };
      t.verdict = verdict_at(t.diff, t.p_holm);
      t.verdict_train = verdict_at(t.diff_train, t.p_train_holm);
      t.settled = settled_at(t.diff, t.p);
      t.settled_train = settled_at(t.diff_train, t.p_train);
    }
  }
  return out;
}

std::vector<GroupAnswer> group_answers(const std::vector<ClaimTest>& tests) {
  std::vector<GroupAnswer> out;
  for (const auto& t : tests) {
    if (t.claim.group.empty()) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const GroupAnswer& g) { return g.group == t.claim.group; });
    if (it == out.end()) {
      GroupAnswer g;
      g.group = t.claim.group;
      g.choice = t.claim.minus.front();
      g.best_level = g.choice;
      out.push_back(g);
      it = out.end() - 1;
    }
    GroupAnswer& g = *it;
    const std::string level = t.claim.plus.front();
    g.levels.push_back(level);
    if (t.verdict == Verdict::kContradicted) g.beaten_by.push_back(level);
    if (t.diff.n && (std::isnan(g.best_contrast) ? t.diff.mean < 0 : t.diff.mean < g.best_contrast)) g.best_level = level, g.best_contrast = t.diff.mean;
    if (!std::isnan(t.mdd)) g.largest_mdd = std::isnan(g.largest_mdd) ? t.mdd : std::max(g.largest_mdd, t.mdd);
  }
  for (auto& g : out) {
    bool all_hold = true;
    for (const auto& t : tests)
      if (t.claim.group == g.group) all_hold = all_hold && t.verdict == Verdict::kHolds;
    g.answer = !g.beaten_by.empty() ? "beaten" : all_hold ? "best" : "tied within the MDD";
  }
  return out;
}

SeedPlan plan_seeds(const SeedPlan& policy, const Registration& reg, const std::vector<ClaimTest>& pilot) {
  SeedPlan s = policy;
  s.seeds.clear();
  for (const auto& t : pilot) {
    if (!t.claim.powered) continue;  // reported with its MDD; the seeds are not set for it
    if (t.diff.n < static_cast<size_t>(policy.pilot))
      throw Error("campaign: claim " + t.claim.id + " has " + std::to_string(t.diff.n) + " complete pilot seeds of " + std::to_string(policy.pilot) +
                  ": the seeds are decided once the whole pilot is in");
    const int64_t need = seeds_for_power(t.diff.sd, t.claim.effect_of_interest, reg.alpha, reg.power, 100000);
    s.pilot_sd[t.claim.id] = t.diff.sd;
    s.seeds_for_power[t.claim.id] = need;
    const int64_t n = std::min(policy.max, std::max(policy.min, need));
    s.seeds[t.claim.model] = std::max(s.seeds.count(t.claim.model) ? s.seeds[t.claim.model] : 0, n);
  }
  for (const auto& t : pilot)  // a model with no powered claim: the registered floor
    for (const auto& model : t.claim.trend() ? t.claim.trend_models : std::vector<std::string>{t.claim.model})
      if (!s.seeds.count(model)) s.seeds[model] = policy.min;
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

double SeedSpread::end_to_largest() const {
  if (sd.empty()) return NAN;
  const double largest = *std::max_element(sd.begin(), sd.end());
  return largest > 0 ? sd.back() / largest : NAN;
}

bool SeedSpread::not_fallen() const { return sd.size() >= 2 && end_to_largest() >= kNotFallen; }

std::vector<SeedSpread> seed_spreads(const CampaignRuns& runs) {
  std::vector<SeedSpread> out;
  for (const auto& [model, rs] : runs)
    for (const auto& [recipe, seeds] : rs) {
      std::map<double, std::vector<double>> at;  // evaluation step -> the seeds' validation losses
      for (const auto& [seed, m] : seeds)
        for (size_t i = 0; i < std::min(m.eval_step.size(), m.eval_loss.size()); ++i)
          if (std::isfinite(m.eval_loss[i])) at[m.eval_step[i]].push_back(m.eval_loss[i]);
      SeedSpread s;
      s.model = model;
      s.recipe = recipe;
      for (const auto& [step, losses] : at) {
        if (losses.size() < 2) continue;
        s.steps.push_back(step + 1);  // the file holds the step's index; the steps trained by then
        s.sd.push_back(mean_interval(losses).sd);
        s.seeds.push_back(losses.size());
      }
      if (!s.steps.empty()) out.push_back(s);
    }
  return out;
}

}  // namespace ufp4
