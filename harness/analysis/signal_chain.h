// Eq. 5 through a trained network: the attenuation its GEMMs predict at each point of the residual stream,
// from the alpha of each quantized operand as the run's recipe made it at a step, beside the attenuation
// measured there (harness/train/stream_probe.h). The prediction treats every GEMM the signal has crossed
// as one stage of a chain, prod_k (1 - delta_k) ~ exp(-sum_k delta_k) with delta_k = 1 - alpha_A,k alpha_B,k:
// forward, the FPROP GEMMs before the point; backward, the DGRAD GEMMs after it. A MoE layer's experts (the
// routed ones and the shared one) run side by side, so each of its linears counts once, at the mean delta of
// the experts. The chain is serial: a residual stream also carries each point's signal past every branch.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "harness/io/labelled_table.h"

namespace ufp4 {

struct ChainPredicted {
  double forward = 1, backward = 1;        // exp(-sum delta)
  int forward_gemms = 0, backward_gemms = 0;  // the stages counted
};

// `taps`: the stream's points in forward order ("embedding", "layers.<i>", "final_norm", "logits") of a model
// of `n_layers` blocks. `alpha`: "<layer>/<gemm>.<operand>" -> alpha (Eq. 3) of each operand the recipe
// quantized; an operand not listed is left as it is (alpha 1), a linear with no operand listed adds no
// stage. Error naming the tap when one is not a point of the stream.
std::vector<ChainPredicted> predict_chain(const std::vector<std::string>& taps, int64_t n_layers, const std::map<std::string, double>& alpha);

// The chain table of a step file: one row a tap and direction (labels tap, "forward" | "backward"), columns
// measured alpha, measured relative error, predicted alpha (Eq. 5), the GEMMs in the prediction.
struct MeasuredTap {
  std::string name;
  double alpha_forward, error_forward, alpha_backward, error_backward;
};
LabelledTable chain_table(const std::vector<MeasuredTap>& measured, int64_t n_layers, const std::map<std::string, double>& alpha);

}  // namespace ufp4
