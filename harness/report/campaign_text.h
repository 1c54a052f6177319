// How a campaign's tested claims are written, shared by its own report (report_campaign.cpp), the page
// of every campaign's verdicts (report_verdicts.cpp) and the fit report of its runs (report_scaling.cpp),
// so that all say the same thing the same way.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "harness/analysis/campaign_stats.h"
#include "harness/analysis/stats.h"
#include "harness/io/run_set.h"

namespace ufp4 {

std::string pp_interval(const Interval& i);  // "+0.123 [-0.010, +0.256]" (percentage points), "-" when empty
std::string p_text(double p);                // "0.0123", "<0.0001", "-" for NaN
std::string mdd_text(double mdd);            // "0.456", "-" for NaN
std::string claim_models(const RegisteredClaim& c);  // its model, or a trend's models

// The claim's models' registered seeds and the complete seeds in (registered -1 while the seeds are not decided).
std::pair<int64_t, int64_t> seeds_in(const RunSet& set, const ClaimTest& t);
// Whether a claim is tested on fewer complete seeds than its models' registered number.
bool seeds_short(const RunSet& set, const ClaimTest& t);
// A claim has no verdict yet while its seeds are short, or while another claim of its Holm family (among
// `tests`) is and its own verdict could still change with theirs (ClaimTest::settled; `train`: the
// secondary metric's).
bool interim(const RunSet& set, const std::vector<ClaimTest>& tests, const ClaimTest& t, bool train = false);
// "**holds**", or "**inconclusive** (interim look at ...: the test gives holds)" before the seeds are in,
// "**inconclusive** (its seeds are in, not yet those of its Holm family ...)" while it waits for the
// family; the primary metric's, or with `train` the secondary's; without an interval, "waiting for runs".
std::string shown_verdict(const RunSet& set, const std::vector<ClaimTest>& tests, const ClaimTest& t, bool train = false);
// A one-factor group's answer ("**beaten** by a, b") and its lowest level ("a (-0.123)", or the choice itself).
std::string group_answer_text(const GroupAnswer& g);
std::string lowest_level_text(const GroupAnswer& g);
// The registered effect: the paper's ("-0.290"), or the effect of interest ("+0.290 (of interest)").
std::string registered_effect_text(const RegisteredClaim& c);
// "**id** (models): "statement" — verdict; the effect against the paper's; MDD against the effect": one claim's line.
std::string claim_sentence(const RunSet& set, const std::vector<ClaimTest>& tests, const ClaimTest& t);
// "## Verdicts": every claim's test on both metrics (interval, p, Holm p, MDD, verdict), then a line a claim; a
// campaign's report and the fit report of its runs (report_scaling.cpp) show the same table.
std::string verdicts_section(const RunSet& set, const std::vector<ClaimTest>& tests, double alpha);

}  // namespace ufp4
