// The MoE layer (models/moe.h) against the per-expert formulation it replaced: each expert's rows
// gathered with nonzero(), one QuantLinear pair per expert, outputs index_add-ed in expert order. The
// routing's layout is checked on its own; the layer's output, its experts' weight gradients, every
// quantized operand (captured) and every alpha must equal the reference bit for bit.
#include <torch/torch.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/moe/padded_segments.h"
#include "models/grouped_linear.h"
#include "models/moe.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/helpers.h"
#include "tests/moe_reference.h"

using namespace ufp4;

TEST_CASE("routing: expert segments in token order, capacity drops the latest, inverse and ends consistent", "[moe]") {
  test::check_routing(torch::kCPU);
}

TEST_CASE("routing's inverse permutations: the CPU reference equals argsort", "[moe]") { test::check_inverse_permutation(torch::kCPU); }

TEST_CASE("the router's top k: topk's pairs and its gradient bit for bit", "[moe]") { test::check_top_k_experts(torch::kCPU); }

TEST_CASE("routing's counting sort by expert: the CPU reference equals LibTorch's stable sort and segment ends", "[moe]") {
  test::check_expert_sort(torch::kCPU);
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

TEST_CASE("an expert linear routed no rows (a rank of expert parallelism) gives empty outputs and a zero weight gradient", "[moe]") {
  std::vector<Recipe> recipes = operand_recipes();
  recipes.push_back(Recipe::load("bf16"));
  for (const Recipe& r : recipes) {
    INFO(r.name);
    CHECK(test::grouped_linear_without_rows(r, torch::kCPU) == "");
  }
}

TEST_CASE("WGRAD's padded read rows: the CPU reference equals the LibTorch composition, and names a src out of range", "[moe]") {
  torch::manual_seed(5);
  CHECK(padded_read_rows(torch::empty({0}, torch::kInt64), torch::arange(5, torch::kInt64)).numel() == 0);
  for (const int64_t gathered : {0, 1, 7, 3000}) {
    INFO("gathered " << gathered);
    const int64_t rows = gathered + 40;
    torch::Tensor src = torch::randint(-1, gathered, {rows}, torch::kInt64), gather = torch::randint(0, 1 << 20, {gathered}, torch::kInt64);
    torch::Tensor read = torch::full({rows}, 9, torch::kInt64);
    PaddedReadRowsIO io;
    io.rows = rows, io.gathered = gathered, io.src = src.data_ptr<int64_t>(), io.gather = gather.data_ptr<int64_t>(), io.read = read.data_ptr<int64_t>();
    reference_padded_read_rows(io);
    CHECK(torch::equal(read, padded_read_rows(src, gather)));
    CHECK(torch::equal(read.masked_select(src < 0), torch::full({(src < 0).sum().item<int64_t>()}, -1, torch::kInt64)));
    for (const int64_t bad : {gathered, int64_t{-2}}) {
      src[3] = bad;
      CHECK(test::thrown_message([&] { reference_padded_read_rows(io); }) ==
            "padded read rows: src[3] = " + std::to_string(bad) + ", outside -1.." + std::to_string(gathered - 1));
    }
  }
}

TEST_CASE("WGRAD's padded segments: the CPU reference equals the LibTorch composition", "[moe]") {
  for (const int64_t E : {1, 3, 32, 64})
    for (const int64_t align : {16, 32})
      for (const int64_t rht : {0, 16})
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          INFO("E " << E << " align " << align << " rht " << rht << " seed " << seed);
          const torch::Tensor ends = test::random_segment_ends(E, 70, static_cast<int64_t>(seed * 100) + E);
          const int64_t rows = ends[E - 1].item<int32_t>();
          const GroupedRows c = padded_segment_rows(ends, rows, align, rht);
          REQUIRE(c.rows == rows + E * (align - 1));
          std::vector<int32_t> lens(static_cast<size_t>(E)), pends(static_cast<size_t>(E));
          std::vector<int64_t> src(static_cast<size_t>(c.rows));
          PaddedSegmentsIO io;
          io.experts = E, io.rows = c.rows, io.align = align, io.rht = rht;
          io.ends = ends.data_ptr<int32_t>(), io.lens = lens.data(), io.padded_ends = pends.data(), io.src = src.data();
          reference_padded_segments(io);
          auto as_tensor = [](auto& v, torch::ScalarType t) { return torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, t); };
          CHECK(torch::equal(c.lens.to(torch::kInt32), as_tensor(lens, torch::kInt32)));
          CHECK(torch::equal(c.ends, as_tensor(pends, torch::kInt32)));
          CHECK(torch::equal(c.src, as_tensor(src, torch::kInt64)));
          // Each source row once, in order within its segment, every segment starting on a multiple of align.
          const torch::Tensor kept = c.src.masked_select(c.src >= 0);
          CHECK(torch::equal(kept, torch::arange(rows, torch::kInt64)));
          CHECK((c.ends.remainder(align) == 0).all().item<bool>());
        }
}
