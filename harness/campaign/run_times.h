// How long a campaign's runs take, read from the results it holds: the least the time limit expects of a
// model's runs, before and after one of them has finished in the command (ScheduleOptions::prior_by_kind,
// harness/dist/run_scheduler.h). A device call that first resumes the runs an earlier call stopped times
// none of them, so without it the call's fresh runs would start however little time was left.
#pragma once
#include <map>
#include <string>

#include "harness/io/run_set.h"

namespace ufp4 {

// What `train/time` leaves out of a run's time under the scheduler: the process's start, the final
// evaluation over the whole validation split and the writing of its results: about 5 s on an H200 at eight
// runs a GPU (results/figure9/logs/campaign-call-i.log: the scheduler timed 167 s and 289 s where the
// longest files then finished record 162 s and 284 s). The margin is three times that.
constexpr double kRunOverheadSeconds = 15;

// Per model, the longest training time a finished result of the set records (`train/time` at its last
// step: seconds of training, summed over resumed processes), of results made on `device` ("" : any; the
// name runs record, "NVIDIA H200"). A file that cannot be read is skipped with a warning: an estimate is
// advice, not a check. Models without such a result are absent.
std::map<std::string, double> recorded_training_seconds(const RunSet& set, const std::string& device);

// The time limit's priors for `set`'s runs: the recorded time of each model plus kRunOverheadSeconds,
// each logged, and the models without one named (their runs start until one finishes in the command).
std::map<std::string, double> time_limit_priors(const RunSet& set, const std::string& device);

}  // namespace ufp4
