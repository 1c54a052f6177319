#include "models/model_config.h"

#include <atomic>

#include <map>
#include <sstream>

#include "common/error.h"

namespace ufp4 {

namespace {

ModelConfig dense(const std::string& name, int64_t d, int64_t layers, int64_t heads, int64_t kv, int64_t ffn, int64_t vocab,
                  const std::string& notes) {
  return ModelConfig{name, notes, vocab, d, layers, heads, kv, ffn};  // in the order of ModelConfig's fields
}

ModelConfig moe(const std::string& name, int64_t d, int64_t layers, int64_t heads, int64_t kv, int64_t experts, int64_t top_k,
                int64_t expert_hidden, int64_t shared, int64_t vocab, const std::string& notes) {
  ModelConfig c = dense(name, d, layers, heads, kv, 4 * d, vocab, notes);
  c.n_experts = experts;
  c.top_k = top_k;
  c.expert_hidden = expert_hidden;
  c.n_shared_experts = shared;
  c.dense_layers = 1;
  return c;
}

// Paper-scale vocabulary: not published; we assume 126,464 tokens, untied. Proxies use 32,768.
constexpr int64_t kPaperVocab = 126464;
constexpr int64_t kProxyVocab = 32768;
// The sound-experiment proxies (named by non-embedding parameters) use 8,192 tokens, so that their
// parameters sit in the transformer rather than the embedding, and so that the corpus we have gives
// each at least 20 tokens per non-embedding parameter within one epoch.
constexpr int64_t kNonEmbeddingProxyVocab = 8192;

const std::vector<ModelConfig>& registry() {
  static const std::vector<ModelConfig> r = [] {
    std::vector<ModelConfig> v;
    v.push_back(dense("dense-1.5b", 2048, 22, 16, 4, 5632, kPaperVocab,
                      "paper's Dense 1.5B; assumed Llama-style: d 2048, 22 layers, 16 heads (GQA 4 KV), SwiGLU 5632, "
                      "vocab 126464 untied, RoPE, RMSNorm, no biases"));
    v.push_back(moe("moe-7.9b", 2048, 18, 16, 4, 64, 6, 1024, 2, kPaperVocab,
                    "paper's MoE 7.9B; assumed fine-grained MoE: d 2048, 18 layers (first dense, SwiGLU 5632), 64 experts "
                    "of hidden 1024, top-6, 2 shared experts, GQA 4 KV, vocab 126464 untied"));
    v.back().ffn_hidden = 5632;
    v.push_back(moe("moe-124b", 5120, 40, 40, 8, 128, 8, 1536, 1, kPaperVocab,
                    "paper's MoE 124B; assumed: d 5120, 40 layers (first dense, SwiGLU 13824), 128 experts of hidden 1536, "
                    "top-8, 1 shared expert, GQA 8 KV, vocab 126464 untied"));
    v.back().ffn_hidden = 13824;
    // Dense proxy ladder (one H200), named by total parameters.
    v.push_back(dense("dense-20m", 256, 4, 4, 2, 704, kProxyVocab, "dense proxy"));
    v.push_back(dense("dense-35m", 384, 6, 6, 2, 1024, kProxyVocab, "dense proxy"));
    v.push_back(dense("dense-57m", 512, 8, 8, 4, 1408, kProxyVocab, "dense proxy"));
    v.push_back(dense("dense-113m", 768, 10, 12, 4, 2048, kProxyVocab, "dense proxy (~100M: the issue's training proxy)"));
    v.push_back(dense("dense-225m", 1024, 14, 16, 4, 2816, kProxyVocab, "dense proxy"));
    v.push_back(dense("dense-359m", 1280, 16, 20, 4, 3456, kProxyVocab, "dense proxy"));
    // Dense ladder named by non-embedding parameters (ParamCount::non_embedding, in millions).
    const int64_t v8 = kNonEmbeddingProxyVocab;
    v.push_back(dense("dense-ne0.8m", 128, 4, 2, 1, 384, v8, "dense proxy, 0.8M non-embedding parameters, vocab 8192"));
    v.push_back(dense("dense-ne1.6m", 192, 4, 3, 1, 512, v8, "dense proxy, 1.6M non-embedding parameters, vocab 8192"));
    v.push_back(dense("dense-ne2.4m", 192, 6, 3, 1, 512, v8, "dense proxy, 2.4M non-embedding parameters, vocab 8192"));
    v.push_back(dense("dense-ne3.7m", 256, 5, 4, 2, 704, v8, "dense proxy, 3.7M non-embedding parameters, vocab 8192"));
    v.push_back(dense("dense-ne6.6m", 320, 6, 5, 1, 896, v8, "dense proxy, 6.6M non-embedding parameters, vocab 8192"));
    // The MoE proxy of the sound design: fine-grained experts (hidden d/2) as the paper's MoE has
    // (hidden 1024 at d 2048), 16 routed top-2 plus one shared, first layer dense.
    v.push_back(moe("moe-ne2.6m", 128, 6, 2, 1, 16, 2, 64, 1, v8, "MoE proxy, 2.6M non-embedding parameters (0.9M active), vocab 8192"));
    // The MoE ladder of Figure 9 around it: the same expert layout (16 of hidden d/2, top-2, one shared,
    // first layer dense) and depth (6 layers), the width grown (heads of 32-80 dims, one KV head).
    v.push_back(moe("moe-ne0.65m", 64, 6, 2, 1, 16, 2, 32, 1, v8, "MoE ladder, 0.65M non-embedding parameters, vocab 8192"));
    v.push_back(moe("moe-ne1.5m", 96, 6, 2, 1, 16, 2, 48, 1, v8, "MoE ladder, 1.5M non-embedding parameters, vocab 8192"));
    v.push_back(moe("moe-ne4.0m", 160, 6, 2, 1, 16, 2, 80, 1, v8, "MoE ladder, 4.0M non-embedding parameters, vocab 8192"));
    v.push_back(moe("moe-ne5.8m", 192, 6, 3, 1, 16, 2, 96, 1, v8, "MoE ladder, 5.8M non-embedding parameters, vocab 8192"));
    // MoE proxy ladder: first layer dense, one shared expert.
    v.push_back(moe("moe-23m", 256, 4, 4, 2, 16, 2, 128, 1, kProxyVocab, "MoE proxy"));
    v.push_back(moe("moe-39m", 320, 6, 5, 1, 16, 2, 192, 1, kProxyVocab, "MoE proxy"));
    v.push_back(moe("moe-81m", 384, 8, 6, 2, 32, 4, 192, 1, kProxyVocab, "MoE proxy"));
    v.push_back(moe("moe-160m", 512, 10, 8, 2, 32, 4, 256, 1, kProxyVocab, "MoE proxy"));
    v.push_back(moe("moe-282m", 640, 12, 10, 2, 32, 6, 320, 1, kProxyVocab, "MoE proxy"));
    // CPU test models (byte-level vocabulary).
    ModelConfig t = dense("tiny", 64, 2, 4, 2, 128, 256, "CPU tests");
    t.seq_len = 64;
    v.push_back(t);
    ModelConfig tm = moe("tiny-moe", 64, 3, 4, 2, 8, 2, 32, 1, 256, "CPU tests");
    tm.seq_len = 64;
    v.push_back(tm);
    // The mechanism's proxies (harness/campaign/capture_analysis.h): 12 layers, deep enough for the
    // analysis's trend over layers, at the campaigns' vocabulary and corpus.
    v.push_back(dense("dense-ne8.5m", 256, 12, 4, 1, 704, v8, "mechanism proxy, 12 layers, 8.5M non-embedding parameters, vocab 8192"));
    v.push_back(moe("moe-ne12m", 192, 12, 3, 1, 16, 2, 96, 1, v8, "mechanism proxy, 12 layers (first dense), 12M non-embedding parameters, vocab 8192"));
    return v;
  }();
  return r;
}

}  // namespace

std::string ModelConfig::canonical() const {
  std::ostringstream os;
  os.precision(17);
  os << "vocab = " << vocab << "\nd_model = " << d_model << "\nn_layers = " << n_layers << "\nn_heads = " << n_heads
     << "\nn_kv_heads = " << n_kv_heads << "\nffn_hidden = " << ffn_hidden << "\nseq_len = " << seq_len
     << "\ntied_embeddings = " << (tied_embeddings ? "true" : "false") << "\nrope_theta = " << rope_theta << "\nn_experts = " << n_experts
     << "\ntop_k = " << top_k << "\nexpert_hidden = " << expert_hidden << "\nn_shared_experts = " << n_shared_experts
     << "\ndense_layers = " << dense_layers << "\ncapacity_factor = " << capacity_factor << "\naux_loss_coeff = " << aux_loss_coeff << "\n";
  return os.str();
}

void ModelConfig::validate() const {
  auto need = [&](bool ok, const std::string& key, const std::string& msg) {
    if (!ok) throw Error("model " + name + ": " + key + ": " + msg);
  };
  need(d_model > 0 && n_layers > 0 && vocab > 0 && seq_len > 0, "d_model/n_layers/vocab/seq_len", "must be positive");
  need(n_heads > 0 && d_model % n_heads == 0, "n_heads", "must divide d_model (" + std::to_string(d_model) + ")");
  need(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "n_kv_heads", "must divide n_heads (" + std::to_string(n_heads) + ")");
  need(head_dim() % 2 == 0, "n_heads", "head_dim must be even for RoPE");
  need(ffn_hidden > 0, "ffn_hidden", "must be positive");
  if (is_moe()) {
    need(top_k >= 1 && top_k <= n_experts, "top_k", "must be in [1, n_experts]");
    need(expert_hidden > 0, "expert_hidden", "must be positive");
    need(dense_layers >= 0 && dense_layers < n_layers, "dense_layers", "must be in [0, n_layers)");
    need(capacity_factor == 0 || capacity_factor >= 1, "capacity_factor", "0 (dropless) or >= 1");
  }
}

ParamCount count_params(const ModelConfig& c) {
  ParamCount p;
  const int64_t d = c.d_model, hd = c.head_dim();
  const int64_t attn = d * (c.n_heads * hd + 2 * c.n_kv_heads * hd) + c.n_heads * hd * d;
  const int64_t norms = 2 * d;
  const int64_t dense_mlp = 3 * d * c.ffn_hidden;
  const int64_t expert = 3 * d * c.expert_hidden;
  p.embedding = c.vocab * d;
  p.head = c.tied_embeddings ? 0 : c.vocab * d;
  p.total = p.embedding + p.head + d;  // final norm
  p.active = p.total;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    p.total += attn + norms;
    p.active += attn + norms;
    p.quantized_total += attn;
    if (c.moe_layer(l)) {
      const int64_t router = d * c.n_experts;
      p.total += router + c.n_experts * expert + c.n_shared_experts * expert;
      p.active += router + c.top_k * expert + c.n_shared_experts * expert;
      p.quantized_total += (c.n_experts + c.n_shared_experts) * expert;
    } else {
      p.total += dense_mlp;
      p.active += dense_mlp;
      p.quantized_total += dense_mlp;
    }
  }
  return p;
}

