#include "models/router_top_k.h"

#include <tuple>

#include "common/error.h"
#include "kernels/moe/router_top_k.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ufp4 {

namespace {

// The kernel's selection where it gives topk's bits (models/router_top_k.h): FP32 probabilities on the
// GPU, k <= 2. False elsewhere (the caller then uses LibTorch's topk).
bool router_top_k_on_gpu(const torch::Tensor& probs, int64_t k, torch::Tensor& values, torch::Tensor& ids) {
#ifdef UFP4_WITH_CUDA
  if (!probs.is_cuda() || probs.scalar_type() != torch::kFloat32 || k > 2) return false;
  const torch::Tensor p = probs.contiguous();
  values = torch::empty({p.size(0), k}, p.options());
  ids = torch::empty({p.size(0), k}, p.options().dtype(torch::kInt64));
  RouterTopKIO io;
  io.rows = p.size(0), io.experts = p.size(1), io.k = k;
  io.probs = p.data_ptr<float>(), io.values = values.data_ptr<float>(), io.ids = ids.data_ptr<int64_t>();
  cuda_router_top_k(io, at::cuda::getCurrentCUDAStream(p.device().index()).stream());
  return true;
#else
  (void)probs, (void)k, (void)values, (void)ids;
  return false;
#endif
}

// topk with its gradient: the values' gradient at their experts, zero elsewhere (what topk's scatter
// writes, formed with comparisons: the ids of a row are distinct, so the k selections never overlap).
struct TopKExperts : public torch::autograd::Function<TopKExperts> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& probs, int64_t k) {
    torch::Tensor values, ids;
    if (!router_top_k_on_gpu(probs, k, values, ids)) std::tie(values, ids) = probs.topk(k, -1);
    ctx->saved_data["ids"] = ids;
    ctx->saved_data["experts"] = probs.size(-1);
    ctx->mark_non_differentiable({ids});
    // No zero gradient formed for the ids (integers, never read) nor for unused values: a fill a step.
    ctx->set_materialize_grads(false);
    return {values, ids};
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    // Autograd runs this node only when the values carry a gradient (the ids never do): a guard, not a path.
    if (!g[0].defined()) return {torch::Tensor(), torch::Tensor()};
    const torch::Tensor ids = ctx->saved_data["ids"].toTensor();
    const int64_t E = ctx->saved_data["experts"].toInt();
    const torch::Tensor e = torch::arange(E, ids.options());
    torch::Tensor dprobs = torch::zeros({ids.size(0), E}, g[0].options());
    for (int64_t j = 0; j < ids.size(1); ++j)
      dprobs = torch::where(ids.select(1, j).unsqueeze(1) == e, g[0].select(1, j).unsqueeze(1), dprobs);
    return {dprobs, torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> top_k_experts(const torch::Tensor& probs, int64_t k) {
  if (probs.dim() != 2 || k < 1 || k > probs.size(1)) throw RuntimeError("top_k_experts: probs [tokens, experts] and 1 <= k <= experts expected");
  const auto out = TopKExperts::apply(probs, k);
  return {out[0], out[1]};
}

}  // namespace ufp4
