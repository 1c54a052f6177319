// How long a campaign's runs take, read from the results it holds: the time limit's estimate of a model's
// runs before one of them has finished in this command (harness/dist/run_scheduler.h). A device call that
// first resumes the runs an earlier call stopped times none of them (they did not run whole), so without
// this its fresh runs would start with no estimate however little time was left, and be cut off.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "harness/io/run_set.h"

namespace ufp4 {

// Per model, the longest training time a finished result of the set records (`train/time` at its last
// step: seconds of training, summed over resumed processes). A lower bound on the wall time a scheduler
// measures: a run's start (model build, data checks) comes on top. Models without a result are absent.
std::map<std::string, double> recorded_training_seconds(const RunSet& set);

// Adds `recorded` to the scheduler's estimates where it has none of a model yet or a shorter one, and logs
// each model's estimate.
void add_time_estimates(const std::map<std::string, double>& recorded, std::map<std::string, double>& longest_by_kind);

}  // namespace ufp4
