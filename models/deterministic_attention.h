// Causal attention for deterministic GPU training: cuDNN's fused forward with a deterministic
// backward. LibTorch's deterministic mode takes flash for both directions (it refuses cuDNN's fused
// attention, whose backward adds dQ with atomics); cuDNN's forward is deterministic and faster (0.32
// against 0.44 ms at dense-113m's shape), and its output and log-sum-exp are what a backward reads
// (dev/attention_chunked.py, results/bench/logs/attention-chunked.log). The backward is ours
// (kernels/attention/attention_backward.h: dQ summed in a fixed order) where it applies (BF16, head dimension 64,
// S a multiple of 64), else flash's deterministic one. On Hopper ours runs warpgroup MMAs and is the
// faster (results/bench/step.h5: the rows with flash's backward beside ours, in one command).
#pragma once
#include <torch/torch.h>

namespace ufp4 {

// Whether deterministic_causal_attention takes these: LibTorch 2.5+, CUDA, bfloat16 or half, a head
// dimension that is a multiple of 8 up to 128, KV dividing the heads, and cuDNN's attention not found
// unusable by an earlier call.
bool deterministic_causal_attention_applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// Causal attention of q [B, H, S, hd] over k, v [B, KV, S, hd] (grouped KV heads read in place), the
// last dimension contiguous. Forward by cuDNN, backward by ours or by flash with LibTorch's
// deterministic switch as the caller set it (bit-identical reruns when it is on). Undefined where it does not apply or
// cuDNN's forward refuses the call (said once on stderr; no later call tries it): the caller then
// runs scaled_dot_product_attention.
torch::Tensor deterministic_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

// The same attention fed by the RoPE of a packed projection qkv [B, S, (heads + 2 kv_heads) 64]
// (fused_qkv_rope's q, k, v), as one op whose backward writes qkv's gradient: our backward rotates dQ
// and dK back as it writes them and puts dV in place (same bits as fused_qkv_rope followed by
// deterministic_causal_attention, a pass over the three gradients less). Undefined unless our backward is
// switched on and both would apply (BF16, head dimension 64); the caller then runs the two.
torch::Tensor deterministic_qkv_rope_attention(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                                               int64_t kv_heads);

// Whether the backward is ours where ours applies (the default) or always flash's: for the benchmark
// and the tests, which compare the two.
void use_own_attention_backward(bool on);
bool own_attention_backward_enabled();

}  // namespace ufp4
