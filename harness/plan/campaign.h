// A campaign: the registered experiment behind one report (experiments/<table or figure>/campaign.toml).
// It names its manifests (which expand into recipes and other factors), the results folder, the data
// manifest each data folder was planned against (so the run ids can be recomputed anywhere), the
// seeds policy (an internal pilot, then as many seeds as the registered power analysis asks for,
// between a floor and the budget's cap) and the registration: claims, metric, test, alpha, power and
// the Holm family, written before anything ran. Its runs are each manifest's runs times the seeds of
// its model; run names end in "-<seed>".
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/io/run_set.h"
#include "harness/plan/run_plan.h"

namespace ufp4 {

struct Campaign {
  std::string path, name, report, results_dir;
  std::string title, paper;  // the report's title and the paper's numbers (reports/paper/*.toml); optional
  // Results folders of other campaigns at the same design: a run of this campaign whose run id one of
  // them holds (the same model, recipe, seed, data and steps) is read from there, not trained again.
  std::vector<std::string> read_dirs;
  std::vector<std::string> manifests;
  std::map<std::string, std::string> data_pins;  // data folder -> committed data.toml
  Registration registration;
  SeedPlan seeds;  // the policy (pilot, min, max), and the seeds file's numbers once it exists

  // Parses and checks the campaign file and its manifests, reads the seeds file when present, and
  // pins the data manifests (harness/data/data.h). Throws Error naming file, line and key.
  static Campaign load(const std::string& path);
  std::string seeds_path() const { return results_dir + "/seeds.toml"; }
  bool seeds_decided() const { return !seeds.source.empty(); }
  // The runs: every manifest's runs x seeds 1..n of their model, n the pilot's size until the seeds
  // file sets it (or with pilot_only); seed by seed, so that a campaign cut short holds whole seeds.
  std::vector<RunManifest> runs(bool pilot_only = false) const;
  std::vector<RunPlan> plans(bool pilot_only = false) const;  // the runs, each planned (plan_run)
  // The runs with the verified result each has in the results folder, and the folder's other result
  // files, named with why they are ignored.
  RunSet resolve(bool pilot_only = false) const;
  // The verified result of a run in one of the folders this campaign reads; "" when none holds it.
  std::string read_result(const RunPlan& p) const;
};

// Every campaign file under `dir` (experiments/*/campaign.toml), in name order.
std::vector<std::string> campaign_files(const std::string& dir);

// Writes the seeds file: per model the seeds the power analysis set, per claim the pilot's paired sd
// and the seeds it asked for. Refuses to replace an existing one (the decision is made once).
void write_seed_plan(const Campaign& c, const SeedPlan& plan);

}  // namespace ufp4
