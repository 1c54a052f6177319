#include "harness/campaign/run_times.h"

#include <algorithm>
#include <cmath>

#include "common/log.h"
#include "harness/io/run_results.h"

namespace ufp4 {

std::map<std::string, double> recorded_training_seconds(const RunSet& set) {
  std::map<std::string, double> out;
  for (const auto& r : set.runs) {
    if (r.path.empty()) continue;
    const RunResults res = read_run_results(r.path, /*with_curves=*/true);
    if (res.curves.time_s.empty() || !std::isfinite(res.curves.time_s.back())) continue;
    double& longest = out[r.model];
    longest = std::max(longest, res.curves.time_s.back());
  }
  return out;
}

void add_time_estimates(const std::map<std::string, double>& recorded, std::map<std::string, double>& longest_by_kind) {
  for (const auto& [model, seconds] : recorded) {
    double& have = longest_by_kind[model];
    have = std::max(have, seconds);
    log_info("time limit: runs of " + model + " take up to " + std::to_string(static_cast<int>(std::ceil(have))) +
             " s of training (the longest of this campaign's results; a run's start comes on top)");
  }
}

}  // namespace ufp4
