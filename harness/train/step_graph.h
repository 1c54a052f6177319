// A training step replayed as a CUDA graph: the forward and backward passes over every micro-batch
// and the gradient clipping, captured once and launched as one graph each step, so that a small
// model's step is no longer bound by the host's kernel launches.
//
// What changes from step to step reaches the graph through device memory: the tokens (copied into
// the graph's input buffers), the step number that keys stochastic rounding (QuantContext's
// device_step_offset). AdamW runs after the replay, uncaptured: LibTorch's fused AdamW reads a
// learning rate from device memory only as FP32, where the uncaptured step passes it as FP64, so a
// captured update would change every GPU result's bits; it is a handful of multi-tensor launches.
//
// A replayed step gives the bits the uncaptured step gives (the [cuda] test "a CUDA-graph step equals
// the uncaptured step"). Steps that read results on the host while they run stay uncaptured: the
// warm-up steps before the capture, telemetry steps (alpha), operand-capture steps.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "common/non_copyable.h"
#include "harness/train/train_step.h"
#include "models/transformer.h"

namespace ufp4 {

class StepGraph : NonCopyable {
 public:
  // Why this model's steps cannot be captured on `device` ("" when they can): not CUDA, a LibTorch
  // without CUDA graphs, data parallelism (its all-reduce hooks), per-step RHT signs (drawn on the
  // host each step), MoE experts run one by one (the host reads the segment ends).
  static std::string obstacle(Transformer& model, const torch::Device& device, bool data_parallel);

  // The model's context gets its device_step_offset for as long as this object lives.
  StepGraph(Transformer& model, torch::optim::AdamW& opt, int64_t accum, int64_t seq_len, double grad_clip, int warmup_steps = 2);
  ~StepGraph();

  // One optimizer step at the context's step, as train_step() does it: `accum` micro-batches from
  // next_batch() ([B, seq_len + 1] tokens), clipping, AdamW. Runs on the object's own stream, ordered
  // after the caller's stream and before its later work.
  StepStats step(const std::function<torch::Tensor()>& next_batch);

  // "replayed from step N" or "captured nothing" with the reason (a failed capture says why).
  std::string describe() const;
  int64_t replays() const { return replays_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t replays_ = 0;
};

}  // namespace ufp4
