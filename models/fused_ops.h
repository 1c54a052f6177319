// Autograd ops over the fused kernels of kernels/fused_ops.h (CUDA, on the current stream) or their
// CPU reference: RMSNorm, mean cross entropy, SwiGLU and RoPE, each one pass over memory a direction where
// LibTorch's composition of the same maths makes many (about a fifth of a BF16 step of dense-113m).
#pragma once
#include <torch/torch.h>

#include <utility>

#include "kernels/quant_spec.h"

namespace ufp4 {

// RMSNorm over the last dimension, computed in FP32, returned in x's dtype (float32 or bfloat16).
torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

// Mean cross entropy of logits [N, V] (float32 or bfloat16) against int64 targets [N] over the rows
// whose target is not ignore_index; an FP32 scalar. The gradient goes out in the logits' dtype.
torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index = -100);

// SwiGLU of gu [..., 2h] (gate half first): silu(gate) * up in FP32, returned in gu's dtype [..., h].
torch::Tensor fused_swiglu(const torch::Tensor& gu);
// The same op's two directions without autograd, on gu2 [rows, 2h] contiguous: the output [rows, h], and
// the gradient of gu2 [rows, 2h] given the output's dout [rows, h] (taken in gu2's dtype).
torch::Tensor swiglu_forward_2d(const torch::Tensor& gu2);
torch::Tensor swiglu_backward_2d(const torch::Tensor& gu2, const torch::Tensor& dout);

// SwiGLU into a linear's two operands (models/quant_ops.h quantize_pair: rowwise with `row`, columnwise
// with `col`, BF16): of the output silu(gate) * up (dout undefined; a linear's X), or of gu2's gradient
// given dout (a linear's dY). On CUDA, where the pair kernel takes it (BF16, kernels/quantize_pair.h),
// one pass from gu2 (and dout): the SwiGLU's result never goes to memory. Elsewhere the op, then the
// pair; the same bits either way.
std::pair<torch::Tensor, torch::Tensor> swiglu_quantize_pair(const torch::Tensor& gu2, const torch::Tensor& dout, const QuantSpec& row,
                                                             const QuantSpec& col);
// Whether it is one pass: for these tensors, or for any BF16 CUDA ones of rows x 2 hidden.
bool swiglu_quantize_pair_fused(const torch::Tensor& gu2, const torch::Tensor& dout, const QuantSpec& row, const QuantSpec& col);
bool swiglu_quantize_pair_fused(int64_t rows, int64_t hidden, bool backward, const QuantSpec& row, const QuantSpec& col);

// Rotary position embedding (rotate half) of x [B, H, S, hd] (any strides, last dimension contiguous)
// with FP32 tables cos, sin [>= S, hd / 2]: the same bits as LibTorch's composition (chunk, mul, sub,
// add, cat), forward and backward, in one pass; returned contiguous in x's dtype.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
bool fused_rope_applies(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Whether the fused ops take these tensors on their device (the model falls back to LibTorch's
// composition otherwise): CUDA needs a last dimension that is a multiple of 8 (RMSNorm: at most 2048).
bool fused_rms_norm_applies(const torch::Tensor& x);
bool fused_cross_entropy_applies(const torch::Tensor& logits);
bool fused_swiglu_applies(const torch::Tensor& gu);  // CUDA: h a multiple of 8

// The MoE layer's combine (kernels/fused_ops.h): expert rows y [A, d] (bfloat16, expert-sorted) into
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
