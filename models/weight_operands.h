// Every linear's weight operands for one training forward, from one launch.
//
// A quantized linear's FP32 master weight W enters FPROP rowwise and DGRAD columnwise. Made by each
// linear as the forward reaches it, that is a pair launch a linear (an expert linear: a segmented
// launch a layout), dozens a step, on tensors of a few hundred kilobytes that do not fill the GPU. At
// the start of a training forward the transformer hands every linear's weight to a WeightOperandScope:
// it makes both operands of all the weights the batched pair kernel covers (kernels/quantize/quantize_pair.h,
// PairTask) in one launch per set of equal specs, and holds them in the context
// (QuantContext::weight_operands) until each linear takes its own out as it runs: bit for bit what it
// would have made itself, since the specs are the layer's own (operand_spec). The rowwise operand then
// dies with its GEMM and the columnwise one lives on in the autograd graph for DGRAD, as the linears'
// own did; whatever no linear took goes when the forward ends.
#pragma once
#include <torch/torch.h>

#include <vector>

#include "models/quant_linear.h"

namespace ufp4 {

// One weight and the layers whose keys quantize it: a QuantLinear's [N, K] weight and its layer, or an
// expert linear's [E, N, K] weight and its E experts' layers (batched where all E specs agree).
struct WeightUse {
  torch::Tensor weight;
  std::vector<const LayerQuant*> layers;
};

// Makes the operands of the uses it covers, and clears the context's operands when it goes out of
// scope. Covered: the context batching (batch_weight_operands and pair_operands on), a recipe that
// quantizes W in FPROP and DGRAD on the GPU's BF16 GEMMs and rounds it to nearest, a weight on the GPU
// that the batched kernel covers, layers not kept in BF16, no telemetry this step and no capture of the
// layer. The rest make their own as before.
class WeightOperandScope {
 public:
  WeightOperandScope(QuantContext& ctx, const std::vector<WeightUse>& uses);
  ~WeightOperandScope();
  WeightOperandScope(const WeightOperandScope&) = delete;
  WeightOperandScope& operator=(const WeightOperandScope&) = delete;

 private:
  void make(const std::vector<WeightUse>& uses);
  QuantContext& ctx_;
};

// The current forward's operands of weight w, or null (the linear then makes its own).
const WeightOperands* prepared_weight_operands(const QuantContext& ctx, const torch::Tensor& w);
// The same, moved out of the context (undefined tensors where there are none): a linear takes its own as
// it runs, so the rowwise operand lives until its GEMM, as one the linear made would, not to the forward's end.
WeightOperands take_weight_operands(QuantContext& ctx, const torch::Tensor& w);

}  // namespace ufp4
