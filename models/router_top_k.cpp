#include "models/router_top_k.h"

#include <tuple>

#include "common/error.h"
#include "kernels/moe/router_top_k.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ufp4 {

namespace {

// Where the kernel gives topk's bits (models/router_top_k.h): FP32 probabilities on the GPU, k <= 2.
bool router_top_k_kernel_applies(const torch::Tensor& probs, int64_t k) {
#ifdef UFP4_WITH_CUDA
  return probs.is_cuda() && probs.scalar_type() == torch::kFloat32 && k <= 2;
#else
  (void)probs, (void)k;
  return false;
#endif
}

#ifdef UFP4_WITH_CUDA
cudaStream_t stream_of(const torch::Tensor& t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
#endif

// The kernel's selection, larger first or (by_expert) in ascending expert order; where it applies only.
void router_top_k_on_gpu(const torch::Tensor& probs, int64_t k, bool by_expert, torch::Tensor& values, torch::Tensor& ids) {
#ifdef UFP4_WITH_CUDA
  const torch::Tensor p = probs.contiguous();
  values = torch::empty({p.size(0), k}, p.options());
  ids = torch::empty({p.size(0), k}, p.options().dtype(torch::kInt64));
  RouterTopKIO io;
  io.rows = p.size(0), io.experts = p.size(1), io.k = k, io.by_expert = by_expert;
  io.probs = p.data_ptr<float>(), io.values = values.data_ptr<float>(), io.ids = ids.data_ptr<int64_t>();
  cuda_router_top_k(io, stream_of(p));
#else
  (void)probs, (void)k, (void)by_expert, (void)values, (void)ids;
  throw RuntimeError("router top k: no CUDA in this build");
#endif
}

// The probabilities' gradient [T, E]: each value's gradient g [T, k] at its expert, zero elsewhere. One
// kernel on the GPU for FP32; elsewhere formed with comparisons (what topk's scatter writes: the ids of a
// row are distinct, so the k selections never overlap). Both copy, so they give the same bits.
torch::Tensor scatter_top_k_grad(const torch::Tensor& g, const torch::Tensor& ids, int64_t experts) {
#ifdef UFP4_WITH_CUDA
  if (g.is_cuda() && g.scalar_type() == torch::kFloat32) {
    const torch::Tensor gc = g.contiguous(), ic = ids.contiguous();
    torch::Tensor dprobs = torch::empty({gc.size(0), experts}, gc.options());
    RouterTopKBackwardIO io;
    io.rows = gc.size(0), io.experts = experts, io.k = gc.size(1);
    io.grad = gc.data_ptr<float>(), io.ids = ic.data_ptr<int64_t>(), io.dprobs = dprobs.data_ptr<float>();
    cuda_router_top_k_backward(io, stream_of(gc));
    return dprobs;
  }
#endif
  const torch::Tensor e = torch::arange(experts, ids.options());
  torch::Tensor dprobs = torch::zeros({ids.size(0), experts}, g.options());
  for (int64_t j = 0; j < ids.size(1); ++j) dprobs = torch::where(ids.select(1, j).unsqueeze(1) == e, g.select(1, j).unsqueeze(1), dprobs);
  return dprobs;
}

// topk with its gradient; by_expert (the kernel's only) leaves the k of a row in ascending expert order.
struct TopKExperts : public torch::autograd::Function<TopKExperts> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& probs, int64_t k, bool by_expert) {
    torch::Tensor values, ids;
    if (router_top_k_kernel_applies(probs, k))
      router_top_k_on_gpu(probs, k, by_expert, values, ids);
    else if (by_expert)
      throw RuntimeError("router top k: the expert order is the kernel's (FP32 on the GPU, k <= 2)");
    else
      std::tie(values, ids) = probs.topk(k, -1);
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["experts"] = probs.size(-1);
    ctx->mark_non_differentiable({ids});
    // No zero gradient formed for the ids (integers, never read) nor for unused values: a fill a step.
    ctx->set_materialize_grads(false);
    return {values, ids};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    // Autograd runs this node only when the values carry a gradient (the ids never do): a guard, not a path.
    if (!g[0].defined()) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    return {scatter_top_k_grad(g[0], ctx->saved_data["ids"].toTensor(), ctx->saved_data["experts"].toInt()), torch::Tensor(), torch::Tensor()};
  }
};

void check_top_k_shape(const torch::Tensor& probs, int64_t k) {
  if (probs.dim() != 2 || k < 1 || k > probs.size(1)) throw RuntimeError("top_k_experts: probs [tokens, experts] and 1 <= k <= experts expected");
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> top_k_experts(const torch::Tensor& probs, int64_t k) {
  check_top_k_shape(probs, k);
  const auto out = TopKExperts::apply(probs, k, false);
  return {out[0], out[1]};
}

ExpertChoice choose_experts(const torch::Tensor& probs, int64_t k) {
  check_top_k_shape(probs, k);
  if (router_top_k_kernel_applies(probs, k)) {
    const auto out = TopKExperts::apply(probs, k, true);
    return ExpertChoice{out[1], out[0] / out[0].sum(-1, true)};
  }
  const auto top = top_k_experts(probs, k);
  return in_expert_order(top.second, top.first / top.first.sum(-1, true));
}

}  // namespace ufp4
