#include "models/transformer.h"

#include <cmath>
#include <tuple>

#include "common/error.h"
#include "models/fused_ops.h"
#include "models/weight_operands.h"

namespace ufp4 {

TransformerImpl::TransformerImpl(const ModelConfig& c, std::shared_ptr<QuantContext> ctx_, std::shared_ptr<RowExchange> experts_over)
    : config(c), ctx(std::move(ctx_)) {
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
      moe.push_back(register_module(r + "moe", Moe(c, p + ".mlp", ctx, id, i, experts_over)));
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
  // Every linear's weight operands for this forward in one launch (models/weight_operands.h).
  const WeightOperandScope weights(*ctx, torch::GradMode::is_enabled() ? weight_uses() : std::vector<WeightUse>{});
  torch::Tensor h = embedding(tokens).to(compute_dtype_);
  // The residual stream: each block's output is added to h and the next norm reads the sum, so the
  // add and that norm run as one (RMSNormImpl::add_forward).
  const auto tap = [this](const torch::Tensor& t) {
    if (stream_taps) stream_taps->push_back(t);
  };
  // Tapped, the sum is a tensor of its own before the norm reads it: the fused add-and-norm hands the sum back
  // with the gradient of its other use only, not the stream's whole gradient. The same forward bits either way
  // (models/fused_ops.cpp).
  const auto add_norm = [this](RMSNorm& norm, const torch::Tensor& x, const torch::Tensor& branch) -> std::pair<torch::Tensor, torch::Tensor> {
    if (!stream_taps) return norm->add_forward(x, branch);
    torch::Tensor s = x + branch;
    return {s, norm(s)};
  };
  tap(h);
  torch::Tensor n = attention.empty() ? final_norm(h) : norm1[0](h);
  for (size_t i = 0; i < attention.size(); ++i) {
    std::tie(h, n) = add_norm(norm2[i], h, attention[i](n, cos_, sin_));
    RMSNorm& next = i + 1 < attention.size() ? norm1[i + 1] : final_norm;
    std::tie(h, n) = add_norm(next, h, mlp[i] ? mlp[i](n) : moe[i](n));
    tap(h);
  }
  h = n;
  tap(h);
  torch::Tensor logits = lm_head ? lm_head(h) : torch::nn::functional::linear(h, embedding->weight.to(h.scalar_type()));
  tap(logits);
  return logits;
}

std::vector<torch::Tensor> TransformerImpl::routed_expert_weights() const {
  std::vector<torch::Tensor> w;
  for (const auto& m : moe)
    if (m) w.insert(w.end(), {m->fc1->weight, m->fc2->weight});
  return w;
}

bool TransformerImpl::is_routed_expert_weight(const torch::Tensor& p) const {
  for (const auto& w : routed_expert_weights())
    if (w.unsafeGetTensorImpl() == p.unsafeGetTensorImpl()) return true;
  return false;
}

std::vector<WeightUse> TransformerImpl::weight_uses() const {
  std::vector<WeightUse> uses;
  auto dense = [&](const QuantLinear& l) {
    if (l) uses.push_back({l->weight, {l->layer.get()}});
  };
  for (size_t i = 0; i < attention.size(); ++i) {
    dense(attention[i]->qkv);
    dense(attention[i]->proj);
    if (mlp[i]) {
      dense(mlp[i]->fc1);
      dense(mlp[i]->fc2);
    }
    if (!moe[i]) continue;
    for (const GroupedLinear& g : {moe[i]->fc1, moe[i]->fc2}) {
      if (!g->weight_gemms_run_grouped()) continue;
      WeightUse u{g->weight, {}};
      for (const auto& L : g->layers) u.layers.push_back(L.get());
      uses.push_back(std::move(u));
    }
    if (moe[i]->shared) {
      dense(moe[i]->shared->fc1);
      dense(moe[i]->shared->fc2);
    }
  }
  dense(lm_head);
  return uses;
}

void TransformerImpl::set_fused_ops(const FusedOps& f) {
  fused_ops_ = f;
  for (auto& n : norm1) n->fused = f.rms_norm;
  for (auto& n : norm2) n->fused = f.rms_norm;
  final_norm->fused = f.rms_norm;
  for (auto& a : attention) a->fused = f.rope;
  for (auto& m : mlp)
    if (m) m->fused = f.swiglu;
  for (auto& m : moe) {
    if (!m) continue;
    m->fused = f.swiglu;
    m->fused_combine = f.moe_combine;
    if (m->shared) m->shared->fused = f.swiglu;
  }
}

TransformerOutput TransformerImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  torch::Tensor logits = forward(tokens);
  TransformerOutput o;
  torch::Tensor flat = logits.reshape({-1, logits.size(-1)});
  if (fused_ops_.cross_entropy && flat.is_cuda() && fused_cross_entropy_applies(flat)) o.lm_loss = fused_cross_entropy(flat, targets.reshape({-1}));
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
