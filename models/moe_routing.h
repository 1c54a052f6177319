// Token routing of a MoE layer without host synchronisation: every (token, slot) assignment is placed
// in one expert-sorted layout by a stable sort, with the experts' segment ends kept on the device; the
// tokens are gathered into that layout once and the experts' outputs combined back in a fixed order.
// No floating-point atomics anywhere, forward or backward, so the layer is deterministic on the GPU.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace ufp4 {

struct Routing {
  int64_t tokens = 0, top_k = 0, experts = 0;
  // Each token's slots in ascending expert order (so the combine sums experts in ascending order).
  torch::Tensor weights;  // [T, k] combine weights, in the input's floating dtype
  // The expert-sorted layout has A = T * k rows: expert 0's assignments in token order, then expert
  // 1's, ...; with a capacity, the dropped assignments come last (rows >= ends[E - 1]).
  torch::Tensor order;    // [A] int64: the assignment (t * k + slot) each row holds
  torch::Tensor inverse;  // [A] int64: the row of assignment a
  torch::Tensor ends;     // [E] int32: cumulative end row of each expert's segment
  torch::Tensor assigned; // [E] int64: assignments routed to each expert, before any drop
  torch::Tensor kept;     // [A] bool per row, true where the row holds a kept assignment; undefined when dropless
  torch::Tensor idle;     // [E] bool: experts given no row (assigned == 0), whose weight gradient is 0
  torch::Tensor token_of_row;  // [A] int64: order / k where route() formed it (dispatch_rows), else undefined
  // The segment ends on the host (one device synchronisation, then cached): for paths that loop over experts.
  torch::Tensor host_ends() const;

 private:
  mutable torch::Tensor host_ends_;
};

// The inverse of each row's permutation of perm [..., w] int64 (argsort of a permutation): on CUDA one
// kernel (kernels/moe/inverse_permutation.h), on the CPU LibTorch's argsort.
torch::Tensor inverse_permutation(const torch::Tensor& perm);

// Each token's k experts in ascending id order, ids [T, k] int64 (distinct per token), and their
// weights [T, k] in that order: what the router chose (choose_experts, models/router_top_k.h).
struct ExpertChoice {
  torch::Tensor ids, weights;
};

// idx [T, k] and weights [T, k] in any slot order moved into ascending expert order (a sort of each row's
// ids, a gather of the weights whose backward gathers back).
ExpertChoice in_expert_order(const torch::Tensor& idx, const torch::Tensor& weights);

// The layout of a choice; capacity 0 = dropless, else each expert keeps its first `capacity` assignments
// in token order. The ids must be ascending in each row (choose_experts' or in_expert_order's): not checked
// (that would read them on the host), and other orders would sum each token's experts in another order.
Routing route(const ExpertChoice& choice, int64_t experts, int64_t capacity);
// route(in_expert_order(idx, weights), experts, capacity): idx [T, k] int64 expert ids (distinct per
// token), weights [T, k].
Routing route(const torch::Tensor& idx, const torch::Tensor& weights, int64_t experts, int64_t capacity);

// [T, d] -> [A, d]: row r is token order[r] / k. Its backward sums each token's k rows (a gather and a
// fixed-order sum, no atomics). fused: that backward in one pass (models/fused_ops.h; the CPU reference
// on CPU), with the same bits.
torch::Tensor dispatch_tokens(const torch::Tensor& x, const Routing& r, bool fused = false);
// The token of each row of that layout, [A] int64 (order / k): what dispatch_tokens gathers.
torch::Tensor dispatch_rows(const Routing& r);
// dispatch_tokens' backward: [A, d] row gradients -> [T, d], each token the sum of its k rows (rows of
// the layout ordered by inverse). For a layer that reads the dispatched rows in place (GroupedLinearImpl::
// forward_gathered) and returns their gradient.
torch::Tensor dispatch_backward(const torch::Tensor& g, const torch::Tensor& inverse, int64_t k, bool fused);

// Rows in a new order, row i of the result x[perm[i]]; the backward gathers back through `inverse`
// (argsort of perm), no scatter.
torch::Tensor permute_rows(const torch::Tensor& x, const torch::Tensor& perm, const torch::Tensor& inverse);

// The routing of rows already grouped by expert, counts[e] rows of expert e one after another (an
// expert-parallel rank's received rows): one slot a row, every row kept.
Routing grouped_routing(const std::vector<int64_t>& counts, const torch::Device& device);

// [A, d] expert outputs (dropped rows ignored) -> [T, d]: sum over each token's slots, in ascending
// expert order, of weight * output. The backward gathers, no atomics. fused: one pass a direction
// (models/fused_ops.h; the CPU reference on CPU): the composition's bits but for the weights' gradient,
// summed in the kernels' order.
torch::Tensor combine_tokens(const torch::Tensor& y, const Routing& r, bool fused = false);

}  // namespace ufp4
