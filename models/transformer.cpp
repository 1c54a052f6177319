#include "models/transformer.h"

#include <cmath>

#include "common/error.h"
#include "models/fused_ops.h"

namespace ufp4 {

namespace {

torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  // x [B, H, S, hd]; rotate-half RoPE with cos/sin [S, hd/2].
  auto halves = x.chunk(2, -1);
  const torch::Tensor &a = halves[0], &b = halves[1];
  torch::Tensor c = cos.to(x.scalar_type()), s = sin.to(x.scalar_type());
  return torch::cat({a * c - b * s, b * c + a * s}, -1);
}

torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
#else
  const int64_t S = q.size(-2);
  torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1)));
  torch::Tensor mask = torch::ones({S, S}, q.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores.to(torch::kFloat32), -1).to(q.scalar_type()), v);
#endif
}

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) { weight = register_parameter("weight", torch::ones({dim})); }

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (fused && x.is_cuda() && fused_rms_norm_applies(x)) return fused_rms_norm(x, weight, eps);
  torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps) * weight).to(x.scalar_type());
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
  auto parts = qkv(x).split({n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim}, -1);
  torch::Tensor q = parts[0].view({B, S, n_heads, head_dim}).transpose(1, 2);
  torch::Tensor k = parts[1].view({B, S, n_kv_heads, head_dim}).transpose(1, 2);
  torch::Tensor v = parts[2].view({B, S, n_kv_heads, head_dim}).transpose(1, 2);
  q = rotate(q, cos.slice(0, 0, S), sin.slice(0, 0, S));
  k = rotate(k, cos.slice(0, 0, S), sin.slice(0, 0, S));
  if (n_kv_heads != n_heads) {
    // Grouped-query attention: each KV head serves its group of query heads. Broadcast, then copy: the
    // backward is a plain sum over the group (deterministic and fast), where repeat_interleave's is an
    // index_add that deterministic mode sorts.
    const int64_t g = n_heads / n_kv_heads;
    k = k.unsqueeze(2).expand({B, n_kv_heads, g, S, head_dim}).reshape({B, n_heads, S, head_dim});
    v = v.unsqueeze(2).expand({B, n_kv_heads, g, S, head_dim}).reshape({B, n_heads, S, head_dim});
  }
  torch::Tensor o = causal_attention(q, k, v);  // attention BMMs stay unquantized
  return proj(o.transpose(1, 2).reshape({B, S, n_heads * head_dim}));
}

MoeImpl::MoeImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& id, int layer_index)
    : top_k(c.top_k), capacity_factor(c.capacity_factor) {
  router = register_parameter("router", torch::randn({c.n_experts, c.d_model}) * (1.0 / std::sqrt(static_cast<double>(c.d_model))));
  const int n = static_cast<int>(c.n_layers);
  for (int64_t e = 0; e < c.n_experts; ++e)
    experts.push_back(register_module("expert" + std::to_string(e),
                                      Mlp(c.d_model, c.expert_hidden, prefix + ".experts." + std::to_string(e), ctx, id, layer_index, n)));
  if (c.n_shared_experts > 0)
    shared = register_module("shared_expert", Mlp(c.d_model, c.expert_hidden * c.n_shared_experts, prefix + ".shared_expert", ctx, id, layer_index, n));
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x) {
  const int64_t d = x.size(-1), E = static_cast<int64_t>(experts.size());
  torch::Tensor flat = x.reshape({-1, d});
  const int64_t T = flat.size(0);
  torch::Tensor probs = torch::softmax(torch::nn::functional::linear(flat.to(torch::kFloat32), router), -1);  // [T, E]
  auto top = probs.topk(top_k, -1);
  torch::Tensor weights = std::get<0>(top) / std::get<0>(top).sum(-1, true);
  torch::Tensor idx = std::get<1>(top);  // [T, k]
  // Switch-style balance loss: E * sum_e (fraction of assignments to e) * (mean probability of e).
  torch::Tensor counts = torch::zeros({E}, probs.options()).scatter_add_(0, idx.flatten(), torch::ones({T * top_k}, probs.options()));
  aux_loss = E * ((counts / static_cast<double>(T * top_k)) * probs.mean(0)).sum();

  torch::Tensor out = torch::zeros_like(flat);
  torch::Tensor flat_idx = idx.flatten(), flat_w = weights.flatten();
  torch::Tensor token_of = torch::arange(T, idx.options()).repeat_interleave(top_k);
  const int64_t capacity = capacity_factor > 0 ? static_cast<int64_t>(std::ceil(capacity_factor * T * top_k / E)) : T;
  for (int64_t e = 0; e < E; ++e) {
    torch::Tensor sel = (flat_idx == e).nonzero().flatten();
    if (sel.numel() == 0) continue;
    if (sel.numel() > capacity) sel = sel.slice(0, 0, capacity);
    torch::Tensor tok = token_of.index_select(0, sel);
    torch::Tensor y = experts[e](flat.index_select(0, tok));
    out.index_add_(0, tok, y * flat_w.index_select(0, sel).unsqueeze(1).to(y.scalar_type()));
  }
  if (shared) out = out + shared(flat);
  return out.view(x.sizes());
}

