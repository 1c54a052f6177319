// The MoE router's choice of experts: the k largest probabilities of each token and their expert ids,
// with the bits of LibTorch's topk and its autograd, in fewer kernels on the GPU.
#pragma once
#include <torch/torch.h>

#include <utility>

#include "models/moe_routing.h"

namespace ufp4 {

// The k largest of probs [T, E] a row and their expert ids [T, k], larger first. On the GPU, for FP32 and
// k <= 2, one kernel (kernels/moe/router_top_k.h) selects them: topk's selection, in topk's order but among
// equal values. Only there is that order provably without effect: the weights' normalising sum and its
// gradient add at most two terms, and a + b == b + a; for k > 2 an exchange of equal values would reorder
// the gradient's sum, so LibTorch's topk selects. The gradient is formed without topk's scatter, which
// sorts its indices in deterministic mode.
std::pair<torch::Tensor, torch::Tensor> top_k_experts(const torch::Tensor& probs, int64_t k);

// The MoE router's choice from probs [T, E], as route() takes it: each token's k experts in ascending
// expert order and their weights, the k largest probabilities normalised by their sum, in that order.
// The bits of top_k_experts, its normalisation in topk's order and in_expert_order (models/moe_routing.h),
// and of their gradient. On the GPU for FP32 and k <= 2 the kernel leaves the k in expert order itself
// (no slot sort, no gather forward and back): the sum then adds the same two terms the other way round,
// and a + b == b + a.
ExpertChoice choose_experts(const torch::Tensor& probs, int64_t k);

}  // namespace ufp4
