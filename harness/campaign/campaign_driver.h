// A registered campaign (harness/plan/campaign.h) planned, run and checked: what `ufp4 campaign
// plan|run|check` does. It trains through the run queue (harness/train/run_queue.h) and tests the
// registered claims (harness/analysis/campaign_stats.h) to decide the seeds after the pilot.
#pragma once
#include <string>
#include <vector>

#include "harness/plan/campaign.h"
#include "harness/train/run_queue.h"

namespace ufp4 {

// Its runs (run id, state), the seeds, the transition against the runs' length, files ignored,
// and the missing runs side by side. Returns the exit code.
int campaign_plan(const Campaign& c);
// Trains the pilot's seeds, decides the seeds by the registered power rule once the pilot is in (after
// its transition gate), then trains the rest; `only`: that one run here, into `out_dir` when given,
// refused unless it plans as `expect_id` when that is given (the scheduler's children).
// Which of the missing runs `campaign run` trains (--models, --recipes; empty: all): a campaign finished
// model by model or level by level within a device call's time. The seeds are decided only when every
// pilot run is in, whatever the filter.
struct CampaignFilter {
  std::vector<std::string> models, recipes;
  bool keeps(const RunPlan& p) const;
  bool empty() const { return models.empty() && recipes.empty(); }
};
// Throws Error naming the campaign's models or recipes when the filter names one it does not have.
void check_filter(const Campaign& c, const CampaignFilter& f);
int campaign_run(Campaign& c, const std::string& only, const std::string& out_dir, const std::string& expect_id, bool pilot_only, RunQueueOptions q,
                 const CampaignFilter& filter = {});
// Exit kExitRuntime unless every run has verified results and no other result file sits in the folder;
// with `retrain_dir`, a sample retrained there and compared bit for bit.
int campaign_check(const Campaign& c, const std::string& retrain_dir, bool all_recipes, const RunQueueOptions& q);

}  // namespace ufp4
