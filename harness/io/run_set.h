// A campaign's runs as planned from its manifests (harness/plan/campaign.h), with what a reader
// found for each: the result file holding that run id, or nothing. Reports and checks work from this
// set, never from whatever files a folder holds: a missing run is listed, a file outside the set
// (stale, another run) is named and ignored. Also what the campaign registered before it ran.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ufp4 {

struct PlannedRun {
  std::string name, run_id, model, recipe;  // recipe: the name the manifest gives (a preset or a file's stem)
  int64_t seed = 1, steps = 0, train_tokens = 0;
  std::string path;  // the verified result holding this run id; "" when missing
  // The training FLOPs a token of the run's model (train_flops_per_token of the manifest's configuration, which
  // the run id hashes): what a trend's compute reads, checked against the file's attribute; 0 when not known.
  double flops_per_token = 0;
};

// A claim as registered: a signed sum of BF16-relative gaps (percent) of one model's recipes, per seed
// (gap(a) - gap(b) for a plain contrast; e.g. (gap(a) - gap(b)) - (gap(c) - gap(d)) for an
// interaction), with the metric the final validation loss over the whole split.
struct RegisteredClaim {
  std::string id, model, text, baseline = "bf16";
  std::vector<std::string> plus, minus;  // recipes whose gaps are added and subtracted (a, b: {a}, {b})
  int direction = -1;         // the claim: the contrast is negative (-1) or positive (+1)
  double paper_effect = 0;    // the paper's value of the same contrast, percentage points; NaN when it published none
  std::string paper_source;
  // The effect the seeds are powered for and the MDD is read against: the paper's effect, or, for a
  // claim the paper states without a size, a registered effect of interest with its reason.
  double effect_of_interest = 0;
  std::string effect_source;
  bool powered = true;  // false: reported with its MDD, but the seeds are not set for it
  // A one-factor search's group (Table 3): each claim is a level against the paper's choice, Holm within
  // the group, and the report says per group whether the choice is best, tied within the MDD, or beaten.
  std::string group;
  // A trend claim (Figure 9): the least-squares slope of the contrast over log10 of the training compute
  // across these models (each model one point: the mean over its seeds), in percentage points a decade.
  // Its `model` is empty; it is never powered (the per-model claims set the seeds).
  std::vector<std::string> trend_models;
  bool trend() const { return !trend_models.empty(); }
  bool paper_sized() const { return paper_effect == paper_effect; }  // not NaN
  std::string contrast_text() const {
    std::string t;
    for (const auto& r : plus) t += (t.empty() ? "" : " + ") + std::string("gap(") + r + ")";
    for (const auto& r : minus) t += " - gap(" + r + ")";
    return trend() ? "slope of " + t + " over log10 compute (pp a decade)" : t;
  }
};

struct Registration {
  std::string date, metric, secondary, test, family, notes;
  double alpha = 0.05, power = 0.8;
  std::vector<RegisteredClaim> claims;
};

// Seeds per model: the pilot's size, then the number the registered power analysis set from it.
struct SeedPlan {
  int64_t pilot = 0, min = 0, max = 0;
  // Registered: the pilot's runs must end at least this many steps after each model's slowest recipe
  // reaches the transition level, or `campaign run` stops before deciding the seeds (0: no gate).
  int64_t transition_gate = 0;
  std::map<std::string, int64_t> seeds;              // model -> seeds of the campaign ("" until the pilot is analysed)
  std::map<std::string, double> pilot_sd;            // claim id -> paired sd of the pilot (percentage points)
  std::map<std::string, int64_t> seeds_for_power;    // claim id -> seeds for the power against the paper's effect
  std::string source;                                // the seeds file, when written
};

struct RunSet {
  std::string campaign, campaign_path, results_dir;
  std::string report, title, paper;    // the report's name and title; the paper's numbers file ("" when none)
  std::vector<std::string> read_dirs;  // other campaigns' folders whose runs (same run ids) this set uses
  std::vector<PlannedRun> runs;
  std::vector<std::string> ignored;  // "path: why" of result files in the folder that are not in the set
  Registration registration;
  SeedPlan seeds;
  size_t missing() const {
    size_t n = 0;
    for (const auto& r : runs) n += r.path.empty();
    return n;
  }
};

}  // namespace ufp4