TransformerImpl::TransformerImpl(const ModelConfig& c, std::shared_ptr<QuantContext> ctx_) : config(c), ctx(std::move(ctx_)) {
  c.validate();
  int64_t id = 0;
  embedding = register_module("embedding", torch::nn::Embedding(c.vocab, c.d_model));
  torch::nn::init::normal_(embedding->weight, 0.0, 0.02);
  const int n = static_cast<int>(c.n_layers);
  for (int i = 0; i < n; ++i) {
    const std::string p = "layers." + std::to_string(i);  // the name the recipe's layer policy sees
    const std::string r = "layer" + std::to_string(i) + "_";  // module names may not contain dots
    norm1.push_back(register_module(r + "norm1", RMSNorm(c.d_model)));
    norm2.push_back(register_module(r + "norm2", RMSNorm(c.d_model)));
    attention.push_back(register_module(r + "attention", Attention(c, p + ".attention", ctx, id, i)));
    if (c.moe_layer(i)) {
      moe.push_back(register_module(r + "moe", Moe(c, p + ".mlp", ctx, id, i)));
      mlp.push_back(nullptr);
    } else {
      mlp.push_back(register_module(r + "mlp", Mlp(c.d_model, c.ffn_hidden, p + ".mlp", ctx, id, i, n)));
      moe.push_back(nullptr);
    }
  }
  final_norm = register_module("final_norm", RMSNorm(c.d_model));
  if (!c.tied_embeddings) lm_head = register_module("lm_head", QuantLinear(c.d_model, c.vocab, false, "lm_head", ctx, id++));
  // RoPE tables.
  const int64_t half = c.head_dim() / 2;
  torch::Tensor inv = torch::pow(c.rope_theta, -torch::arange(0, half, torch::kFloat64) / static_cast<double>(half));
  torch::Tensor ang = torch::outer(torch::arange(0, c.seq_len, torch::kFloat64), inv);
  cos_ = register_buffer("rope_cos", ang.cos().to(torch::kFloat32));
  sin_ = register_buffer("rope_sin", ang.sin().to(torch::kFloat32));
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens) {
  if (tokens.size(1) > config.seq_len)
    throw Error("model " + config.name + ": sequence of " + std::to_string(tokens.size(1)) + " tokens exceeds seq_len " + std::to_string(config.seq_len));
  torch::Tensor h = embedding(tokens).to(compute_dtype_);
  for (size_t i = 0; i < attention.size(); ++i) {
    h = h + attention[i](norm1[i](h), cos_, sin_);
    h = h + (mlp[i] ? mlp[i](norm2[i](h)) : moe[i](norm2[i](h)));
  }
  h = final_norm(h);
  if (lm_head) return lm_head(h);
  return torch::nn::functional::linear(h, embedding->weight.to(h.scalar_type()));
}

void TransformerImpl::set_fused_ops(bool on) {
  fused_ops_ = on;
  for (auto& n : norm1) n->fused = on;
  for (auto& n : norm2) n->fused = on;
  final_norm->fused = on;
  for (auto& m : mlp)
    if (m) m->fused = on;
  for (auto& m : moe) {
    if (!m) continue;
    for (auto& e : m->experts) e->fused = on;
    if (m->shared) m->shared->fused = on;
  }
}

TransformerOutput TransformerImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  torch::Tensor logits = forward(tokens);
  TransformerOutput o;
  torch::Tensor flat = logits.reshape({-1, logits.size(-1)});
  if (fused_ops_ && flat.is_cuda() && fused_cross_entropy_applies(flat)) o.lm_loss = fused_cross_entropy(flat, targets.reshape({-1}));
  else o.lm_loss = torch::nn::functional::cross_entropy(flat.to(torch::kFloat32), targets.reshape({-1}));
  o.aux_loss = torch::zeros({}, o.lm_loss.options());
  int n = 0;
  for (auto& m : moe)
    if (m) { o.aux_loss = o.aux_loss + m->aux_loss; ++n; }
  if (n) o.aux_loss = o.aux_loss / n;
  o.loss = o.lm_loss + config.aux_loss_coeff * o.aux_loss;
  return o;
}

}  // namespace ufp4
