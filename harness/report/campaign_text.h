// How a campaign's tested claims are written, shared by its own report (report_campaign.cpp) and the
// page of every campaign's verdicts (report_verdicts.cpp), so that both say the same thing the same way.
#pragma once
#include <cstdint>
#include <string>
#include <utility>

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
// A claim tested on fewer complete seeds than its models' registered number has no verdict yet.
bool interim(const RunSet& set, const ClaimTest& t);
// "**holds**", or "**inconclusive** (interim look at ...: the test gives holds)" before the seeds are in;
// `d` is the row's interval (primary or secondary metric): without one, "waiting for runs".
std::string shown_verdict(const RunSet& set, const ClaimTest& t, Verdict v, const Interval& d);
// A one-factor group's answer ("**beaten** by a, b") and its lowest level ("a (-0.123)", or the choice itself).
std::string group_answer_text(const GroupAnswer& g);
std::string lowest_level_text(const GroupAnswer& g);
// The registered effect: the paper's ("-0.290"), or the effect of interest ("+0.290 (of interest)").
std::string registered_effect_text(const RegisteredClaim& c);

}  // namespace ufp4
