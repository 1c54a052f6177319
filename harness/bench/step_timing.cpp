#include "harness/bench/step_timing.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "common/error.h"
#include "harness/report/report.h"
#include "harness/train/determinism.h"
#include "harness/train/train_step.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ufp4 {

TimeStats time_stats(std::vector<double> v) {
  TimeStats s;
  if (v.empty()) return s;
  std::tie(s.mean, s.sd) = mean_sd(v);
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

std::vector<double> time_passes(const torch::Device& device, int warmup, int steps, const std::function<void(int)>& pass) {
  std::vector<double> ms;
  for (int s = 0; s < warmup + steps; ++s) {
    const bool timed = s >= warmup;
#ifdef UFP4_WITH_CUDA
    if (device.is_cuda()) {
      at::cuda::CUDAEvent a(cudaEventDefault), b(cudaEventDefault);
      auto stream = at::cuda::getCurrentCUDAStream();
      a.record(stream);
      pass(s);
      b.record(stream);
      b.synchronize();
      if (timed) ms.push_back(a.elapsed_time(b));
      continue;
    }
#endif
    (void)device;
    auto t0 = std::chrono::steady_clock::now();
    pass(s);
    if (timed) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return ms;
}

void reset_peak_memory(const torch::Device& device) {
#ifdef UFP4_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? c10::cuda::current_device() : device.index());
  }
#else
  (void)device;
#endif
}

TimedModel make_timed_model(const std::string& model, const std::string& recipe, int64_t seq_len, bool deterministic,
                            const torch::Device& device, bool batch_weights, std::shared_ptr<RowExchange> experts_over) {
  TimedModel t;
  t.adamw = optimizer_section(RunManifest{});  // the trainer's defaults (AdamW, clipping 1.0)
  set_deterministic(deterministic);
  t.config = model_config(model);
  t.config.seq_len = seq_len;
  torch::manual_seed(1);
  t.ctx = std::make_shared<QuantContext>();
  t.ctx->recipe = Recipe::load(recipe);
  t.ctx->run_seed = 1;
  t.ctx->batch_weight_operands = batch_weights;
  reset_peak_memory(device);
  t.net = Transformer(t.config, t.ctx, std::move(experts_over));
  t.net->to(device);
  t.net->set_compute_dtype(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  t.opt = make_optimizer(t.net, t.adamw);
  return t;
}

TimedMoeLayer make_timed_moe_layer(const std::string& model, const std::string& recipe, const torch::Device& device,
                                   std::shared_ptr<RowExchange> experts_over) {
  TimedMoeLayer t;
  set_deterministic(true);
  t.config = model_config(model);
  if (!t.config.is_moe()) throw Error("MoE layer benchmark: " + model + " is not a MoE model");
  torch::manual_seed(1);
  t.ctx = std::make_shared<QuantContext>();
  t.ctx->recipe = Recipe::load(recipe);
  t.ctx->run_seed = 1;
  reset_peak_memory(device);
  int64_t id = 0;
  t.layer = Moe(t.config, "layers.1.mlp", t.ctx, id, 1, std::move(experts_over));
  t.layer->to(device);
  return t;
}

void TimedMoeLayer::pass(const torch::Tensor& x, const torch::Tensor& g, int step) {
  ctx->step = step;
  for (auto& p : layer->parameters()) p.mutable_grad() = torch::Tensor();
  x.mutable_grad() = torch::Tensor();
  const torch::Tensor y = layer->forward(x);
  ((y * g).sum() + layer->aux_loss).backward();
}

double TimedMoeLayer::flops_per_token() const { return moe_layer_flops_per_token(config); }

}  // namespace ufp4
