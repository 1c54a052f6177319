// The signal chain measured through a trained network (the mechanism's Eq. 5 on the model itself): at a
// captured step, one micro-batch goes forward and back twice through the same weights, once quantized as
// the run's recipe trains and once with every operand left as it is (the same BF16 GEMMs, no quantizer,
// no rotation), and the two passes are compared where the residual stream runs: after the embedding,
// after each block, at the final norm and at the logits, forward (the activations) and backward (the
// loss's gradient there). alpha = <q, e> / ||e||^2 is the recipe pass's projection on the exact one
// (Eq. 3 applied to the network's signal), below 1 where the signal shrinks.
//
// The passes leave training as it was: no parameter gradient is accumulated (the gradients are those of
// the taps alone), telemetry and operand capture are off, the recipe is restored, and nothing draws from
// a random state (stochastic rounding keys on the step). One process only: a data-parallel rank's
// backward joins collectives. With the taps set, each residual add runs before its norm as a tensor of its
// own (models/transformer.h), so a tap's gradient is the stream's whole gradient there. The exact pass runs
// the model's compute dtype (BF16 on the GPU) also for an FP32-emulated recipe.
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/transformer.h"

namespace ufp4 {

struct StreamTap {
  std::string name;  // "embedding", "layers.<i>" (the stream after block i), "final_norm", "logits"
  double alpha_forward = 0, error_forward = 0;    // error: ||q - e|| / ||e||
  double alpha_backward = 0, error_backward = 0;  // of the loss's gradient at the tap
};

struct StreamComparison {
  std::vector<StreamTap> taps;  // in forward order
  double loss_recipe = 0, loss_exact = 0;
  int64_t tokens = 0;
};

// The recipe's pass against the exact pass on `batch` ([B, seq_len + 1] tokens), through the model's
// current weights. Error when the model's forward yields a different number of taps in the two passes.
StreamComparison compare_stream(Transformer& model, const torch::Tensor& batch, int64_t seq_len);

// The tap names of a model with `n_layers` blocks, in the order compare_stream reports them.
std::vector<std::string> stream_tap_names(int64_t n_layers);

}  // namespace ufp4
