// The SwiGLU MLP's two quantized linears as one autograd op, so that the SwiGLU between them feeds the
// pair quantizer directly (models/fused_ops.h swiglu_quantize_pair): its output enters linear_fc2's
// FPROP and WGRAD as quantized operands without going to memory in BF16, and its backward gives
// linear_fc1's DGRAD and WGRAD operands of dY the same way. Every operand, key and GEMM is the one the
// two QuantLinears and the fused SwiGLU would use, so the results are theirs bit for bit (test); what
// goes is two BF16 tensors' write and read a layer each direction.
#pragma once
#include <torch/torch.h>

#include "models/quant_linear.h"

namespace ufp4 {

// Whether quant_mlp takes this call: training on CUDA with BF16 activations (grad mode on; x, both
// weights needing gradients), no biases, both layers quantized with every operand of X, W and dY in
// pairs (prepare_operand_pair's conditions), the SwiGLU's operands within the pair kernel's cases, and
// neither telemetry nor operand capture on this step (they record the BF16 tensors the op never makes).
bool quant_mlp_applies(const torch::Tensor& x, const QuantLinearImpl& fc1, const QuantLinearImpl& fc2);

// fc2(swiglu(fc1(x))), x [..., d] -> [..., d]; call where quant_mlp_applies.
torch::Tensor quant_mlp(const torch::Tensor& x, const QuantLinearImpl& fc1, const QuantLinearImpl& fc2);

}  // namespace ufp4
