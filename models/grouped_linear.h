// The experts' linears of one MoE layer as one module: weight [E, N, K], expert e's [N, K] matrix in
// slice e, applied to the expert-sorted rows of a Routing (rows of expert e's segment use slice e).
// Each expert keeps its own LayerQuant (name "<prefix>.experts.<e>.<linear>", its own layer id), so
// its SR keys, RHT signs, layer policy, telemetry and capture are those of a per-expert QuantLinear.
//
// A GEMM whose operands the recipe leaves as they are runs grouped, one at::_grouped_mm for all
// experts (LibTorch >= 2.8, CUDA, BF16; segment ends read on the device, no host synchronisation).
// Any other GEMM, and every GEMM on CPU or older LibTorch, runs expert by expert through the same
// quant_fprop / quant_dgrad / quant_wgrad as QuantLinear, on the host copy of the segment ends.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "models/moe_routing.h"
#include "models/quant_linear.h"

namespace ufp4 {

// True when this build can run grouped GEMMs (at::_grouped_mm) on CUDA tensors.
bool grouped_mm_available();

class GroupedLinearImpl : public torch::nn::Module {
 public:
  // Expert e's layer id is first_layer_id + e * id_stride (the ids per-expert QuantLinears would get).
  GroupedLinearImpl(int64_t experts, int64_t in_features, int64_t out_features, const std::string& prefix, const std::string& linear,
                    const std::shared_ptr<QuantContext>& ctx, int64_t first_layer_id, int64_t id_stride, int layer_index, int n_layers);
  // LibTorch's Linear initialisation of slice e; the caller orders the draws across experts and linears.
  void init_expert(int64_t e);
  // x [A, K] in the expert-sorted layout of r -> [A, N]; rows past the last segment end are 0.
  torch::Tensor forward(const torch::Tensor& x, const Routing& r);
  // Whether GEMM g of this step would run grouped on x (else expert by expert).
  bool runs_grouped(const torch::Tensor& x, Gemm g) const;

  torch::Tensor weight;
  std::vector<std::shared_ptr<LayerQuant>> layers;
  bool allow_grouped = true;  // false: always expert by expert (the equivalence tests' reference)
};
TORCH_MODULE(GroupedLinear);

}  // namespace ufp4
