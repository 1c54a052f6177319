// Where a run's files live and which of them can be trusted: "<out_dir>/<name>-<run id>.h5" (results),
// ".ckpt" (checkpoint), ".lock" (held while a process trains it); the plan holds each path. A results
// file counts as the run's only when its content matches its hash and it holds this run id
// (harness/io/run_results.h): a file is never trusted by its name.
#pragma once
#include <string>
#include <vector>

#include "harness/plan/run_plan.h"

namespace ufp4 {

// "<out_dir>/<name>-<run id>": the stem of a run's files (plan_run names them from it).
std::string run_file_stem(const std::string& out_dir, const std::string& name, const std::string& run_id);
// An existing, valid result of this run: "<name>-<run id>.h5" in the output folder, else any
// "*-<run id>.h5" below it (content-addressed: the same run under another name counts). "" when none.
// Files named for this run id that fail their checks (damaged, another run's content) are skipped and,
// when `rejected` is given, listed there as "path: why".
std::string find_results(const std::string& out_dir, const std::string& name, const std::string& run_id, std::vector<std::string>* rejected = nullptr);
std::string find_results(const RunPlan& p, std::vector<std::string>* rejected = nullptr);
// The same run made in another folder: a valid "*-<run id>.h5" below the checkout's results/ (not its
// references, results/reference/) and build*/ folders, or below a folder of UFP4_REUSE (colon-separated,
// searched first; "off": none at all), outside `except_dir`, made on `device` (the device name a run
// records; "" for any: a run id does not name the device, and GPU models differ in bits). "" when none.
std::string find_identical_run(const std::string& run_id, const std::string& except_dir, const std::string& device);

}  // namespace ufp4
