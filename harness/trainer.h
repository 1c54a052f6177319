// The training engine: AdamW on FP32 master weights (BF16 compute on GPU, FP32 on CPU), warmup +
// cosine or WSD, gradient clipping and accumulation, evaluation, checkpoints every N steps and on
// SIGINT/SIGTERM with automatic resume, deterministic by default (the same manifest gives the same
// bits on the same device, resumed or not), divergence stop, progress lines, and one HDF5 result per
// run. Checkpoints and results are written crash-safely (harness/atomic_file.h).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "harness/run_manifest.h"
#include "models/transformer.h"

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

// Dense BF16 peak FLOP/s used for MFU (0 on CPU); peak memory the caching allocator handed out, GB (0 on CPU).
double peak_flops(const torch::Device& d);
double peak_memory_gb(const torch::Device& d);

// AdamW over the model: weight decay on matrices (dim >= 2) only.
std::unique_ptr<torch::optim::AdamW> make_optimizer(Transformer& model, const RunManifest& m);

struct StepStats {
  double loss = 0;       // mean LM loss over the micro-batches
  double grad_norm = 0;  // L2 norm before clipping
};

// One optimizer step: zero grads, forward/backward over `accum` micro-batches from next_batch()
// ([B, seq_len + 1] tokens on the model's device), clip, AdamW. On CUDA with LibTorch >= 2 the
// clipping and the update run as multi-tensor kernels (foreach norm, fused AdamW) on the optimizer's
// own state, so checkpoints are interchangeable with the per-tensor path.
StepStats train_step(Transformer& model, torch::optim::AdamW& opt, const std::function<torch::Tensor()>& next_batch, int64_t accum,
                     int64_t seq_len, double grad_clip);

std::string results_path(const RunManifest& m);  // where a new result is written
std::string results_path(const RunManifest& m, const std::string& run_id);
// An existing result of this run: any "<name>-<run id>.h5" in the output folder (content-addressed:
// the same run under another name counts). "" when none.
std::string find_results(const RunManifest& m);
std::string find_results(const RunManifest& m, const std::string& run_id);
// The run's checkpoint, one file ("<name>-<run id>.ckpt"), present while the run is partial.
std::string checkpoint_path(const RunManifest& m);
std::string checkpoint_path(const RunManifest& m, const std::string& run_id);
// Prepares the manifest's data folder when it holds no data and the manifest says how.
void ensure_data(const RunManifest& m);

}  // namespace ufp4
