#include "models/moe.h"

#include <cmath>

#include "common/error.h"
#include "models/fused_ops.h"
#include "models/router_top_k.h"

namespace ufp4 {

MoeImpl::MoeImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& id, int layer_index,
                 std::shared_ptr<RowExchange> experts_over)
    : top_k(c.top_k), n_experts(c.n_experts), capacity_factor(c.capacity_factor), expert_group(std::move(experts_over)) {
  router = register_parameter("router", torch::randn({c.n_experts, c.d_model}) * (1.0 / std::sqrt(static_cast<double>(c.d_model))));
  const int n = static_cast<int>(c.n_layers);
  local_experts = c.n_experts;
  if (expert_group) {
    const int ranks = expert_group->size();
    if (c.n_experts % ranks)
      throw Error(c.name + ": " + std::to_string(c.n_experts) + " experts do not split over an expert-parallel group of " + std::to_string(ranks) +
                  " ranks (allowed: a divisor of the experts)");
    local_experts = c.n_experts / ranks;
    first_expert = expert_group->rank() * local_experts;
  }
  // Expert e's fc1 and fc2 take layer ids id + 2e and id + 2e + 1, and its weights are drawn fc1 then
  // fc2, expert by expert: the keys and initial values of one QuantLinear pair per expert. A rank of an
  // expert-parallel group draws every expert's and keeps its own.
  fc1 = register_module("experts_linear_fc1", GroupedLinear(local_experts, c.d_model, 2 * c.expert_hidden, prefix, "linear_fc1", ctx, id, 2,
                                                            layer_index, n, first_expert));
  fc2 = register_module("experts_linear_fc2", GroupedLinear(local_experts, c.expert_hidden, c.d_model, prefix, "linear_fc2", ctx, id + 1, 2,
                                                            layer_index, n, first_expert));
  fc1->wgrad_rows_cache = fc2->wgrad_rows_cache;  // the same routing: one WGRAD layout a layer
  for (int64_t e = 0; e < c.n_experts; ++e) {
    if (e >= first_expert && e < first_expert + local_experts) {
      fc1->init_expert(e - first_expert);
      fc2->init_expert(e - first_expert);
      continue;
    }
    torch::NoGradGuard ng;  // another rank's expert: the same draws, into nothing kept
    for (auto shape : {std::vector<int64_t>{2 * c.expert_hidden, c.d_model}, std::vector<int64_t>{c.d_model, c.expert_hidden}}) {
      torch::Tensor scratch = torch::empty(shape);
      torch::nn::init::kaiming_uniform_(scratch, std::sqrt(5.0));
    }
  }
  id += 2 * c.n_experts;
  if (c.n_shared_experts > 0)
    shared = register_module("shared_expert", Mlp(c.d_model, c.expert_hidden * c.n_shared_experts, prefix + ".shared_expert", ctx, id, layer_index, n));
}

torch::Tensor MoeImpl::swiglu(const torch::Tensor& h) const {
  if (fused && h.is_cuda() && fused_swiglu_applies(h)) return fused_swiglu(h);
  auto gu = h.chunk(2, -1);
  return torch::silu(gu[0]) * gu[1];
}

