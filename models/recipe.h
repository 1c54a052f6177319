// A 4-bit training recipe: for each GEMM of a linear layer (FPROP, DGRAD, WGRAD), how each of its
// two operands is quantized, whether the GEMM is rotated (RHT along its reduction dimension, both
// operands), and which layers stay unquantized. Recipes are TOML data (models/recipes/*.toml) that
// may extend another recipe and override single fields.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "kernels/quantize/quant_spec.h"

namespace ufp4 {

enum class Gemm { kFprop = 0, kDgrad = 1, kWgrad = 2 };
constexpr std::array<Gemm, 3> kGemms = {Gemm::kFprop, Gemm::kDgrad, Gemm::kWgrad};
const char* gemm_key(Gemm g);       // "fprop", "dgrad", "wgrad"
const char* gemm_paper_name(Gemm g);  // "fwd_y", "bwd_dx", "bwd_dw"
// Operand slots: FPROP (x, w), DGRAD (dy, w), WGRAD (dy, x).
const char* operand_key(Gemm g, int slot);

struct OperandRecipe {
  bool quantize = false;
  QuantSpec spec;  // grid, block, scale, rounding, block_2d (seeds are filled in per layer and step)
};

struct GemmRecipe {
  int rht = 0;  // 0 or the Hadamard size, applied along the reduction dimension of both operands
  std::array<OperandRecipe, 2> op;
};

struct Recipe {
  std::string name, description, source;  // source: the files it was resolved from
  std::array<GemmRecipe, 3> gemm;
  uint64_t seed = 0;                       // RHT sign vector seed
  std::string rht_signs = "shared";        // shared | per_layer | per_step
  std::string gemm_precision = "bf16";     // emulated GEMM on GPU: bf16 (FP32 accumulate) or fp32
  std::vector<std::string> bf16_layers;    // glob patterns of layer names kept unquantized
  int bf16_first_blocks = 0, bf16_last_blocks = 0;

  const GemmRecipe& at(Gemm g) const { return gemm[static_cast<int>(g)]; }
  GemmRecipe& at(Gemm g) { return gemm[static_cast<int>(g)]; }
  bool quantizes_anything() const;

  // A preset name (models/recipes/NAME.toml, or $UFP4_RECIPES/NAME.toml) or a path to a .toml file.
  // Errors name the file, line, key and allowed values.
  static Recipe load(const std::string& name_or_path);
  static int64_t loads();  // how many times this process loaded a recipe: a run loads its recipe once
  static std::vector<std::string> preset_names();

  // Every field, resolved (TOML).
  std::string to_toml() const;
  // What the recipe does: to_toml() without its name, description and source (run ids hash this).
  std::string content() const;
  // Paper Table 1 for these recipes: one row a field ("grid", "quant block", ...), one cell a recipe.
  using Table1Row = std::pair<std::string, std::vector<std::string>>;
  static std::vector<Table1Row> table1_rows(const std::vector<Recipe>& recipes);
  // The same rows as a Markdown table, recipes as columns.
  static std::string table1(const std::vector<Recipe>& recipes);

  // Whether a layer keeps its GEMMs unquantized: name matches a bf16 pattern, or its transformer layer
  // (layer_index of n_layers) is among the first/last N (bf16_first_blocks / bf16_last_blocks, the
  // recipe files' names; layer_index < 0: not in a transformer layer, e.g. lm_head).
  bool layer_is_bf16(const std::string& layer_name, int layer_index, int n_layers) const;
};

}  // namespace ufp4
