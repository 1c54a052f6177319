// The training engine: AdamW on FP32 master weights (BF16 compute on GPU, FP32 on CPU), warmup +
// cosine or WSD, gradient clipping and accumulation, evaluation, checkpoints every N steps and on
// SIGINT/SIGTERM with automatic resume (bit-identical loss curve on the same device), divergence
// stop, progress lines, and one HDF5 result per run written atomically.
#pragma once
#include <string>

#include "harness/run_manifest.h"

namespace ufp4 {

struct RunOptions {
  bool force = false;          // re-run even if the result exists
  int64_t stop_after = -1;     // stop (as if signalled) after this step, for resume tests
  std::string device;          // overrides the manifest's device when set
};

enum class RunStatus { kCompleted, kSkipped, kStopped, kDiverged };

struct RunResult {
  RunStatus status;
  std::string results_path;
  int64_t steps_done = 0;
};

RunResult run_training(const RunManifest& m, const RunOptions& opt);

std::string results_path(const RunManifest& m);  // where a new result is written
// An existing result of this run: any "<name>-<run id>.h5" in the output folder (content-addressed:
// the same resolved manifest under another name counts). "" when none.
std::string find_results(const RunManifest& m);
std::string checkpoint_dir(const RunManifest& m);

}  // namespace ufp4
