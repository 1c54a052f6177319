#include "models/moe.h"

#include <cmath>

#include "models/fused_ops.h"

namespace ufp4 {

MoeImpl::MoeImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& id, int layer_index)
    : top_k(c.top_k), n_experts(c.n_experts), capacity_factor(c.capacity_factor) {
  router = register_parameter("router", torch::randn({c.n_experts, c.d_model}) * (1.0 / std::sqrt(static_cast<double>(c.d_model))));
  const int n = static_cast<int>(c.n_layers);
  // Expert e's fc1 and fc2 take layer ids id + 2e and id + 2e + 1, and its weights are drawn fc1 then
  // fc2, expert by expert: the keys and initial values of one QuantLinear pair per expert.
  fc1 = register_module("experts_linear_fc1", GroupedLinear(c.n_experts, c.d_model, 2 * c.expert_hidden, prefix, "linear_fc1", ctx, id, 2,
                                                            layer_index, n));
  fc2 = register_module("experts_linear_fc2", GroupedLinear(c.n_experts, c.expert_hidden, c.d_model, prefix, "linear_fc2", ctx, id + 1, 2,
                                                            layer_index, n));
  fc1->wgrad_rows_cache = fc2->wgrad_rows_cache;  // the same routing: one WGRAD layout a layer
  for (int64_t e = 0; e < c.n_experts; ++e) {
    fc1->init_expert(e);
    fc2->init_expert(e);
  }
  id += 2 * c.n_experts;
  if (c.n_shared_experts > 0)
    shared = register_module("shared_expert", Mlp(c.d_model, c.expert_hidden * c.n_shared_experts, prefix + ".shared_expert", ctx, id, layer_index, n));
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1), E = n_experts;
  torch::Tensor flat = x.reshape({-1, d});
  const int64_t T = flat.size(0);
  torch::Tensor probs = torch::softmax(torch::nn::functional::linear(flat.to(torch::kFloat32), router), -1);  // [T, E]
  auto top = probs.topk(top_k, -1);
  torch::Tensor weights = std::get<0>(top) / std::get<0>(top).sum(-1, true);
  torch::Tensor idx = std::get<1>(top);  // [T, k]
  const int64_t capacity = capacity_factor > 0 ? static_cast<int64_t>(std::ceil(capacity_factor * T * top_k / E)) : 0;
  const Routing r = route(idx, weights, E, capacity);
  // Switch-style balance loss: E * sum_e (fraction of assignments to e) * (mean probability of e).
  torch::Tensor counts = r.assigned.to(torch::kFloat32);
  aux_loss = E * ((counts / static_cast<double>(T * top_k)) * probs.mean(0)).sum();
  // The fused combine on CUDA only: CPU runs keep LibTorch's composition (the CI reference curves).
  const bool fused_routing = fused_combine && flat.is_cuda();
  // Where fc1's quantized operands come from the segmented pair kernel, it reads the tokens through the
  // dispatch's row map itself: the dispatched copy of every token's row is never formed.
  torch::Tensor h = fc1->reads_gathered(flat) ? fc1->forward_gathered(flat, r, dispatch_rows(r), fused_routing)
                                              : fc1(dispatch_tokens(flat, r, fused_routing), r);
  if (fused && h.is_cuda() && fused_swiglu_applies(h)) h = fused_swiglu(h);
  else {
    auto gu = h.chunk(2, -1);
    h = torch::silu(gu[0]) * gu[1];
  }
  torch::Tensor out = combine_tokens(fc2(h, r), r, fused_routing);
  if (shared) out = out + shared(flat);
  return out.view(x.sizes());
}

}  // namespace ufp4
