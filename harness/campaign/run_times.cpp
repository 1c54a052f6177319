#include "harness/campaign/run_times.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <set>

#include "common/log.h"
#include "harness/io/run_results.h"

namespace ufp4 {

std::map<std::string, double> recorded_training_seconds(const RunSet& set, const std::string& device) {
  std::map<std::string, double> out;
  for (const auto& r : set.runs) {
    if (r.path.empty()) continue;
    RunResults res;
    try {
      res = read_run_results(r.path, /*with_curves=*/true);
    } catch (const std::exception& e) {
      log_warn("time limit: " + r.path + " not read for its training time (" + e.what() + ")");
      continue;
    }
    if ((!device.empty() && res.device_name != device) || res.curves.time_s.empty() || !std::isfinite(res.curves.time_s.back())) continue;
    double& longest = out[r.model];
    longest = std::max(longest, res.curves.time_s.back());
  }
  return out;
}

std::map<std::string, double> time_limit_priors(const RunSet& set, const std::string& device) {
  std::map<std::string, double> priors = recorded_training_seconds(set, device);
  const std::string where = device.empty() ? "" : " on " + device;
  for (auto& [model, seconds] : priors) {
    seconds += kRunOverheadSeconds;
    log_info("time limit: a run of " + model + " is expected to take at least " + std::to_string(static_cast<int>(seconds)) +
             " s: the longest training time of its results" + where + ", plus " + std::to_string(static_cast<int>(kRunOverheadSeconds)) +
             " s for its start, final evaluation and results");
  }
  std::set<std::string> without;
  for (const auto& r : set.runs)
    if (!priors.count(r.model)) without.insert(r.model);
  for (const auto& model : without)
    log_info("time limit: no result of " + model + where + " records its training time: its runs start until one of them has finished here");
  return priors;
}

}  // namespace ufp4