torch::Tensor MoeImpl::experts_over_ranks(const torch::Tensor& rows, const Routing& r) {
  const int ranks = expert_group->size();
  const int64_t L = local_experts, E = n_experts;
  // Rows of each expert here (the kept ones: dropped rows sit behind them), and so to each rank.
  const torch::Tensor ends = r.host_ends();
  std::vector<int64_t> per_expert(static_cast<size_t>(E)), send(static_cast<size_t>(ranks), 0);
  for (int64_t e = 0; e < E; ++e) {
    per_expert[static_cast<size_t>(e)] = ends[e].item<int64_t>() - (e ? ends[e - 1].item<int64_t>() : 0);
    send[static_cast<size_t>(e / L)] += per_expert[static_cast<size_t>(e)];
  }
  const int64_t kept = ends[E - 1].item<int64_t>();
  // What every rank sends to each of this rank's experts: got[p * L + e].
  const std::vector<int64_t> Ls(static_cast<size_t>(ranks), L);
  const torch::Tensor got_t = expert_group->all_to_all(torch::tensor(per_expert, torch::kInt64).view({E, 1}).to(rows.device()), Ls, Ls).cpu();
  std::vector<int64_t> got(got_t.data_ptr<int64_t>(), got_t.data_ptr<int64_t>() + got_t.numel()), recv(static_cast<size_t>(ranks), 0),
      local(static_cast<size_t>(L), 0);
  for (int p = 0; p < ranks; ++p)
    for (int64_t e = 0; e < L; ++e) recv[static_cast<size_t>(p)] += got[static_cast<size_t>(p * L + e)], local[static_cast<size_t>(e)] += got[static_cast<size_t>(p * L + e)];
  const torch::Tensor x = exchange_rows(rows.narrow(0, 0, kept), send, recv, expert_group);
  // Arrived by source rank, then expert: regrouped by expert, then source rank (the rows one process
  // holding every rank's tokens in rank order gives an expert), and back after the experts.
  std::vector<int64_t> perm, start(static_cast<size_t>(ranks), 0);
  for (int p = 1; p < ranks; ++p) start[static_cast<size_t>(p)] = start[static_cast<size_t>(p - 1)] + recv[static_cast<size_t>(p - 1)];
  for (int64_t e = 0; e < L; ++e)
    for (int p = 0; p < ranks; ++p) {
      int64_t at = start[static_cast<size_t>(p)];
      for (int64_t f = 0; f < e; ++f) at += got[static_cast<size_t>(p * L + f)];
      for (int64_t i = 0; i < got[static_cast<size_t>(p * L + e)]; ++i) perm.push_back(at + i);
    }
  const torch::Tensor to_experts = torch::tensor(perm, torch::kInt64).to(rows.device());
  const torch::Tensor back = inverse_permutation(to_experts);
  const Routing here = grouped_routing(local, rows.device());
  torch::Tensor y = fc2(swiglu(fc1(permute_rows(x, to_experts, back), here)), here);
  y = exchange_rows(permute_rows(y, back, to_experts), recv, send, expert_group);
  if (kept < rows.size(0)) y = torch::cat({y, torch::zeros({rows.size(0) - kept, y.size(1)}, y.options())});
  return y;
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1), E = n_experts;
  torch::Tensor flat = x.reshape({-1, d});
  const int64_t T = flat.size(0);
  torch::Tensor probs = torch::softmax(torch::nn::functional::linear(flat.to(torch::kFloat32), router), -1);  // [T, E]
  const int64_t capacity = capacity_factor > 0 ? static_cast<int64_t>(std::ceil(capacity_factor * T * top_k / E)) : 0;
  const Routing r = route(choose_experts(probs, top_k), E, capacity);
  // Switch-style balance loss: E * sum_e (fraction of assignments to e) * (mean probability of e).
  torch::Tensor counts = r.assigned.to(torch::kFloat32);
  aux_loss = E * ((counts / static_cast<double>(T * top_k)) * probs.mean(0)).sum();
  // The fused combine on CUDA only: CPU runs keep LibTorch's composition (the CI reference curves).
  const bool fused_routing = fused_combine && flat.is_cuda();
  // Where fc1's quantized operands come from the segmented pair kernel, it reads the tokens through the
  // dispatch's row map itself: the dispatched copy of every token's row is never formed.
  torch::Tensor out;
  if (expert_group) {
    out = combine_tokens(experts_over_ranks(dispatch_tokens(flat, r, fused_routing), r), r, fused_routing);
  } else {
    torch::Tensor h = fc1->reads_gathered(flat) ? fc1->forward_gathered(flat, r, dispatch_rows(r), fused_routing)
                                                : fc1(dispatch_tokens(flat, r, fused_routing), r);
    out = combine_tokens(fc2(swiglu(h), r), r, fused_routing);
  }
  if (shared) out = out + shared(flat);
  return out.view(x.sizes());
}

}  // namespace ufp4
