// One optimizer step of the training engine, shared by the single-process loop (trainer.*), data
// parallelism (data_parallel.*) and the step benchmark: AdamW on FP32 master weights, gradient
// accumulation over micro-batches, clipping by the global norm.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>

#include "harness/plan/run_plan.h"
#include "models/transformer.h"

namespace ufp4 {

// AdamW over the model: weight decay on matrices (dim >= 2) only.
std::unique_ptr<torch::optim::AdamW> make_optimizer(Transformer& model, const OptimizerSection& o);

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

// The parts of a step. accumulate_gradients: forward and backward over `count` micro-batches, each
// loss scaled by 1/scale_accum (gradients add into .grad); before_last runs before the last backward
// (data parallelism arms its hooks there). Returns the sum of the micro-batches' LM losses, a
// float64 scalar on the model's device. clip_and_update: clips by the norm of all .grad and runs
// AdamW; returns the norm before clipping.
torch::Tensor accumulate_gradients(Transformer& model, const std::function<torch::Tensor()>& next_batch, int64_t count,
                                   int64_t scale_accum, int64_t seq_len, const std::function<void()>& before_last = {});
double clip_and_update(Transformer& model, torch::optim::AdamW& opt, double grad_clip);

#if TORCH_VERSION_MAJOR >= 2
// clip_and_update's halves on CUDA (LibTorch's foreach and fused kernels, as PyTorch's fused=True path
// calls them). clip_gradients: the global norm of all .grad as a device scalar (undefined when no
// gradient is), the gradients scaled in place when it exceeds grad_clip; no host synchronisation, so a
// CUDA graph can hold it. fused_adamw_update: AdamW on the state torch::optim::AdamW keeps, so a
// checkpoint saved by either path loads into the other.
torch::Tensor clip_gradients(torch::optim::AdamW& opt, double grad_clip);
void fused_adamw_update(torch::optim::AdamW& opt);
#endif

}  // namespace ufp4
