// The dense layers of the decoder: RMSNorm, grouped-query attention with RoPE (linear_qkv,
// linear_proj) and the SwiGLU MLP (linear_fc1, linear_fc2), each linear a QuantLinear named as the
// recipe's layer policy sees it ("layers.<i>.attention.linear_qkv").
#pragma once
#include <torch/torch.h>

#include "models/model_config.h"
#include "models/quant_linear.h"

namespace ufp4 {

class RMSNormImpl : public torch::nn::Module {
 public:
  explicit RMSNormImpl(int64_t dim, double eps = 1e-6);
  torch::Tensor forward(const torch::Tensor& x);  // computed in FP32, returned in x's dtype
  // {x + residual, forward(x + residual)}: the residual stream's add and this norm, one kernel when fused.
  std::pair<torch::Tensor, torch::Tensor> add_forward(const torch::Tensor& x, const torch::Tensor& residual);
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

// Rotate-half RoPE of x [B, H, S, hd] with FP32 cos/sin [S, hd/2], as LibTorch operations (the
// tables rounded to x's dtype; each product and sum rounded): what fused_rope equals bit for bit.
torch::Tensor rope_composition(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// Causal attention of q [B, H, S, hd] over k, v [B, KV, S, hd] (KV divides H), unquantized: LibTorch's
// scaled-dot-product attention (2.x; grouped KV heads read in place on a GPU in half precision from
// 2.5, else broadcast and copied), the plain composition before; on a GPU in deterministic mode
// cuDNN's forward with flash's deterministic backward (models/deterministic_attention.h). What the model
// and the step benchmark's attention rows run.
torch::Tensor grouped_causal_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& layer_id, int layer_index);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
  QuantLinear qkv{nullptr}, proj{nullptr};
  int64_t n_heads, n_kv_heads, head_dim;
  bool fused = true;  // the fused RoPE kernel on CUDA (models/fused_ops.h; the same bits as the composition)
};
TORCH_MODULE(Attention);

}  // namespace ufp4
