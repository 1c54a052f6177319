// The quantized training linear layer: Y = X W^T (+ b) with each operand of FPROP, DGRAD and WGRAD
// quantized as its recipe says, on emulated 4-bit GEMMs (dequantized operands into a BF16 GEMM with
// FP32 accumulation on GPU, FP32 on CPU). Gradients pass straight through the quantizers.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "models/recipe.h"

namespace ufp4 {

// Collects operands before and after quantization on chosen steps and layers, as FP32 tensors (on the
// CPU, or where they were made when `on_device`). Storing or analysing them is the caller's (the
// training engine writes one HDF5 file a step, harness/train/capture_file.h, or hands them to a sink).
class OperandCapture {
 public:
  // "<layer>/<gemm>.<operand>" -> (before, after): before is the operand as the GEMM's quantizer reads it
  // (rotated where the recipe rotates that GEMM); after is undefined where the recipe left it as it was.
  using Operands = std::map<std::string, std::pair<torch::Tensor, torch::Tensor>>;
  // max_tokens > 0 keeps the first max_tokens tokens of activations and gradients (weights whole).
  OperandCapture(std::set<int64_t> steps, std::vector<std::string> layer_patterns, int64_t max_tokens = 0, bool on_device = false);
  bool wants(int64_t step, const std::string& layer) const;
  bool at_step(int64_t step) const { return steps_.count(step) > 0; }
  // `raw`: the operand before any rotation (kept only where it differs from `before`).
  void add(const std::string& key, const torch::Tensor& raw, const torch::Tensor& before, const torch::Tensor& after);
  const Operands& pending() const { return pending_; }
  Operands take();  // the operands gathered so far; clears
  // The unrotated operands of the keys whose GEMM the recipe rotates, gathered so far; clears.
  std::map<std::string, torch::Tensor> take_raw();

  // Streaming, for an analysis that runs as the model trains (a step of a deep model at tens of
  // thousands of tokens is too large to keep whole): each quantized operand goes to `observe` as it
  // is made, nothing of it kept, and only the unrotated FPROP x, FPROP w and DGRAD dy of each layer
  // are kept, for take_raw() (`before` and `after` as add() received them, token-cut).
  using Observe = std::function<void(const std::string& key, const torch::Tensor& before, const torch::Tensor& after)>;
  void stream_to(Observe observe) { observe_ = std::move(observe); }

