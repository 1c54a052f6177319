// Two results of one run compared bit for bit: every point of train/loss, train/grad_norm, eval/loss and
// telemetry/alpha, and the final weights' SHA-256 (`ufp4 check --exact`, `ufp4 campaign check`).
#pragma once
#include <string>

#include "harness/io/run_results.h"

namespace ufp4 {

// Prints one line a curve ("ok ..." or "FAIL ...") and returns the number of failures.
int compare_runs_exact(const std::string& name, const RunResults& result, const RunResults& reference);

}  // namespace ufp4
