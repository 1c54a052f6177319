// Model configurations by name: the paper's dense-1.5b, moe-7.9b and moe-124b (architectures not
// published: ours, Llama/Megatron-style, sized to the stated totals), one-GPU proxy ladders, and
// `tiny` for CPU tests. Parameter, FLOP and memory accounting for `ufp4 plan`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ufp4 {

struct ModelConfig {
  std::string name, notes;
  int64_t vocab = 32768, d_model = 256, n_layers = 2, n_heads = 4, n_kv_heads = 4;
  int64_t ffn_hidden = 1024;  // SwiGLU hidden size of dense MLPs
  int64_t seq_len = 2048;
  bool tied_embeddings = false;
  double rope_theta = 10000.0;
  // MoE (n_experts == 0: dense). The first `dense_layers` layers keep a dense MLP.
  int64_t n_experts = 0, top_k = 0, expert_hidden = 0, n_shared_experts = 0, dense_layers = 0;
  double capacity_factor = 0.0;  // 0: dropless (every routed token is computed)
  double aux_loss_coeff = 0.01;  // load-balancing loss weight

  bool is_moe() const { return n_experts > 0; }
  int64_t head_dim() const { return d_model / n_heads; }
  bool moe_layer(int64_t layer) const { return is_moe() && layer >= dense_layers; }
  void validate() const;  // throws ufp4::Error naming the field
  std::string canonical() const;  // every field that shapes the model (not the name or notes), as TOML
};

struct ParamCount {
  int64_t total = 0, active = 0;     // all parameters; those used per token (top-k experts)
  int64_t embedding = 0, head = 0;   // input embedding; output head (0 when tied)
  int64_t quantized_total = 0;       // in linears a 4-bit recipe quantizes (not embedding/head/router)
  // What scaling laws and proxy names count: everything but the embedding and the output head.
  int64_t non_embedding() const { return total - embedding - head; }
};

struct MemoryEstimate {
  double weights_gb = 0, grads_gb = 0, optimizer_gb = 0, activations_gb = 0;
  double total_gb() const { return weights_gb + grads_gb + optimizer_gb + activations_gb; }
};

ParamCount count_params(const ModelConfig& c);
// Training FLOPs per token: 6 x active parameters (embedding lookup excluded, head included), plus
// attention 12 x layers x seq x heads x head_dim when with_attention (PaLM's accounting, no causal discount).
double train_flops_per_token(const ModelConfig& c, bool with_attention = true);
// Training FLOPs per token of one routed MoE layer: 6 x its active parameters (the router, and the top-k
// and shared experts' SwiGLU); 0 for a dense model.
double moe_layer_flops_per_token(const ModelConfig& c);
// FP32 master weights + BF16 copy, FP32 grads, Adam (two FP32 moments); activations for one
// micro-batch of sequences without recomputation (about 34 bytes x d_model per token and layer with
// fused attention, Korthikanti et al. 2022, plus routed-expert copies and FP32 logits).
MemoryEstimate estimate_memory(const ModelConfig& c, int64_t micro_batch);

const ModelConfig& model_config(const std::string& name);  // throws ufp4::Error listing the names
std::vector<std::string> model_names();
// Throws model_config's error when `name` is no model's; resolves nothing (a manifest's parse checks names).
void check_model_name(const std::string& name);
// How many times this process resolved a model by name (model_config): a run resolves its model once.
int64_t model_resolutions();

}  // namespace ufp4