 private:
  torch::Tensor keep(const std::string& key, const torch::Tensor& t) const;
  std::set<int64_t> steps_;
  std::vector<std::string> patterns_;
  int64_t max_tokens_ = 0;
  bool on_device_ = false;
  Observe observe_;
  Operands pending_;
  std::map<std::string, torch::Tensor> raw_;
};

// State shared by all quantized linears of one model in one run.
// A weight's two operands for one forward: FPROP's rowwise one (the weight's shape) and DGRAD's
// columnwise one ([K, N], or [E, K, N] for an expert linear), dequantized BF16 (models/weight_operands.h).
struct WeightOperands {
  torch::Tensor row, col;
};

struct QuantContext {
  Recipe recipe;
  uint64_t run_seed = 0;
  bool recipe_rht_signs = false;         // every run seed rotates with the recipe's own sign draw (rht_sign_seed of seed 1)
  int64_t step = 0;                      // stochastic-rounding keys and per-step RHT signs use it
  bool telemetry = false;                // record alpha (Eq. 3) of every quantized operand this step
  std::map<std::string, double> alpha;   // "<layer>/<gemm>.<operand>" -> alpha at the last telemetry step
  std::shared_ptr<OperandCapture> capture;  // optional
  // Set while a CUDA graph holds the step (harness/train/step_graph.h): one uint64 on the GPU holding
  // step * 8, which the kernels add to the SR offsets, so the replayed launches key each step as an
  // uncaptured step does. The host's `step` then enters no offset.
  torch::Tensor device_step_offset;
  // X, dY and W each feed two GEMMs, rowwise and columnwise: quantize both layouts from one read where
  // the pair kernel covers them (prepare_operand_pair). false: one layout at a time (the same bits; tests
  // compare the two).
  bool pair_operands = true;
  // Every linear's weight operands of the current training forward, made in one launch at its start
  // (models/weight_operands.h), by the weight's TensorImpl; empty outside it. false: each linear makes
  // its own (the same bits; tests and the step benchmark compare the two).
  std::map<const void*, WeightOperands> weight_operands;
  bool batch_weight_operands = true;
};

// One layer's identity within the context.
struct LayerQuant {
  std::string name;
  int64_t layer_id = 0;
  bool bf16 = false;  // kept unquantized by the recipe's layer policy
  std::shared_ptr<QuantContext> ctx;
};

// The seed of a run's RHT sign vector: the recipe's seed for run seed 1 (the single run of the paper
// and of every result made before seeds were an axis), re-drawn from both seeds for any other run
// seed, so that seed-to-seed spread includes the draw of the signs.
uint64_t rht_sign_seed(uint64_t recipe_seed, uint64_t run_seed);

// The operand spec with its per-layer, per-step keys: SR key (hash(run seed, layer), step * 8 + gemm * 2
// + slot; step * 8 read from the context's device_step_offset when it is set), RHT signs from
// rht_sign_seed (shared, or re-drawn per layer / per step).
QuantSpec operand_spec(const LayerQuant& layer, Gemm g, int slot, int64_t step);

// How operand `slot` of GEMM g enters its GEMM: quantized (dequantized values in dq_dtype), rotated
// only, or untouched, with the layer's keys for `step`; records telemetry's alpha and capture. `columnwise`
// quantizes along dim 0 and returns the transposed layout (zero rows complete the last RHT segment);
// untouched operands come back as (a transposed view of) t itself, so the untouched path runs exactly
// the GEMMs LibTorch's own backward runs.
torch::Tensor prepare_operand(const torch::Tensor& t, const LayerQuant& layer, Gemm g, int slot, int64_t step, bool columnwise,
                              torch::ScalarType dq_dtype);

// One tensor as operand (g_row, slot_row) rowwise and operand (g_col, slot_col) columnwise ([cols, rows]),
// both quantized from one read of t (quantize_pair), with telemetry and capture as prepare_operand
// records them. Both undefined where that does not apply (then prepare_operand makes each): the context's
// pair_operands off, a layer kept in BF16, an operand the recipe does not quantize, GEMMs not in BF16,
// a columnwise RHT that needs padding, or a call the pair kernel does not cover (CPU tensors included).
struct OperandPair {
  torch::Tensor row, col;
};
OperandPair prepare_operand_pair(const torch::Tensor& t, const LayerQuant& layer, Gemm g_row, int slot_row, Gemm g_col, int slot_col,
                                 int64_t step);

// The three GEMMs of one quantized linear, each operand prepared as the recipe says (quantized,
// rotated or untouched) with the layer's keys for `step`; QuantLinear runs them, and the grouped expert
// linear (models/grouped_linear.h) runs them expert by expert. Results in the compute dtype. An operand
// already prepared (from prepare_operand_pair) may be passed in; the tensor it came from is then unused.
// FPROP: x [..., K], w [N, K] -> [..., N]
torch::Tensor quant_fprop(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias, const LayerQuant& layer, int64_t step,
                          const torch::Tensor& xq = {}, const torch::Tensor& wq = {});
// DGRAD: dY [M, N], w [N, K] -> dX [M, K]; wt: w prepared columnwise [K, N]
torch::Tensor quant_dgrad(const torch::Tensor& dy2, const torch::Tensor& w, const LayerQuant& layer, int64_t step,
                          const torch::Tensor& dyq = {}, const torch::Tensor& wt = {});
// WGRAD: dY [M, N], x [M, K] -> dW [N, K]; dyt, xt: prepared columnwise [N, M], [K, M]
torch::Tensor quant_wgrad(const torch::Tensor& dy2, const torch::Tensor& x2, const LayerQuant& layer, int64_t step,
                          const torch::Tensor& dyt = {}, const torch::Tensor& xt = {});
// True when the recipe leaves both operands of GEMM g of this layer as they are (no quantizer, no RHT).
bool gemm_untouched(const LayerQuant& layer, Gemm g);

// Functional form (autograd-aware).
torch::Tensor quant_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                           const std::shared_ptr<LayerQuant>& layer);

class QuantLinearImpl : public torch::nn::Module {
 public:
  // layer_index of n_layers: the transformer layer holding it, for the first/last-layers policy (-1: none).
  QuantLinearImpl(int64_t in_features, int64_t out_features, bool bias, const std::string& name,
                  std::shared_ptr<QuantContext> ctx, int64_t layer_id, int layer_index = -1, int n_layers = 0);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
  std::shared_ptr<LayerQuant> layer;
};
TORCH_MODULE(QuantLinear);

}  // namespace ufp4
