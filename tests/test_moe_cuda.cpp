// The MoE layer on the GPU: expert by expert (telemetry and capture steps) it equals the per-expert
// formulation bit for bit; grouped, its quantized operands equal the per-expert operands bit for bit,
// its GEMMs agree with per-expert cuBLAS GEMMs to BF16 rounding, reruns repeat bit for bit, and
// forward and backward run without one host synchronisation.
#include <torch/torch.h>

#include "harness/train/determinism.h"
#include "kernels/moe/padded_segments.h"
#include "models/grouped_linear.h"
#include "models/moe.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"
#include "tests/moe_reference.h"
#ifdef UFP4_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

using namespace ufp4;

namespace {

// Whether this LibTorch runs grouped GEMMs; warns where not (the layer then loops over experts on the host).
bool grouped_or_warn() {
  if (grouped_mm_available()) return true;
  WARN("this LibTorch has no grouped GEMM: the MoE layer loops over experts on the host, skipped");
  return false;
}

// Layer 1 of c under `recipe` on the GPU, seeded alike in every test.
Moe gpu_moe(const ModelConfig& c, const char* recipe, int64_t step = 0) {
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = Recipe::load(recipe);
  ctx->step = step;
  int64_t id = 0;
  torch::manual_seed(3);
  Moe m(c, "layers.1.mlp", ctx, id, 1);
  m->to(torch::kCUDA);
  return m;
}

}  // namespace

TEST_CASE("routing on the GPU: the same layout as its definition", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  test::check_routing(torch::kCUDA);
}

TEST_CASE("routing's inverse permutations on the GPU: one kernel, the CPU reference's integers", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  test::check_inverse_permutation(torch::kCUDA);
}

TEST_CASE("routing's counting sort by expert on the GPU: the CPU reference's integers bit for bit", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  test::check_expert_sort(torch::kCUDA);
}

TEST_CASE("the router's top k on the GPU: topk's pairs and gradient bit for bit, the kernel's order the reference's", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  test::check_top_k_experts(torch::kCUDA);
}

TEST_CASE("MoE on the GPU: quantized operands equal the per-expert formulation; grouped BF16 GEMMs agree", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  for (double cf : {0.0, 0.75}) {
    ModelConfig c = model_config("tiny-moe");
    c.capacity_factor = cf;
    for (const char* recipe : {"e2m1_ref", "ufp4", "nvfp4_nvidia"}) {
      INFO(recipe << " capacity factor " << cf);
      const test::MoeComparison m = test::compare_moe(c, recipe, torch::kCUDA, torch::kBFloat16, true);
      INFO("output rel " << m.output_rel << ", expert gradients rel " << m.expert_grad_rel << ", operands " << m.operands);
      CHECK(m.bit_mismatches() == "");
    }
    INFO("bf16, grouped GEMMs, capacity factor " << cf);
    const test::MoeComparison m = test::compare_moe(c, "bf16", torch::kCUDA, torch::kBFloat16, true, /*observe=*/false);
    // Another GEMM kernel (CUTLASS grouped vs cuBLAS), both accumulating in FP32 and rounding to BF16:
    // a few BF16 ulps (2^-8 relative) apart.
    CHECK(m.output_rel < 2e-2);
    CHECK(m.expert_grad_rel < 2e-2);
    CHECK(m.idle_expert_grads_zero);
    CHECK(m.input_grad_rel < 2e-2);
    for (const char* recipe : {"e2m1_ref", "ufp4", "mxfp4"}) {
      INFO(recipe << ", grouped quantized GEMMs, capacity factor " << cf);
      const test::MoeComparison q = test::compare_moe(c, recipe, torch::kCUDA, torch::kBFloat16, true, /*observe=*/false);
      INFO("output rel " << q.output_rel << ", expert gradients rel " << q.expert_grad_rel << ", input gradient rel " << q.input_grad_rel);
      // The operands are equal (next test); the GEMMs round differently by a BF16 ulp, and an ulp in fc1's
      // output can move fc2's input to the neighbouring 4-bit level: up to one level step (a quarter to
      // a half of the block's scale on the E2M1 and E1M2 grids) on a few elements, not more.
      CHECK(q.output_rel < 0.1);
      CHECK(q.expert_grad_rel < 0.1);
      CHECK(q.idle_expert_grads_zero);
      CHECK(q.input_grad_rel < 0.1);
    }
  }
}

