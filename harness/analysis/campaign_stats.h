// The registered tests of a campaign, computed from its run set (harness/io/run_set.h): for each claim
// the per-seed paired difference of the BF16-relative gaps (percentage points) of the final
// validation loss over the whole split, its interval, the paired t test's p, Holm-adjusted within the
// registered family, the minimal detectable difference beside the paper's effect, and the verdict
// (stats.h registered_verdict); the same for the secondary metric, the training loss of the last
// tenth of the steps. Also the pilot's seed plan and the delay of the fast-descent transition.
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/analysis/stats.h"
#include "harness/io/run_set.h"

namespace ufp4 {

// One run's numbers as the campaign judges them.
struct RunMetrics {
  std::string path, commit, device, content_sha256;
  double final_val = NAN, train_tail = NAN, epochs = NAN;
  int64_t last_k = 0, steps = 0;
  double compute = NAN;      // training FLOPs: FLOPs per token x tokens trained
  std::vector<double> loss;  // the training curve
  std::vector<double> eval_step, eval_loss;  // the validation loss at each evaluation
};
// model -> recipe -> seed -> metrics, for every run of the set that has results.
using CampaignRuns = std::map<std::string, std::map<std::string, std::map<int64_t, RunMetrics>>>;
CampaignRuns read_campaign_runs(const RunSet& set);

struct ClaimTest {
  RegisteredClaim claim;
  std::vector<int64_t> seeds;             // seeds with the baseline and every recipe of the contrast
  std::vector<double> values;             // the contrast of the gaps (pp), per seed (a trend's: per model and seed)
  std::map<std::string, size_t> model_seeds;  // complete seeds per model of the claim
  Interval diff, diff_train;              // its mean and interval (pp): final validation loss, training loss of the last tenth
  double p = NAN, p_holm = NAN, p_train = NAN, p_train_holm = NAN, mdd = NAN, mdd_train = NAN;
  Verdict verdict = Verdict::kInconclusive, verdict_train = Verdict::kInconclusive;
  // Whether the verdict stands whatever the rest of its Holm family comes to: it is the same at the claim's
  // own p and at the family's size times it, the least and the most that Holm's adjustment can make of
  // that p (primary, secondary metric). A claim whose seeds are in is final once settled, even while other
  // claims of its family still wait for theirs.
  bool settled = false, settled_train = false;
};
// Claims of one Holm family: the powered claims of one group (every powered claim where none names a
// group), or the contrasts reported without power, a family of their own.
bool same_family(const RegisteredClaim& a, const RegisteredClaim& b);
// The recipe every gap is taken against: the first claim's baseline, bf16 without claims.
std::string baseline_recipe(const Registration& reg);

// Every registered claim tested, Holm-adjusted within the family (primary and secondary apart).
std::vector<ClaimTest> test_claims(const Registration& reg, const CampaignRuns& runs);

// A one-factor group's answer (Table 3): its claims each put one level (plus) against the paper's choice
// (minus) with direction +1, "the choice is below the level". The choice is "best" when every claim
// holds, "beaten" when a level is significantly below it (a claim contradicted), and otherwise "tied
// within the MDD" (no level detectably better at these seeds).
struct GroupAnswer {
  std::string group, choice, answer;
  std::vector<std::string> levels, beaten_by;
  std::string best_level;      // the level with the lowest mean contrast (the choice itself when none is below it)
  double best_contrast = NAN;  // its contrast against the choice (pp)
  double largest_mdd = NAN;    // over the group's claims (pp)
};
std::vector<GroupAnswer> group_answers(const std::vector<ClaimTest>& tests);

// The seeds each model needs by the registered rule, from the pilot's claims (tests of seeds 1..pilot):
// per powered claim the fewest seeds reaching its registered effect at the pilot's paired sd, clamped
// to [min, max]; a model takes the most its claims ask for.
SeedPlan plan_seeds(const SeedPlan& policy, const Registration& reg, const std::vector<ClaimTest>& pilot);

// The trailing averages of `x` over `w` values: out[j] averages x[j] .. x[j + w - 1].
std::vector<double> moving_average(const std::vector<double>& x, size_t w);

// The fast-descent transition: the step at which a run's training loss, averaged over 50 steps (a
// tenth of a shorter run), first reaches the level the baseline recipe's runs reach (on average) at a
// quarter of their steps; per recipe the paired delay against the baseline, in steps.
struct TransitionDelay {
  std::string model, recipe;
  double level = NAN;     // the loss level
  Interval steps, delay;  // steps to reach it; paired delay against the baseline
};
std::vector<TransitionDelay> transition_delays(const CampaignRuns& runs, const std::string& baseline);

// How far a recipe's seeds lie apart as they train: the standard deviation over seeds of the validation
// loss at each evaluation step that at least two seeds reached (non-finite losses left out). The design
// assumes the spread falls once the transition is past; a spread that has not fallen by the last
// evaluation (at least kNotFallen of its largest) marks runs that end in a seed-dependent descent, where
// the paired sd is large too and the MDD falls only as 1 / sqrt(seeds) from a high level.
struct SeedSpread {
  static constexpr double kNotFallen = 0.9;
  std::string model, recipe;
  std::vector<double> steps, sd;  // per evaluation: the steps trained by then, the sd over seeds
  std::vector<size_t> seeds;      // seeds with that evaluation
  double end_to_largest() const;  // the last evaluation's sd over the largest; NaN when every sd is 0
  bool not_fallen() const;        // at least two evaluations and end_to_largest() >= kNotFallen
};
std::vector<SeedSpread> seed_spreads(const CampaignRuns& runs);

}  // namespace ufp4
