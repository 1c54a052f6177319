#include "models/moe_routing.h"

#include <algorithm>

#include "common/error.h"
#include "kernels/moe/expert_sort.h"
#include "kernels/moe/inverse_permutation.h"
#include "models/fused_ops.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ufp4 {

namespace {

// Rows of x in a new order: row r of the result is x[perm[r]]; the backward is the inverse gather.
struct PermuteRows : public torch::autograd::Function<PermuteRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& perm,
                               const torch::Tensor& inverse) {
    ctx->saved_data["inverse"] = inverse;
    return x.index_select(0, perm);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    return {g[0].index_select(0, ctx->saved_data["inverse"].toTensor()), torch::Tensor(), torch::Tensor()};
  }
};

// Columns of each row in a new order (result[t][j] = x[t][perm[t][j]]); the backward is the inverse
// gather (LibTorch's gather backward would scatter-add).
struct PermuteCols : public torch::autograd::Function<PermuteCols> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& perm) {
    ctx->saved_data["inverse"] = inverse_permutation(perm);
    return x.gather(1, perm);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    return {g[0].gather(1, ctx->saved_data["inverse"].toTensor()), torch::Tensor()};
  }
};

// Each token's row repeated for its k assignments, in the expert-sorted layout. The backward brings the
// rows' gradients back to assignment order and sums each token's k of them, slot by slot.
struct DispatchTokens : public torch::autograd::Function<DispatchTokens> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& token,
                               const torch::Tensor& inverse, int64_t k, bool fused) {
    ctx->saved_data["inverse"] = inverse;
    ctx->saved_data["k"] = k;
    ctx->saved_data["fused"] = fused;
    return x.index_select(0, token);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list g) {
    return {dispatch_backward(g[0], ctx->saved_data["inverse"].toTensor(), ctx->saved_data["k"].toInt(), ctx->saved_data["fused"].toBool()),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Integer keys no larger than max_key in the narrowest type that holds them: LibTorch's radix sort on
// the GPU takes one pass per byte of its key type (8 for int64), and a stable sort by the same values
// gives the same order in any type.
torch::Tensor narrow_keys(const torch::Tensor& keys, int64_t max_key) {
  if (max_key <= 255) return keys.to(torch::kByte);
  if (max_key <= 32767) return keys.to(torch::kShort);
  if (max_key <= 2147483647) return keys.to(torch::kInt);
  return keys;
}

// Each token's expert ids in ascending order and the slots they came from (sort(-1) of idx [T, k],
// whose ids are distinct in a row). Two slots: one comparison, not a bitonic sort a row.
std::pair<torch::Tensor, torch::Tensor> slots_by_expert(const torch::Tensor& idx) {
  if (idx.size(1) != 2) {
    auto sorted = idx.sort(-1);
    return {std::get<0>(sorted), std::get<1>(sorted)};
  }
  const torch::Tensor a = idx.select(1, 0), b = idx.select(1, 1), swap = (a > b).to(torch::kInt64);
  return {torch::stack({torch::minimum(a, b), torch::maximum(a, b)}, 1), torch::stack({swap, 1 - swap}, 1)};
}

// The dropless layout of flat [A] (each assignment's expert) on CUDA: one counting sort
// (kernels/moe/expert_sort.h) in place of LibTorch's stable sort, searchsorted and conversions. The same
// integers: the stable order is unique. False where the kernels do not apply.
bool sort_by_expert_on_gpu(const torch::Tensor& flat, Routing& r) {
#ifdef UFP4_WITH_CUDA
  ExpertSortIO io;
  io.assignments = flat.numel(), io.experts = r.experts, io.k = r.top_k;
  if (!flat.is_cuda() || flat.scalar_type() != torch::kInt64 || !expert_sort_cuda_applies(io)) return false;
  const torch::Tensor keys = flat.contiguous();
  const auto i64 = keys.options();
  r.order = torch::empty({io.assignments}, i64);
  r.inverse = torch::empty({io.assignments}, i64);
  r.token_of_row = torch::empty({io.assignments}, i64);
  r.ends = torch::empty({io.experts}, i64.dtype(torch::kInt32));
  r.assigned = torch::empty({io.experts}, i64);
  const torch::Tensor workspace = torch::empty({static_cast<int64_t>(expert_sort_workspace_bytes(io))}, i64.dtype(torch::kByte));
  io.keys = keys.data_ptr<int64_t>(), io.order = r.order.data_ptr<int64_t>(), io.inverse = r.inverse.data_ptr<int64_t>();
  io.token_of_row = r.token_of_row.data_ptr<int64_t>(), io.ends = r.ends.data_ptr<int32_t>(), io.assigned = r.assigned.data_ptr<int64_t>();
  io.workspace = workspace.data_ptr();
  cuda_expert_sort(io, at::cuda::getCurrentCUDAStream(keys.device().index()).stream());
  r.idle = r.assigned == 0;
  return true;
#else
  (void)flat, (void)r;
  return false;
#endif
}

}  // namespace

torch::Tensor inverse_permutation(const torch::Tensor& perm) {
  if (perm.scalar_type() != torch::kInt64 || perm.dim() < 1) throw RuntimeError("inverse_permutation: int64 rows of permutations expected");
#ifdef UFP4_WITH_CUDA
  if (perm.is_cuda()) {
    const torch::Tensor p = perm.contiguous();
    torch::Tensor inv = torch::empty_like(p);
    InversePermutationIO io;
    io.width = p.size(-1);
    io.rows = io.width ? p.numel() / io.width : 0;
    io.perm = p.data_ptr<int64_t>();
    io.inv = inv.data_ptr<int64_t>();
    cuda_inverse_permutation(io, at::cuda::getCurrentCUDAStream(p.device().index()).stream());
    return inv;
  }
#endif
  // The CPU keeps LibTorch's sort: a permutation's inverse is unique, so any method gives these integers.
  return torch::argsort(narrow_keys(perm, std::max<int64_t>(perm.size(-1) - 1, 0)), /*dim=*/-1, /*descending=*/false);
}

torch::Tensor Routing::host_ends() const {
  if (!host_ends_.defined()) host_ends_ = ends.to(torch::kCPU).to(torch::kInt64);
  return host_ends_;
}

ExpertChoice in_expert_order(const torch::Tensor& idx, const torch::Tensor& weights) {
  const auto by_expert = slots_by_expert(idx);
  return ExpertChoice{by_expert.first, PermuteCols::apply(weights, by_expert.second)};
}

Routing route(const torch::Tensor& idx, const torch::Tensor& weights, int64_t experts, int64_t capacity) {
  return route(in_expert_order(idx, weights), experts, capacity);
}

Routing route(const ExpertChoice& choice, int64_t experts, int64_t capacity) {
  Routing r;
  r.tokens = choice.ids.size(0);
  r.top_k = choice.ids.size(1);
  r.experts = experts;
  const int64_t A = r.tokens * r.top_k;
  // Slots in ascending expert order: the experts' contributions to a token are summed in that order.
  r.weights = choice.weights;
  torch::Tensor flat = choice.ids.flatten();  // [A], assignment a = t * k + slot
  if (capacity == 0 && sort_by_expert_on_gpu(flat, r)) return r;
  // Stable: within an expert, assignments stay in token order (capacity keeps the first ones).
  auto sorted = narrow_keys(flat, experts - 1).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
  torch::Tensor expert_of_row = std::get<0>(sorted).to(flat.scalar_type()), order = std::get<1>(sorted);
  torch::Tensor ids = torch::arange(experts, flat.options());
  torch::Tensor starts = torch::searchsorted(expert_of_row, ids, /*out_int32=*/false, /*right=*/false);
  torch::Tensor ends = torch::searchsorted(expert_of_row, ids, /*out_int32=*/false, /*right=*/true);
  r.assigned = ends - starts;
  r.idle = r.assigned == 0;  // a capacity keeps min(assigned, capacity) >= 1 rows of an assigned expert
  if (capacity > 0) {
    // An assignment's place in its expert's queue; those past the capacity move behind every kept row.
    torch::Tensor place = torch::arange(A, flat.options()) - starts.index_select(0, expert_of_row);
    torch::Tensor keep = place < capacity;
    torch::Tensor key = torch::where(keep, expert_of_row, torch::full_like(expert_of_row, experts));
    torch::Tensor again = std::get<1>(narrow_keys(key, experts).sort(/*stable=*/true, /*dim=*/0, /*descending=*/false));
    order = order.index_select(0, again);
    r.kept = keep.index_select(0, again);
    ends = torch::cumsum(torch::clamp_max(ends - starts, capacity), 0);
  }
  r.order = order;
  r.inverse = inverse_permutation(order);
  r.ends = ends.to(torch::kInt32);
  return r;
}

torch::Tensor dispatch_rows(const Routing& r) { return r.token_of_row.defined() ? r.token_of_row : r.order.div(r.top_k, "floor"); }

torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& perm, const torch::Tensor& inverse) {
  return PermuteRows::apply(x, perm, inverse);
}

