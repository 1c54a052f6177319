// Timing of training steps for the benchmarks: timed passes after warm-up (CUDA events on the
// current stream on a GPU, the host clock on CPU), their median / mean / sd, and the caching
// allocator's peak reset before a measurement.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "harness/plan/run_plan.h"
#include "models/model_config.h"
#include "models/quant_linear.h"
#include "models/transformer.h"

namespace ufp4 {

struct TimeStats {
  double median = 0, mean = 0, sd = 0;
};
TimeStats time_stats(std::vector<double> ms);

// Runs pass(0 .. warmup + steps - 1) and returns the milliseconds of the timed ones (after the warm-up).
std::vector<double> time_passes(const torch::Device& device, int warmup, int steps, const std::function<void(int)>& pass);

// Frees the allocator's cached blocks and restarts its peak, so that peak_memory_gb() measures what follows.
void reset_peak_memory(const torch::Device& device);

// A model set up as the trainer trains it, for timing its steps: deterministic mode as asked, the
// model at `seq_len` with weights from seed 1, a quantization context of `recipe` at run seed 1
// (batch_weights: QuantContext::batch_weight_operands), on `device` in its compute dtype, and the
// trainer's default optimizer (AdamW, clipping 1.0). The allocator's peak is reset before the model
// is made, so peak_memory_gb() counts it.
struct TimedModel {
  ModelConfig config;
  OptimizerSection adamw;
  std::shared_ptr<QuantContext> ctx;
  Transformer net{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt;
};
// experts_over: expert parallelism's group (models/moe.h), for a MoE model split over ranks.
TimedModel make_timed_model(const std::string& model, const std::string& recipe, int64_t seq_len, bool deterministic,
                            const torch::Device& device, bool batch_weights = true, std::shared_ptr<RowExchange> experts_over = nullptr);

// One routed MoE layer of `model` (layer 1, after the first dense layer) for timing: deterministic mode,
// seed 1, on `device`, the peak-memory counter reset; its experts over `experts_over`'s ranks when given.
struct TimedMoeLayer {
  ModelConfig config;
  std::shared_ptr<QuantContext> ctx;
  Moe layer{nullptr};
  // One timed pass: the forward of x (requires grad) and the backward of (y . g) + the balance loss.
  void pass(const torch::Tensor& x, const torch::Tensor& g, int step);
  // 6 x (router + (top-k + shared) experts' SwiGLU) FLOPs a token: its active parameters.
  double flops_per_token() const;
};
TimedMoeLayer make_timed_moe_layer(const std::string& model, const std::string& recipe, const torch::Device& device,
                                   std::shared_ptr<RowExchange> experts_over = nullptr);

}  // namespace ufp4
