#include "models/layers.h"

#include <cmath>
#include <limits>

#include "models/deterministic_attention.h"
#include "models/fused_ops.h"

namespace ufp4 {

torch::Tensor rope_composition(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto halves = x.chunk(2, -1);
  const torch::Tensor &a = halves[0], &b = halves[1];
  torch::Tensor c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
  return torch::cat({a * c - b * s, b * c + a * s}, -1);
}

torch::Tensor grouped_causal_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v) {
  const int64_t B = q.size(0), H = q.size(1), KV = k.size(1), S = k.size(2), hd = k.size(3);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
  // In deterministic mode cuDNN's forward with flash's deterministic backward (models/deterministic_attention.h).
  // (Undefined where it does not apply: it checks the inputs itself.)
  if (q.is_cuda() && at::globalContext().deterministicAlgorithms()) {
    torch::Tensor o = deterministic_causal_attention(q, k, v);
    if (o.defined()) return o;
  }
  // On a GPU in half precision SDPA's kernels read each KV head for its group themselves: no copies of
  // K and V, and no sum of their gradients after. Flash's gradients in deterministic mode are the
  // copied form's bit for bit (results/bench/logs/attention-gqa.log, dev/attention_gqa.py).
  if (KV != H && q.is_cuda() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf))
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, {}, /*enable_gqa=*/true);
#endif
  if (KV != H) {
    // Grouped-query attention: each KV head serves its group of query heads. Broadcast, then copy: the
    // backward is a plain sum over the group (deterministic and fast), where repeat_interleave's is an
    // index_add that deterministic mode sorts.
    k = k.unsqueeze(2).expand({B, KV, H / KV, S, hd}).reshape({B, H, S, hd});
    v = v.unsqueeze(2).expand({B, KV, H / KV, S, hd}).reshape({B, H, S, hd});
  }
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor mask = torch::ones({S, S}, q.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores.to(torch::kFloat32), -1).to(q.scalar_type()), v);
#endif
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) { weight = register_parameter("weight", torch::ones({dim})); }

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (fused && x.is_cuda() && fused_rms_norm_applies(x)) return fused_rms_norm(x, weight, eps);
  torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps) * weight).to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> RMSNormImpl::add_forward(const torch::Tensor& x, const torch::Tensor& residual) {
  if (fused && x.is_cuda() && residual.scalar_type() == x.scalar_type() && fused_rms_norm_applies(x)) return fused_add_rms_norm(x, residual, weight, eps);
  torch::Tensor s = x + residual;
  return {s, forward(s)};
}

MlpImpl::MlpImpl(int64_t d, int64_t hidden, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& id, int layer_index,
                 int n_layers) {
  fc1 = register_module("linear_fc1", QuantLinear(d, 2 * hidden, false, prefix + ".linear_fc1", ctx, id++, layer_index, n_layers));
  fc2 = register_module("linear_fc2", QuantLinear(hidden, d, false, prefix + ".linear_fc2", ctx, id++, layer_index, n_layers));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor h = fc1(x);
  if (fused && h.is_cuda() && fused_swiglu_applies(h)) return fc2(fused_swiglu(h));
  auto gu = h.chunk(2, -1);
  return fc2(torch::silu(gu[0]) * gu[1]);
}

AttentionImpl::AttentionImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& id,
                             int layer_index)
    : n_heads(c.n_heads), n_kv_heads(c.n_kv_heads), head_dim(c.head_dim()) {
  const int n = static_cast<int>(c.n_layers);
  qkv = register_module("linear_qkv", QuantLinear(c.d_model, (c.n_heads + 2 * c.n_kv_heads) * head_dim, false,
                                                  prefix + ".linear_qkv", ctx, id++, layer_index, n));
  proj = register_module("linear_proj", QuantLinear(c.n_heads * head_dim, c.d_model, false, prefix + ".linear_proj", ctx, id++, layer_index, n));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t B = x.size(0), S = x.size(1);
  torch::Tensor y = qkv(x), q, k, v;
  if (fused && x.is_cuda() && fused_qkv_rope_applies(y, cos, sin, n_heads, n_kv_heads)) {
    // In deterministic mode the RoPE and the attention as one op where our backward runs (see there).
    if (at::globalContext().deterministicAlgorithms()) {
      torch::Tensor o = deterministic_qkv_rope_attention(y, cos, sin, n_heads, n_kv_heads);
      if (o.defined()) return proj(o.transpose(1, 2).reshape({B, S, n_heads * head_dim}));
    }
    // One pass each way for q, k and v: a token's tables read once for all its heads, and the backward
    // writes the projection's gradient itself (no per-part rotations and concatenation after).
    auto qkv_r = fused_qkv_rope(y, cos, sin, n_heads, n_kv_heads);
    q = qkv_r[0];
    k = qkv_r[1];
    v = qkv_r[2];
  } else {
    auto parts = y.split({n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim}, -1);
    q = rope_composition(parts[0].view({B, S, n_heads, head_dim}).transpose(1, 2), cos.slice(0, 0, S), sin.slice(0, 0, S));
    k = rope_composition(parts[1].view({B, S, n_kv_heads, head_dim}).transpose(1, 2), cos.slice(0, 0, S), sin.slice(0, 0, S));
    v = parts[2].view({B, S, n_kv_heads, head_dim}).transpose(1, 2);
  }
  torch::Tensor o = grouped_causal_attention(q, k, v);  // attention BMMs stay unquantized
  return proj(o.transpose(1, 2).reshape({B, S, n_heads * head_dim}));
}

}  // namespace ufp4