TEST_CASE("MoE on the GPU: grouped quantized operands equal the per-expert operands bit for bit", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  for (const char* name : {"e2m1_ref", "ufp4", "nvfp4_nvidia", "mxfp4", "ufp4_int4"}) {
    INFO(name);
    const test::OperandComparison c = test::compare_grouped_operands(Recipe::load(name), torch::kCUDA);
    CHECK(c.mismatches == "");
    CHECK(c.operands > 30);
    // The recipes on the hot arithmetic (1x16 blocks, FP32 scales, RHT 16 or none) read X and dY once each.
    if (std::string(name) == "ufp4" || std::string(name) == "e2m1_ref") CHECK(c.pairs_fused == 2);
  }
}

TEST_CASE("MoE on the GPU: an expert linear routed no rows gives empty outputs and a zero weight gradient", "[moe][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  for (const char* name : {"bf16", "e2m1_ref", "ufp4", "nvfp4_nvidia", "mxfp4", "ufp4_int4"}) {
    INFO(name);
    CHECK(test::grouped_linear_without_rows(Recipe::load(name), torch::kCUDA) == "");
  }
}

TEST_CASE("MoE on the GPU: no host synchronisation in forward and backward; reruns bit-identical", "[moe][cuda]") {
  UFP4_NEED_GPU();
#ifdef UFP4_WITH_CUDA
  if (!grouped_or_warn()) return;
  set_deterministic(true);
  for (const char* recipe : {"bf16", "ufp4", "e2m1_ref"})
  for (double cf : {0.0, 0.75}) {
    INFO(recipe << ", capacity factor " << cf);
    ModelConfig c = model_config("tiny-moe");
    c.capacity_factor = cf;
    Moe m = gpu_moe(c, recipe);
    torch::Tensor x0 = torch::randn({4, 32, c.d_model}).to(torch::kCUDA, torch::kBFloat16);
    torch::Tensor g = torch::randn({4, 32, c.d_model}).to(torch::kCUDA, torch::kBFloat16);
    std::vector<torch::Tensor> first;
    for (int rep = 0; rep < 3; ++rep) {
      for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
      torch::Tensor x = x0.clone().requires_grad_(true);
      // The first pass warms up (allocations, kernel selection); the next two run under the check.
      if (rep > 0) c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
      torch::Tensor y;
      try {
        y = m->forward(x);
        (y * g).sum().backward();
      } catch (...) {
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
        FAIL("a host synchronisation in the MoE layer (pass " << rep << ")");
      }
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      std::vector<torch::Tensor> now = {y.cpu(), x.grad().cpu(), m->router.grad().cpu(), m->fc1->weight.grad().cpu(),
                                        m->fc2->weight.grad().cpu(), m->aux_loss.cpu()};
      if (rep == 0) first = now;
      for (size_t i = 0; i < now.size(); ++i) CHECK(torch::equal(now[i], first[i]));
    }
  }
#endif
}

TEST_CASE("WGRAD's padded segments on the GPU: one launch, the composition's integers", "[moe][cuda]") {
  UFP4_NEED_GPU();
  // The device path (kernels/moe/padded_segments.h) against the CPU composition, bit for bit; 1024 experts is
  // the kernel's limit.
  for (const int64_t E : {1, 5, 32, 1024})
    for (const int64_t align : {16, 64})
      for (const int64_t rht : {0, 16}) {
        INFO("E " << E << " align " << align << " rht " << rht);
        const torch::Tensor ends = test::random_segment_ends(E, 300, E + align + rht);
        const int64_t rows = ends[E - 1].item<int32_t>();
        const GroupedRows cpu = padded_segment_rows(ends, rows, align, rht);
        const GroupedRows gpu = padded_segment_rows(ends.to(torch::kCUDA), rows, align, rht);
        REQUIRE(gpu.src.is_cuda());
        CHECK(gpu.rows == cpu.rows);
        CHECK(torch::equal(gpu.lens.cpu(), cpu.lens.to(torch::kInt32)));
        CHECK(torch::equal(gpu.ends.cpu(), cpu.ends));
        CHECK(torch::equal(gpu.src.cpu(), cpu.src));
      }
}

