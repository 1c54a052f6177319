// Autograd ops over the fused kernels of kernels/fused/fused_kernels.h (CUDA, on the current stream) or their
// CPU reference: RMSNorm (alone or with the residual add before it), mean cross entropy, SwiGLU and RoPE
// (of one head group, or of a packed QKV projection), each one pass over memory a direction where
// LibTorch's composition of the same maths makes many (about a fifth of a BF16 step of dense-113m).
#pragma once
#include <torch/torch.h>

namespace ufp4 {

// RMSNorm over the last dimension, computed in FP32, returned in x's dtype (float32 or bfloat16).
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// The residual add and the RMSNorm after it in one pass: {s, y} with s = x + residual (rounded as
// LibTorch's add rounds it) and y = fused_rms_norm(s, weight, eps), the same bits, forward and backward.
std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                                           double eps);

// Mean cross entropy of logits [N, V] (float32 or bfloat16) against int64 targets [N] over the rows
// whose target is not ignore_index; an FP32 scalar. The gradient goes out in the logits' dtype.
torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index = -100);

// SwiGLU of gu [..., 2h] (gate half first): silu(gate) * up in FP32, returned in gu's dtype [..., h].
torch::Tensor fused_swiglu(const torch::Tensor& gu);

// Rotary position embedding (rotate half) of x [B, H, S, hd] (any strides, last dimension contiguous)
// with FP32 tables cos, sin [>= S, hd / 2]: the same bits as LibTorch's composition (chunk, mul, sub,
// add, cat), forward and backward, in one pass; returned contiguous in x's dtype.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
bool fused_rope_applies(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// RoPE of a packed projection qkv [B, S, (heads + 2 kv_heads) hd] in one pass: {q, k, v} as attention
// takes them ([B, heads or kv_heads, S, hd] on [B, S, heads, hd] memory), q and k rotated with the bits
// of fused_rope, v copied; the backward writes the projection's gradient from the three in one pass.
std::vector<torch::Tensor> fused_qkv_rope(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                                          int64_t kv_heads);
bool fused_qkv_rope_applies(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads, int64_t kv_heads);
// Pieces of fused_qkv_rope for an op that fuses its backward with the attention's
// (models/deterministic_attention.h): the [B, heads or kv_heads, S, hd] views of q, k and v in a packed
// [B, S, (heads + 2 kv_heads) hd] tensor, and the backward's pass from the three gradients (undefined
// ones as zeros) to a new projection gradient of `sizes`.
std::vector<torch::Tensor> qkv_head_views(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads);
torch::Tensor fused_qkv_rope_backward(const std::vector<torch::Tensor>& grads, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                                      int64_t kv_heads, const std::vector<int64_t>& sizes);

// Whether the fused ops take these tensors on their device (the model falls back to LibTorch's
// composition otherwise): CUDA needs a last dimension that is a multiple of 8 (RMSNorm: at most 2048).
bool fused_rms_norm_applies(const torch::Tensor& x);
bool fused_cross_entropy_applies(const torch::Tensor& logits);
bool fused_swiglu_applies(const torch::Tensor& gu);  // CUDA: h a multiple of 8

// The MoE layer's combine (kernels/fused/fused_kernels.h): expert rows y [A, d] (bfloat16, expert-sorted) into
// tokens [T, d] with weights w [T, k] (bfloat16): each token's weighted sum over its slots in order,
// with the bits of LibTorch's composition (gather, k products, k - 1 sums), forward and rows' gradient;
// the weights' gradient summed in the kernels' order. inverse, order: int64 [A] (Routing); kept: bool
// [A] or undefined (dropless). One pass a direction.
torch::Tensor fused_moe_combine(const torch::Tensor& y, const torch::Tensor& w, const torch::Tensor& inverse, const torch::Tensor& order,
                                const torch::Tensor& kept);
// The dispatch's backward (not an autograd op): each token's k row gradients of g [A, d] (bfloat16)
// summed in slot order (inverse: Routing::inverse) in one pass, with the composition's bits: [T, d].
torch::Tensor fused_moe_dispatch_backward(const torch::Tensor& g, const torch::Tensor& inverse, int64_t top_k);
// Whether both take rows of this shape and dtype on their device (bfloat16, k <= 8; CUDA: d a multiple of 8).
bool fused_moe_combine_applies(const torch::Tensor& rows, int64_t top_k);

}  // namespace ufp4
