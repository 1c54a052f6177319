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
  torch::manual_seed(7);
  const int64_t T = 40, k = 3, E = 6;
  torch::Tensor idx = std::get<1>(torch::rand({T, E}).topk(k, -1));
  torch::Tensor w = torch::rand({T, k});
  for (int64_t capacity : {0, 5, 1000}) {
    INFO("capacity " << capacity);
    const Routing r = route(idx, w, E, capacity);
    const int64_t A = T * k;
    REQUIRE(r.order.size(0) == A);
    CHECK(torch::equal(r.order.index_select(0, r.inverse), torch::arange(A)));
    // Slots of each token in ascending expert order, weights moved with them.
    torch::Tensor ids = std::get<0>(idx.sort(-1));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = ids[t][j].item<int64_t>();
        int64_t slot = 0;
        while (idx[t][slot].item<int64_t>() != e) ++slot;
        CHECK(r.weights[t][j].item<float>() == w[t][slot].item<float>());
      }
    const torch::Tensor ends = r.host_ends();
    int64_t start = 0, kept = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t end = ends[e].item<int64_t>();
      // Expert e's segment: its assignments in token order, the first `capacity` of them.
      std::vector<int64_t> expected;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j)
          if (ids[t][j].item<int64_t>() == e) expected.push_back(t * k + j);
      if (capacity > 0 && static_cast<int64_t>(expected.size()) > capacity) expected.resize(capacity);
      REQUIRE(end - start == static_cast<int64_t>(expected.size()));
      for (int64_t i = 0; i < end - start; ++i) CHECK(r.order[start + i].item<int64_t>() == expected[i]);
      kept += end - start;
      start = end;
    }
    if (capacity == 0) {
      CHECK(!r.kept.defined());
      CHECK(kept == A);
    } else {
      CHECK(r.kept.sum().item<int64_t>() == kept);
      CHECK(r.kept.slice(0, 0, kept).all().item<bool>());
    }
  }
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
