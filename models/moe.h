// The MoE layer: FP32 router, top-k routing without host synchronisation (models/moe_routing.h), the
// routed experts' SwiGLU MLPs as two grouped linears (models/grouped_linear.h) and an optional shared
// expert as one dense MLP. The experts' linears keep the per-expert names the recipe's layer policy
// sees ("layers.<i>.mlp.experts.<e>.linear_fc1") and per-expert quantization keys.
#pragma once
#include <torch/torch.h>

#include "models/grouped_linear.h"
#include "models/layers.h"
#include "models/model_config.h"
#include "models/row_exchange.h"

namespace ufp4 {

// Top-k routing: softmax over all experts in FP32, the k largest renormalized to sum 1. Dropless by
// default; with capacity_factor > 0 an expert takes at most ceil(cf * tokens * k / experts) tokens,
// in token order, and the rest of its assignments are dropped (their weight is lost, as in Switch).
// An expert that gets no token in a step gets a zero gradient (its weights are one tensor with the
// other experts'), so AdamW still decays it, as in grouped-GEMM MoE implementations.
//
// Expert parallelism (`experts_over`): the routed experts are spread over the ranks of a group, rank p
// holding experts [p E/n, (p+1) E/n) and only their weights, drawn as one process draws them all (the
// same initial values); each rank routes its own tokens, the rows go to the ranks of their experts and
// their outputs come back by all-to-all (models/row_exchange.h), in a fixed rank order. An expert sees
// its rows in the order one process that holds every rank's tokens, rank by rank, would give it.
class MoeImpl : public torch::nn::Module {
 public:
  MoeImpl(const ModelConfig& c, const std::string& prefix, const std::shared_ptr<QuantContext>& ctx, int64_t& layer_id, int layer_index,
          std::shared_ptr<RowExchange> experts_over = nullptr);
  torch::Tensor forward(const torch::Tensor& x);  // accumulates aux_loss
  torch::Tensor router;                           // [experts, d], FP32, never quantized
  GroupedLinear fc1{nullptr}, fc2{nullptr};       // [experts, 2 hidden, d] (gate and up), [experts, d, hidden]
  Mlp shared{nullptr};
  torch::Tensor aux_loss;                         // load-balancing loss of the last forward
  int64_t top_k, n_experts;
  double capacity_factor;
  bool fused = true;                              // the fused SwiGLU kernel on CUDA (models/fused_ops.h)
  bool fused_combine = true;                      // the fused dispatch backward and combine on CUDA (the same bits)
  std::shared_ptr<RowExchange> expert_group;      // expert parallelism's ranks (nullptr: every expert here)
  int64_t first_expert = 0, local_experts = 0;    // this rank's experts

 private:
  torch::Tensor swiglu(const torch::Tensor& h) const;
  // The routed experts' outputs for rows [A, d] in this rank's expert-sorted layout of r, from the ranks
  // that hold them (dropped rows 0).
  torch::Tensor experts_over_ranks(const torch::Tensor& rows, const Routing& r);
};
TORCH_MODULE(Moe);

}  // namespace ufp4
