// The per-expert MoE formulation the grouped layer replaced (each expert's rows found with nonzero(),
// one quant_linear pair per expert with the expert's own LayerQuant, outputs index_add-ed in expert
// order), and a comparison of the two on one batch: forward, backward, capture and telemetry.
#pragma once
#include <torch/torch.h>

#include <string>

#include "models/model_config.h"
#include "models/recipe.h"

namespace ufp4::test {

// Catch2 checks of route() on `device` (tests/moe_reference.cpp says which).
void check_routing(torch::Device device);
// Catch2 checks of inverse_permutation() on `device` against the CPU reference
// (kernels/moe/inverse_permutation.h), bit for bit: rows of widths 1 to 65536, none, and out of range;
// on CUDA also one of 2^24 + 3 entries (the kernel's grid-stride loop past its 65535 blocks).
void check_inverse_permutation(torch::Device device);
// Catch2 checks of the counting sort by expert (kernels/moe/expert_sort.h): on the CPU its reference
// against LibTorch's stable sort, searchsorted and bincount; on CUDA the kernels against the reference, bit
// for bit (none to 2^20 + 5 assignments, 1 to 1024 experts, idle experts, k 1 to 4); a key out of range.
void check_expert_sort(torch::Device device);
// Catch2 checks of top_k_experts() (models/router_top_k.h) on `device` against LibTorch's topk and its
// autograd there, and of the GPU kernel's CPU reference against topk on the CPU: 16 and 128 experts, k 1, 2,
// 3 and 8, ties at and inside the top k, NaNs and signed zeros; the probabilities' gradient bit for bit.
// Also the reference in expert order and the backward's reference (on the CPU), and choose_experts()
// against topk, the normalisation and in_expert_order() on `device`, gradient included.
void check_top_k_experts(torch::Device device);

struct MoeComparison {
  bool output_equal = false;           // bit for bit
  double output_rel = 0;               // max |a - b| / max |b|
  bool expert_grads_equal = false;     // every routed expert's fc1 and fc2 gradient, bit for bit
  double expert_grad_rel = 0;
  bool idle_expert_grads_zero = false; // experts without rows: zero gradient
  bool operands_equal = false;         // every captured operand (before and after quantization)
  int64_t operands = 0;                // how many were compared
  bool alpha_equal = false;            // the telemetry's alpha per operand
  int64_t alphas = 0;                  // how many (0 where the recipe leaves the layer in BF16)
  double input_grad_rel = 0, router_grad_rel = 0;
  // "" when output, expert gradients, idle experts' zeros, operands (at least one) and alpha all hold
  // bit for bit; else the names of those that do not.
  std::string bit_mismatches() const;
};

// One MoE layer of config c under `recipe` on `device` with activations in `dtype`: the layer's
// forward and backward against the per-expert reference on the same weights and batch.
// allow_grouped=false forces the layer's expert-by-expert path; observe=false runs without telemetry
// and capture (a captured layer runs expert by expert, so the grouped GEMMs run only without it).
MoeComparison compare_moe(const ModelConfig& c, const std::string& recipe, torch::Device device, torch::ScalarType dtype,
                          bool allow_grouped, bool observe = true);

// The grouped path's quantized operands (GroupedLinear::grouped_operand, segmented quantization)
// against the per-expert path's (prepare_operand on each expert's rows), bit for bit, for every
// operand of the three GEMMs of one expert linear under `recipe` on `device`: expert segments of
// 0 to 70 rows, ends short of the rows (capacity drops), layout padding zero.
struct OperandComparison {
  int64_t operands = 0;    // per-expert operands compared
  std::string mismatches;  // "" when all equal, else which
  int pairs_fused = 0;     // of the two operand pairs (X: FPROP + WGRAD, dY: DGRAD + WGRAD), those read once
};
OperandComparison compare_grouped_operands(const Recipe& recipe, torch::Device device);

// An expert linear whose experts were routed no rows (a rank of expert parallelism can be), forward
// and backward under `recipe` on `device`: "" when the output is [0, N], the input's gradient [0, K] and
// the weight's gradient zero, else what went wrong (an exception's message included).
std::string grouped_linear_without_rows(const Recipe& recipe, torch::Device device);

// Routing ends (int32, CPU) of E experts over counts drawn from [0, max_count), about a quarter of them
// set to 0 (idle experts), from the fixed seed.
torch::Tensor random_segment_ends(int64_t E, int64_t max_count, int64_t seed);

}  // namespace ufp4::test
