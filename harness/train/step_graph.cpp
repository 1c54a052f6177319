#include "harness/train/step_graph.h"

#include "common/error.h"
#include "common/log.h"
#if defined(UFP4_WITH_CUDA) && TORCH_VERSION_MAJOR >= 2
#define UFP4_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace ufp4 {

std::string StepGraph::obstacle(Transformer& model, const torch::Device& device, bool data_parallel) {
  if (!device.is_cuda()) return "not a CUDA device";
#ifndef UFP4_CUDA_GRAPHS
  (void)model;
  (void)data_parallel;
  return "this build has no CUDA graphs (they need the CUDA kernels and LibTorch 2)";
#else
  if (data_parallel) return "data parallelism (its gradient all-reduce runs from autograd hooks, outside a graph)";
  QuantContext& ctx = *model->ctx;
  if (ctx.recipe.rht_signs == "per_step") return "the recipe's per-step RHT signs (drawn on the host each step)";
  // Whether every MoE GEMM of an ordinary step runs grouped (sync-free): asked with the per-step
  // switches off, which only the uncaptured steps turn on.
  const bool telemetry = ctx.telemetry;
  const auto capture = ctx.capture;
  ctx.telemetry = false;
  ctx.capture.reset();
  std::string why;
  for (auto& m : model->moe) {
    if (!m) continue;  // a dense layer's slot
    for (GroupedLinear* lin : {&m->fc1, &m->fc2}) {
      const torch::Tensor x = torch::empty({0, (*lin)->weight.size(2)}, torch::TensorOptions().device(device).dtype(torch::kBFloat16));
      for (Gemm g : kGemms)
        if (why.empty() && !(*lin)->runs_grouped(x, g))
          why = "MoE layer " + (*lin)->layers[0]->name + " runs its experts one by one (the host reads the segment ends)";
    }
  }
  ctx.telemetry = telemetry;
  ctx.capture = capture;
  return why;
#endif
}

#ifdef UFP4_CUDA_GRAPHS

struct StepGraph::Impl {
  Impl(Transformer m, torch::optim::AdamW& o, int64_t a, int64_t s, double c, int w)
      : model(std::move(m)), opt(o), accum(a), seq_len(s), grad_clip(c), warmup(w), stream(at::cuda::getStreamFromPool()) {}

  Transformer model;
  torch::optim::AdamW& opt;
  int64_t accum, seq_len;
  double grad_clip;
  int warmup;
  at::cuda::CUDAStream stream;
  torch::Tensor tokens;  // [accum, B, seq_len + 1]: the graph's input, filled before each replay
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  torch::Tensor loss_sum, norm;                // the graph's outputs
  std::vector<torch::Tensor> params, grads;    // the graph's gradient buffers, parameter by parameter
  int eager_steps = 0;
  int64_t captured_at = -1;
  std::string failed;

  void grads_to_none() {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  }

  // Captures forward, backward and clipping. The gradients start as none, so the captured backward
  // allocates them in the graph's memory and every replay overwrites them.
  void capture(int64_t step) {
    grads_to_none();
    stream.synchronize();
    graph = std::make_unique<at::cuda::CUDAGraph>();
    try {
      graph->capture_begin();
      try {
        int64_t a = 0;
        loss_sum = accumulate_gradients(model, [&] { return tokens[a++]; }, accum, accum, seq_len);
        norm = clip_gradients(opt, grad_clip);
      } catch (...) {
        try {
          graph->capture_end();
        } catch (...) {
        }
        throw;
      }
      graph->capture_end();
    } catch (const std::exception& e) {
      std::string what = e.what();
      what = what.substr(0, what.find('\n'));
      failed = "capture failed at step " + std::to_string(step) + ": " + what;
      graph.reset();
      loss_sum = norm = torch::Tensor();
      grads_to_none();
      (void)cudaGetLastError();
      log_warn("CUDA graph: " + failed + "; the steps run uncaptured");
      return;
    }
    captured_at = step;
    // The uncaptured steps' cached blocks go back to the device: the graph holds its own memory, and
    // keeping both would double a large model's footprint.
    c10::cuda::CUDACachingAllocator::emptyCache();
    params.clear();
    grads.clear();
    for (auto& p : model->parameters()) {
      params.push_back(p);
      grads.push_back(p.grad());
    }
  }
};

