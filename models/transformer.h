// Decoder-only transformer in LibTorch: RMSNorm, RoPE, grouped-query attention (linear_qkv,
// linear_proj), SwiGLU MLP (linear_fc1, linear_fc2) or a MoE layer (top-k routed experts, optional
// shared expert, load-balancing loss). Every linear is a QuantLinear named as the recipe's layer
// policy sees it: "layers.<i>.attention.linear_qkv", "layers.<i>.mlp.experts.<e>.linear_fc1", "lm_head".
#pragma once
#include <torch/torch.h>

#include "models/model_config.h"
#include "models/quant_linear.h"

namespace ufp4 {

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);  // computed in FP32, returned in x's dtype
  torch::Tensor weight;
  double eps;
  bool fused = true;  // the fused kernel on CUDA (models/fused_ops.h); LibTorch's composition otherwise
};
TORCH_MODULE(RMSNorm);

// SwiGLU MLP: linear_fc1 (d -> 2 hidden, gate and up), silu(gate) * up, linear_fc2 (hidden -> d).
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(int64_t d, int64_t hidden, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& layer_id, int layer_index,
          int n_layers);
  torch::Tensor forward(const torch::Tensor& x);
  QuantLinear fc1{nullptr}, fc2{nullptr};
  bool fused = true;  // the fused SwiGLU kernel on CUDA (models/fused_ops.h)
};
TORCH_MODULE(Mlp);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& layer_id, int layer_index);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  QuantLinear qkv{nullptr}, proj{nullptr};
  int64_t n_heads, n_kv_heads, head_dim;
};
TORCH_MODULE(Attention);

// Top-k routing: softmax over all experts in FP32, the k largest renormalized to sum 1. Dropless by
// default; with capacity_factor > 0 an expert takes at most ceil(cf * tokens * k / experts) tokens,
// in token order, and the rest of its assignments are dropped (their weight is lost, as in Switch).
class MoeImpl : public torch::nn::Module {
 public:
  MoeImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& layer_id, int layer_index);
  torch::Tensor forward(const torch::Tensor& x);  // accumulates aux_loss
  torch::Tensor router;                           // [experts, d], FP32, never quantized
  std::vector<Mlp> experts;
  Mlp shared{nullptr};
  torch::Tensor aux_loss;                         // load-balancing loss of the last forward
  int64_t top_k;
  double capacity_factor;
};
TORCH_MODULE(Moe);

struct TransformerOutput {
  torch::Tensor loss;     // lm_loss + aux_loss_coeff * aux_loss
  torch::Tensor lm_loss;  // mean next-token cross entropy (FP32)
  torch::Tensor aux_loss; // mean over MoE layers (0 for dense)
};

class TransformerImpl : public torch::nn::Module {
 public:
  TransformerImpl(const ModelConfig& c, std::shared_ptr<QuantContext> ctx);
  torch::Tensor forward(const torch::Tensor& tokens);  // [B, S] int64 -> logits [B, S, V] (compute dtype)
  TransformerOutput loss(const torch::Tensor& tokens, const torch::Tensor& targets);
  // Activations run in this dtype (BF16 on GPU, FP32 on CPU); parameters stay FP32 (master weights).
  void set_compute_dtype(torch::ScalarType t) { compute_dtype_ = t; }
  // On CUDA, RMSNorm, SwiGLU and the loss run as fused kernels (models/fused_ops.h) unless turned off here;
  // CPU always takes LibTorch's composition (the CI reference curves).
  void set_fused_ops(bool on);
  bool fused_ops() const { return fused_ops_; }

  ModelConfig config;
  std::shared_ptr<QuantContext> ctx;
  torch::nn::Embedding embedding{nullptr};
  std::vector<RMSNorm> norm1, norm2;
  std::vector<Attention> attention;
  std::vector<Mlp> mlp;
  std::vector<Moe> moe;
  RMSNorm final_norm{nullptr};
  QuantLinear lm_head{nullptr};

 private:
  torch::Tensor cos_, sin_;
  torch::ScalarType compute_dtype_ = torch::kFloat32;
  bool fused_ops_ = true;
};
TORCH_MODULE(Transformer);

}  // namespace ufp4
