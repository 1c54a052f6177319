// The MoE layer (models/moe.h) against the per-expert formulation it replaced: each expert's rows
// gathered with nonzero(), one QuantLinear pair per expert, outputs index_add-ed in expert order. The
// routing's layout is checked on its own; the layer's output, its experts' weight gradients, every
// quantized operand (captured) and every alpha must equal the reference bit for bit.
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "models/moe.h"
#include "tests/catch.h"
#include "tests/moe_reference.h"

using namespace ufp4;

TEST_CASE("routing: expert segments in token order, capacity drops the latest, inverse and ends consistent", "[moe]") {
  test::check_routing(torch::kCPU);
}

TEST_CASE("MoE layer equals the per-expert formulation bit for bit: output, expert gradients, quantized operands, alpha", "[moe]") {
  for (const char* recipe : {"bf16", "e2m1_ref", "ufp4", "nvfp4_nvidia", "mxfp4"})
    for (int64_t top_k : {2, 3})
      for (double cf : {0.0, 0.75}) {
        INFO(recipe << " top-" << top_k << " capacity factor " << cf);
        ModelConfig c = model_config("tiny-moe");
        c.top_k = top_k;
        c.capacity_factor = cf;
        const test::MoeComparison m = test::compare_moe(c, recipe, torch::kCPU, torch::kFloat32, /*allow_grouped=*/true);
        CHECK(m.bit_mismatches() == "");
        if (std::string(recipe) == "ufp4" || std::string(recipe) == "e2m1_ref") CHECK(m.alphas > 0);
        // Summed in another order (the token's slots, not autograd's accumulation of per-expert gathers).
        CHECK(m.input_grad_rel < 1e-5);
        CHECK(m.router_grad_rel < 1e-5);
      }
}

namespace {

// The presets, and variants that reach the segmented quantizer's other paths: RHT-32 everywhere with
// SR on every operand and per-layer signs; 1x64 blocks with RHT-128 on WGRAD and per-step signs.
std::vector<Recipe> operand_recipes() {
  std::vector<Recipe> out;
  for (const char* name : {"e2m1_ref", "ufp4", "nvfp4_nvidia", "mxfp4", "ufp4_int4"}) out.push_back(Recipe::load(name));
  Recipe a = Recipe::load("ufp4");
  a.name = "ufp4 rht32 sr per_layer";
  a.rht_signs = "per_layer";
  for (Gemm g : kGemms) {
    a.at(g).rht = 32;
    for (auto& o : a.at(g).op) o.spec.rounding = Rounding::kSr;
  }
  out.push_back(a);
  Recipe b = Recipe::load("e2m1_ref");
  b.name = "e2m1 1x64 rht128 per_step";
  b.rht_signs = "per_step";
  b.at(Gemm::kWgrad).rht = 128;
  for (Gemm g : kGemms)
    for (auto& o : b.at(g).op) o.spec.block = 64;
  out.push_back(b);
  return out;
}

}  // namespace

TEST_CASE("grouped quantized operands equal the per-expert operands bit for bit", "[moe]") {
  for (const Recipe& r : operand_recipes()) {
    INFO(r.name);
    const test::OperandComparison c = test::compare_grouped_operands(r, torch::kCPU);
    CHECK(c.mismatches == "");
    CHECK(c.operands > 30);
  }
}
