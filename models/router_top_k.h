// The MoE router's choice of experts: the k largest probabilities of each token and their expert ids,
// with the bits of LibTorch's topk and its autograd, in fewer kernels on the GPU.
#pragma once
#include <torch/torch.h>

#include <utility>

namespace ufp4 {

// The k largest of probs [T, E] a row and their expert ids [T, k], larger first. On the GPU, for FP32 and
// k <= 2, one kernel (kernels/moe/router_top_k.h) selects them: topk's selection, in topk's order but among
// equal values. Only there is that order provably without effect: the weights' normalising sum and its
// gradient add at most two terms, and a + b == b + a; for k > 2 an exchange of equal values would reorder
// the gradient's sum, so LibTorch's topk selects. The gradient is formed without topk's scatter, which
// sorts its indices in deterministic mode.
std::pair<torch::Tensor, torch::Tensor> top_k_experts(const torch::Tensor& probs, int64_t k);

}  // namespace ufp4
