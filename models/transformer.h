// Decoder-only transformer in LibTorch: RMSNorm, RoPE, grouped-query attention (linear_qkv,
// linear_proj), SwiGLU MLP (linear_fc1, linear_fc2) or a MoE layer (top-k routed experts, optional
// shared expert, load-balancing loss: models/moe.h). Every linear is named as the recipe's layer
// policy sees it: "layers.<i>.attention.linear_qkv", "layers.<i>.mlp.experts.<e>.linear_fc1", "lm_head".
#pragma once
#include <torch/torch.h>

#include "models/layers.h"
#include "models/model_config.h"
#include "models/moe.h"
#include "models/quant_linear.h"
#include "models/weight_operands.h"

namespace ufp4 {

struct TransformerOutput {
  torch::Tensor loss;     // lm_loss + aux_loss_coeff * aux_loss
  torch::Tensor lm_loss;  // mean next-token cross entropy (FP32)
  torch::Tensor aux_loss; // mean over MoE layers (0 for dense)
};

// Which of the model's fused kernels run (on CUDA); the others take LibTorch's composition.
struct FusedOps {
  bool rms_norm = true, swiglu = true, rope = true, cross_entropy = true, moe_combine = true;
  static FusedOps all(bool on) { return {on, on, on, on, on}; }
};

class TransformerImpl : public torch::nn::Module {
 public:
  // experts_over: expert parallelism's group (models/moe.h); every MoE layer keeps only this rank's experts.
  TransformerImpl(const ModelConfig& c, std::shared_ptr<QuantContext> ctx, std::shared_ptr<RowExchange> experts_over = nullptr);
  torch::Tensor forward(const torch::Tensor& tokens);  // [B, S] int64 -> logits [B, S, V] (compute dtype)
  TransformerOutput loss(const torch::Tensor& tokens, const torch::Tensor& targets);
  // Activations run in this dtype (BF16 on GPU, FP32 on CPU); parameters stay FP32 (master weights).
  void set_compute_dtype(torch::ScalarType t) { compute_dtype_ = t; }
  // On CUDA, RMSNorm, SwiGLU, RoPE, the loss and the MoE combine run as fused kernels (models/fused_ops.h) unless turned off
  // here, all at once or one by one (the benchmark's leave-one-out rows); CPU always takes LibTorch's
  // composition (the CI reference curves).
  void set_fused_ops(bool on) { set_fused_ops(FusedOps::all(on)); }
  void set_fused_ops(const FusedOps& f);
  const FusedOps& fused_ops() const { return fused_ops_; }
  // Every quantized linear's weight and layers, for the forward's batched weight operands
  // (models/weight_operands.h); expert linears where their weight's GEMMs run grouped.
  std::vector<WeightUse> weight_uses() const;
  // The routed experts' weights (two a MoE layer): what expert parallelism splits over ranks.
  std::vector<torch::Tensor> routed_expert_weights() const;
  bool is_routed_expert_weight(const torch::Tensor& p) const;

  ModelConfig config;
  std::shared_ptr<QuantContext> ctx;
  // Set: forward appends the residual stream as the signal-chain measurement reads it (harness/train/
  // stream_probe.h): the embedding's output, the stream after each block, the final norm's output and the
  // logits. Null in training; the tensors are the forward's own, so setting it changes no value.
  std::vector<torch::Tensor>* stream_taps = nullptr;
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
  FusedOps fused_ops_;
};
TORCH_MODULE(Transformer);

}  // namespace ufp4