Routing grouped_routing(const std::vector<int64_t>& counts, const torch::Device& device) {
  Routing r;
  r.experts = static_cast<int64_t>(counts.size());
  r.top_k = 1;
  const torch::Tensor c = torch::tensor(counts, torch::kInt64);
  r.assigned = c.to(device);
  r.idle = r.assigned == 0;
  r.ends = torch::cumsum(c, 0).to(torch::kInt32).to(device);
  r.tokens = counts.empty() ? 0 : torch::cumsum(c, 0)[-1].item<int64_t>();
  r.order = r.inverse = torch::arange(r.tokens, torch::TensorOptions().dtype(torch::kInt64).device(device));
  r.weights = torch::ones({r.tokens, 1}, torch::TensorOptions().device(device));
  return r;
}

torch::Tensor dispatch_tokens(const torch::Tensor& x, const Routing& r, bool fused) {
  return DispatchTokens::apply(x, dispatch_rows(r), r.inverse, r.top_k, fused);
}

torch::Tensor dispatch_backward(const torch::Tensor& g, const torch::Tensor& inverse, int64_t k, bool fused) {
  if (fused && fused_moe_combine_applies(g, k)) return fused_moe_dispatch_backward(g, inverse, k);
  torch::Tensor ga = g.index_select(0, inverse);
  ga = ga.view({ga.size(0) / k, k, ga.size(1)});
  torch::Tensor dx = ga.select(1, 0);
  for (int64_t j = 1; j < k; ++j) dx = dx + ga.select(1, j);
  return dx.contiguous();
}

torch::Tensor combine_tokens(const torch::Tensor& y, const Routing& r, bool fused) {
  if (fused && fused_moe_combine_applies(y, r.top_k))
    return fused_moe_combine(y, r.weights.to(y.scalar_type()), r.inverse, r.order, r.kept);
  torch::Tensor rows = r.kept.defined() ? torch::where(r.kept.unsqueeze(1), y, torch::zeros({}, y.options())) : y;
  torch::Tensor per_slot = PermuteRows::apply(rows, r.inverse, r.order).view({r.tokens, r.top_k, y.size(1)});
  torch::Tensor w = r.weights.to(y.scalar_type());
  torch::Tensor out = per_slot.select(1, 0) * w.select(1, 0).unsqueeze(1);
  for (int64_t j = 1; j < r.top_k; ++j) out = out + per_slot.select(1, j) * w.select(1, j).unsqueeze(1);
  return out;
}

}  // namespace ufp4
