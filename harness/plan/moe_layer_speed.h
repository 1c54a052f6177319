// A MoE model's training time from the measured speed of one of its routed MoE layers (`ufp4 bench scaling
// --moe-layer`, results/bench/expert_parallel_layer.h5), for a model too large to train where it was
// benchmarked (moe-124b): its MoE layers at the measured time a token, the rest of its FLOPs at the MFU a
// dense model's step measured on the same device (results/bench/scaling.h5).
#pragma once
#include <string>

#include "models/model_config.h"

namespace ufp4 {

struct MoeLayerEstimate {
  double seconds = -1;          // for the tokens asked, on the GPUs asked; -1 when nothing was measured
  std::string device, recipe, layout;
  double layer_ms = 0;          // one measured layer pass (forward + backward) on a rank
  double layer_tokens = 0;      // tokens a rank in that pass
  double rest_mfu = 0;          // MFU the rest of the model is counted at
  std::string rest_source;      // where rest_mfu comes from
};

// `tokens` of training of `c` over `gpus` ranks, each rank's tokens at (MoE layers x the measured layer's
// seconds a token + the other FLOPs / (rest MFU x peak)). The layer row: `device`'s (any device when
// `device` has none), ufp4 before bf16, the most ranks measured. Not counted: the optimizer step and an
// all-to-all slower than the one measured (ranks on other machines).
MoeLayerEstimate estimate_from_moe_layer(const ModelConfig& c, int gpus, double tokens, const std::string& device,
                                         const std::string& bench_dir = "results/bench");

}  // namespace ufp4