StepGraph::StepGraph(Transformer& model, torch::optim::AdamW& opt, int64_t accum, int64_t seq_len, double grad_clip, int warmup_steps)
    : impl_(std::make_unique<Impl>(model, opt, accum, seq_len, grad_clip, warmup_steps)) {
  const std::string why = obstacle(model, model->parameters().front().device(), false);
  if (!why.empty()) throw Error("CUDA graph step: " + why);
  model->ctx->device_step_offset = torch::zeros({1}, model->parameters().front().options().dtype(torch::kInt64));
}

StepGraph::~StepGraph() { impl_->model->ctx->device_step_offset = torch::Tensor(); }

StepStats StepGraph::step(const std::function<torch::Tensor()>& next_batch) {
  Impl& s = *impl_;
  QuantContext& ctx = *s.model->ctx;
  const at::cuda::CUDAStream caller = at::cuda::getCurrentCUDAStream();
  at::cuda::CUDAEvent ready;
  ready.record(caller);
  ready.block(s.stream);
  StepStats st;
  {
    c10::cuda::CUDAStreamGuard guard(s.stream);
    ctx.device_step_offset.fill_(ctx.step * 8);
    for (int64_t a = 0; a < s.accum; ++a) {
      const torch::Tensor b = next_batch();
      if (!s.tokens.defined()) s.tokens = torch::empty({s.accum, b.size(0), b.size(1)}, ctx.device_step_offset.options());
      if (b.dim() != 2 || b.size(0) != s.tokens.size(1) || b.size(1) != s.tokens.size(2))
        throw Error("CUDA graph step: the micro-batch's shape changed (a graph replays static shapes)");
      s.tokens[a].copy_(b);
    }
    // Steps whose values the host reads while they run stay uncaptured, as do the warm-up steps (on
    // this stream: cuBLAS workspaces and cached allocations exist before the capture).
    const bool host_reads = ctx.telemetry || (ctx.capture && ctx.capture->at_step(ctx.step));
    if (!host_reads && s.failed.empty() && s.eager_steps >= s.warmup && !s.graph) s.capture(ctx.step);
    if (!host_reads && s.graph) {
      for (size_t i = 0; i < s.params.size(); ++i) s.params[i].mutable_grad() = s.grads[i];
      s.graph->replay();
      ++replays_;
      fused_adamw_update(s.opt);
      st.loss = s.loss_sum.item<double>() / static_cast<double>(s.accum);
      st.grad_norm = s.norm.defined() ? s.norm.item<double>() : 0.0;
    } else {
      ++s.eager_steps;
      int64_t a = 0;
      st = train_step(s.model, s.opt, [&] { return s.tokens[a++]; }, s.accum, s.seq_len, s.grad_clip);
    }
  }
  at::cuda::CUDAEvent done;
  done.record(s.stream);
  done.block(caller);
  return st;
}

std::string StepGraph::describe() const {
  const Impl& s = *impl_;
  if (!s.failed.empty()) return "off: " + s.failed;
  if (s.captured_at < 0) return "not captured (" + std::to_string(s.eager_steps) + " uncaptured steps)";
  return "captured at step " + std::to_string(s.captured_at) + ", " + std::to_string(replays_) + " replays";
}

#else

struct StepGraph::Impl {};

StepGraph::StepGraph(Transformer& model, torch::optim::AdamW&, int64_t, int64_t, double, int) {
  throw Error("CUDA graph step: " + obstacle(model, model->parameters().front().device(), false));
}
StepGraph::~StepGraph() = default;
StepStats StepGraph::step(const std::function<torch::Tensor()>&) { return {}; }
std::string StepGraph::describe() const { return "off"; }

#endif

}  // namespace ufp4