double train_flops_per_token(const ModelConfig& c, bool with_attention) {
  ParamCount p = count_params(c);
  double n = static_cast<double>(p.active - p.embedding) + (c.tied_embeddings ? static_cast<double>(p.embedding) : 0.0);
  double f = 6.0 * n;
  if (with_attention) f += 12.0 * c.n_layers * c.seq_len * c.n_heads * c.head_dim();
  return f;
}

double moe_layer_flops_per_token(const ModelConfig& c) {
  if (!c.is_moe()) return 0;
  const double d = static_cast<double>(c.d_model), h = static_cast<double>(c.expert_hidden);
  return 6.0 * (d * static_cast<double>(c.n_experts) + static_cast<double>(c.top_k + c.n_shared_experts) * 3.0 * d * h);
}

MemoryEstimate estimate_memory(const ModelConfig& c, int64_t micro_batch) {
  ParamCount p = count_params(c);
  const double gb = 1e9;
  MemoryEstimate m;
  m.weights_gb = p.total * (4.0 + 2.0) / gb;  // FP32 master + BF16 compute copy
  m.grads_gb = p.total * 4.0 / gb;
  m.optimizer_gb = p.total * 8.0 / gb;
  const double tokens = static_cast<double>(micro_batch) * c.seq_len;
  double per_token = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    per_token += 34.0 * c.d_model;
    if (c.moe_layer(l)) per_token += (c.top_k + c.n_shared_experts) * (2.0 * c.d_model + 6.0 * c.expert_hidden);
  }
  per_token += 6.0 * c.vocab;  // BF16 logits and FP32 log-softmax
  m.activations_gb = tokens * per_token / gb;
  return m;
}

namespace {

std::atomic<int64_t> g_resolutions{0};

[[noreturn]] void unknown_model(const std::string& name) {
  std::string allowed;
  for (const auto& n : model_names()) allowed += (allowed.empty() ? "" : ", ") + n;
  throw Error("model: unknown name '" + name + "' (allowed: " + allowed + ")");
}

}  // namespace

const ModelConfig& model_config(const std::string& name) {
  ++g_resolutions;
  for (const auto& c : registry())
    if (c.name == name) return c;
  unknown_model(name);
}

void check_model_name(const std::string& name) {
  for (const auto& c : registry())
    if (c.name == name) return;
  unknown_model(name);
}

int64_t model_resolutions() { return g_resolutions; }

std::vector<std::string> model_names() {
  std::vector<std::string> n;
  for (const auto& c : registry()) n.push_back(c.name);
  return n;
}

}  // namespace ufp4