TEST_CASE("WGRAD's padded read rows on the GPU: the CPU reference's integers", "[moe][cuda]") {
  UFP4_NEED_GPU();
  torch::manual_seed(6);
  const torch::Tensor none = torch::empty({0}, torch::TensorOptions().dtype(torch::kInt64).device(torch::kCUDA));
  CHECK(padded_read_rows(none, torch::arange(5, none.options())).numel() == 0);
  for (const int64_t gathered : {0, 1, 7, 3000, 1 << 20}) {  // 2^20 + 40 rows: the kernel's grid-stride loop past its 1024 blocks
    INFO("gathered " << gathered);
    const int64_t rows = gathered + 40;
    torch::Tensor src = torch::randint(-1, gathered, {rows}, torch::kInt64), gather = torch::randint(0, 1 << 20, {gathered}, torch::kInt64);
    torch::Tensor read = torch::empty({rows}, torch::kInt64);
    PaddedReadRowsIO io;
    io.rows = rows, io.gathered = gathered, io.src = src.data_ptr<int64_t>(), io.gather = gather.data_ptr<int64_t>(), io.read = read.data_ptr<int64_t>();
    reference_padded_read_rows(io);
    const torch::Tensor gpu = padded_read_rows(src.to(torch::kCUDA), gather.to(torch::kCUDA));
    REQUIRE(gpu.is_cuda());
    CHECK(torch::equal(gpu.cpu(), read));
  }
}

TEST_CASE("MoE on the GPU: fc1 reading the tokens through the dispatch's gather gives the bits of dispatching first", "[moe][cuda]") {
  UFP4_NEED_GPU();
#ifdef UFP4_WITH_CUDA
  if (!grouped_or_warn()) return;
  set_deterministic(true);
  for (const char* recipe : {"ufp4", "e2m1_ref", "bf16"})
    for (double cf : {0.0, 0.75}) {
      INFO(recipe << ", capacity factor " << cf);
      ModelConfig c = model_config("tiny-moe");
      c.capacity_factor = cf;
      std::vector<torch::Tensor> out[2];
      bool gathered[2] = {false, false};
      torch::Tensor x0 = torch::randn({4, 32, c.d_model}).to(torch::kCUDA, torch::kBFloat16);
      torch::Tensor g = torch::randn({4, 32, c.d_model}).to(torch::kCUDA, torch::kBFloat16);
      for (int allow = 0; allow < 2; ++allow) {
        Moe m = gpu_moe(c, recipe, 2);
        m->fc1->allow_gathered = allow == 1;
        torch::Tensor x = x0.clone().requires_grad_(true);
        gathered[allow] = m->fc1->reads_gathered(x0.view({-1, c.d_model}));
        torch::Tensor y = m->forward(x);
        (y * g).sum().backward();
        out[allow] = {y.cpu(), x.grad().cpu(), m->router.grad().cpu(), m->fc1->weight.grad().cpu(), m->fc2->weight.grad().cpu()};
      }
      // The 4-bit recipes quantize fc1's X with the segmented pair kernel: the gathered read applies; bf16 dispatches.
      CHECK_FALSE(gathered[0]);
      CHECK(gathered[1] == (std::string(recipe) != "bf16"));
      for (size_t i = 0; i < out[0].size(); ++i) {
        INFO("output " << i);
        CHECK(test::first_bit_mismatch(out[0][i], out[1][i]) == -1);
      }
    }
#endif
}
