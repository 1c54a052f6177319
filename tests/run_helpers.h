// Test helpers for a run given by its manifest: its run id and files as planned now (plan_run, the data
// as it stands), or the run planned and trained the way `ufp4 run` does it (the data prepared first).
#pragma once
#include <string>

#include "harness/plan/run_manifest.h"
#include "harness/plan/run_plan.h"
#include "harness/train/trainer.h"

namespace ufp4::test {

RunPlan planned(const RunManifest& m);  // plan_run, then the data prepared (prepare_plans)
std::string run_id_of(const RunManifest& m);
std::string results_of(const RunManifest& m);     // where its results go
std::string checkpoint_of(const RunManifest& m);  // its checkpoint while partial
std::string found_results(const RunManifest& m);  // its verified results, "" when none (find_results)
RunResult train_manifest(const RunManifest& m, const RunOptions& opt);

}  // namespace ufp4::test
