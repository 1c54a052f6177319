#include "tests/run_helpers.h"

#include <vector>

#include "harness/plan/run_files.h"
#include "harness/train/run_queue.h"

namespace ufp4::test {

RunPlan planned(const RunManifest& m) {
  std::vector<RunPlan> plans{plan_run(m)};
  prepare_plans(plans, nullptr);
  return plans.front();
}

std::string run_id_of(const RunManifest& m) { return plan_run(m).run_id; }
std::string results_of(const RunManifest& m) { return plan_run(m).results_path; }
std::string checkpoint_of(const RunManifest& m) { return plan_run(m).checkpoint.path; }
std::string found_results(const RunManifest& m) { return find_results(plan_run(m)); }

RunResult train_manifest(const RunManifest& m, const RunOptions& opt) { return run_training(planned(m), opt); }

}  // namespace ufp4::test
