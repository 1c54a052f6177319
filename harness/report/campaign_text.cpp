#include "harness/report/campaign_text.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "harness/report/report.h"

namespace ufp4 {

std::string pp_interval(const Interval& i) { return i.n ? format_interval(i, "%+.3f") : "-"; }

std::string p_text(double p) {
  if (std::isnan(p)) return "-";
  return p < 1e-4 ? std::string("<0.0001") : fmt("%.4f", p);
}

std::string mdd_text(double mdd) { return std::isnan(mdd) ? std::string("-") : fmt("%.3f", mdd); }

std::string claim_models(const RegisteredClaim& c) {
  std::string models = c.model;
  for (const auto& m : c.trend_models) models += (models.empty() ? "" : ", ") + m;
  return models;
}

std::pair<int64_t, int64_t> seeds_in(const RunSet& set, const ClaimTest& t) {
  int64_t registered = 0, in = 0;
  for (const auto& model : t.claim.trend() ? t.claim.trend_models : std::vector<std::string>{t.claim.model}) {
    const auto it = set.seeds.seeds.find(model);
    if (it == set.seeds.seeds.end()) return {-1, 0};
    registered += it->second;
    in += t.model_seeds.count(model) ? std::min<int64_t>(static_cast<int64_t>(t.model_seeds.at(model)), it->second) : 0;
  }
  return {registered, in};
}

bool seeds_short(const RunSet& set, const ClaimTest& t) {
  const auto [registered, in] = seeds_in(set, t);
  return registered < 0 || in < registered;
}

bool interim(const RunSet& set, const std::vector<ClaimTest>& tests, const ClaimTest& t, bool train) {
  if (seeds_short(set, t)) return true;
  if (train ? t.settled_train : t.settled) return false;
  for (const auto& other : tests)
    if (same_family(other.claim, t.claim) && seeds_short(set, other)) return true;
  return false;
}

std::string shown_verdict(const RunSet& set, const std::vector<ClaimTest>& tests, const ClaimTest& t, bool train) {
  const Verdict v = train ? t.verdict_train : t.verdict;
  const Interval& d = train ? t.diff_train : t.diff;
  if (!interim(set, tests, t, train)) return std::string("**") + verdict_name(v) + "**";
  if (!d.defined()) return "**inconclusive** (waiting for runs: fewer than two complete seeds, no test yet)";
  if (!seeds_short(set, t))
    return std::string("**inconclusive** (its seeds are in, not yet those of its Holm family, whose p values can still move its Holm p across alpha: the test gives ") +
           verdict_name(v) + " now)";
  const auto [registered, in] = seeds_in(set, t);
  const std::string of = registered < 0 ? "the pilot's seeds, before the seeds are decided" : std::to_string(in) + " of " + std::to_string(registered) + " registered seeds";
  return std::string("**inconclusive** (interim look at ") + of + ": the test gives " + verdict_name(v) + ")";
}

std::string group_answer_text(const GroupAnswer& g) {
  std::string answer = "**" + g.answer + "**";
  for (const auto& l : g.beaten_by) answer += (l == g.beaten_by.front() ? " by " : ", ") + l;
  return answer;
}

std::string lowest_level_text(const GroupAnswer& g) {
  return g.best_level == g.choice ? g.choice + " (no level below it)" : g.best_level + " (" + fmt("%+.3f", g.best_contrast) + ")";
}

std::string registered_effect_text(const RegisteredClaim& c) {
  return c.paper_sized() ? fmt("%+.3f", c.paper_effect) : fmt("%+.3f", c.effect_of_interest) + " (of interest)";
}

// One claim's verdict in words: where the paper's effect lies against our interval, and the MDD beside
// the registered effect (the paper's, or the effect of interest of a claim the paper did not size).
std::string claim_sentence(const RunSet& set, const std::vector<ClaimTest>& tests, const ClaimTest& t) {
  const Interval& d = t.diff;
  const double e = t.claim.paper_effect;
  std::string what;
  if (!d.defined()) what = "no interval yet (fewer than two complete seeds)";
  else if (!t.claim.paper_sized()) what = "the paper gives no size for this claim, so only its direction is tested";
  else if (e < 0 ? d.lo > e : d.hi < e) what = "the paper's effect lies outside our interval: the effect here is smaller than the paper's";
  else if (e < 0 ? d.hi < e : d.lo > e) what = "the paper's effect lies outside our interval: the effect here is larger than the paper's";
  else what = "the paper's effect lies inside our interval";
  return "**" + t.claim.id + "** (" + claim_models(t.claim) + "): \"" + t.claim.text + "\" — " + shown_verdict(set, tests, t) + "; " + what + "; MDD " +
         mdd_text(t.mdd) + " pp against " + (t.claim.paper_sized() ? "the paper's " : "the registered effect of interest, ") +
         fmt("%.3f", std::fabs(t.claim.effect_of_interest)) + " pp.";
}

std::string verdicts_section(const RunSet& set, const std::vector<ClaimTest>& tests, double alpha) {
  std::ostringstream os;
  os << "\n## Verdicts\n\nPer claim the paired difference of the gaps (percentage points), its " << fmt("%.0f", 100 * (1 - alpha))
     << "% interval, the paired t test's p and its Holm adjustment within the family, and the minimal detectable difference (MDD) beside "
        "the paper's effect (or, where the paper gives none, the registered effect of interest; `reports/README.md`: holds, contradicted, smaller than the paper, inconclusive). Until a claim has "
        "the registered number of seeds its verdict is inconclusive; what the test gives on the seeds present is shown as an interim look.\n\n"
     << "| claim | metric | seeds | difference (pp) | p | Holm p | MDD (pp) | paper (pp) | verdict |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : tests)
    for (const bool train : {false, true}) {
      const Interval& d = train ? t.diff_train : t.diff;
      os << "| " << t.claim.id << " | " << (train ? "train, last K (secondary)" : "final val (primary)") << " | " << d.n << " | " << pp_interval(d) << " | "
         << p_text(train ? t.p_train : t.p) << " | " << p_text(train ? t.p_train_holm : t.p_holm) << " | " << mdd_text(train ? t.mdd_train : t.mdd)
         << " | " << (t.claim.paper_sized() ? fmt("%+.3f", t.claim.paper_effect) : std::string("not published")) << " | "
         << shown_verdict(set, tests, t, train) << " |\n";
    }
  os << "\n";
  for (const auto& t : tests) os << "- " << claim_sentence(set, tests, t) << "\n";
  return os.str();
}

}  // namespace ufp4
