// The quantized linear layer: exact when nothing is quantized, the right operands quantized along the
// right dimension for each GEMM, SR on dY unbiased, CPU == CUDA operands.
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "harness/io/array_io.h"
#include "harness/train/capture_file.h"
#include "models/quant_linear.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

std::string temp_recipe(const std::string& text) {
  std::string p = test::temp_dir() + "/r.toml";
  std::ofstream(p) << text;
  return p;
}

std::shared_ptr<LayerQuant> make_layer(const Recipe& r, const std::string& name = "layers.0.mlp.linear_fc1", uint64_t run_seed = 7) {
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = r;
  ctx->run_seed = run_seed;
  auto L = std::make_shared<LayerQuant>();
  L->name = name;
  L->layer_id = 3;
  L->ctx = ctx;
  L->bf16 = r.layer_is_bf16(name, -1, 0);
  return L;
}

struct Grads {
  torch::Tensor y, dx, dw, db;
};

Grads run_layer(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0, const torch::Tensor& dy,
                const std::shared_ptr<LayerQuant>& L) {
  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  torch::Tensor b = b0.defined() ? b0.clone().requires_grad_(true) : torch::Tensor();
  torch::Tensor y = L ? quant_linear(x, w, b, L) : torch::nn::functional::linear(x, w, b);
  y.backward(dy);
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : torch::Tensor()};
}

void check_same(const Grads& a, const Grads& b) {
  CHECK(test::first_bit_mismatch(a.y, b.y) == -1);
  CHECK(test::first_bit_mismatch(a.dx, b.dx) == -1);
  CHECK(test::first_bit_mismatch(a.dw, b.dw) == -1);
  if (a.db.defined()) CHECK(test::first_bit_mismatch(a.db, b.db) == -1);
}

}  // namespace

TEST_CASE("nothing quantized: output and every gradient equal LibTorch's linear exactly", "[linear]") {
  auto L = make_layer(Recipe::load("bf16"));
  torch::manual_seed(0);
  for (bool three_d : {false, true})
    for (bool with_bias : {false, true}) {
      torch::Tensor x = three_d ? torch::randn({4, 24, 64}) : torch::randn({96, 64});
      torch::Tensor w = torch::randn({48, 64}), b = with_bias ? torch::randn({48}) : torch::Tensor();
      torch::Tensor dy = three_d ? torch::randn({4, 24, 48}) : torch::randn({96, 48});
      INFO("3d " << three_d << " bias " << with_bias);
      check_same(run_layer(x, w, b, dy, L), run_layer(x, w, b, dy, nullptr));
    }
}

TEST_CASE("RHT alone (no quantization) equals linear within FP32 rounding", "[linear]") {
  auto L = make_layer(Recipe::load(temp_recipe("extends = \"bf16\"\n[fprop]\nrht = 16\n[dgrad]\nrht = 16\n[wgrad]\nrht = 64\n")));
  torch::manual_seed(1);
  torch::Tensor x = torch::randn({128, 64}), w = torch::randn({32, 64}), b = torch::randn({32}), dy = torch::randn({128, 32});
  Grads a = run_layer(x, w, b, dy, L), r = run_layer(x, w, b, dy, nullptr);
  // Each rotated element carries at most log2(n) + 1 FP32 roundings (<= 7 * 2^-24 relative); a GEMM
  // over K products then differs from the unrotated one by a few ulps of its largest terms: 1e-5 of
  // the largest output bounds that with room.
  auto close = [](const torch::Tensor& u, const torch::Tensor& v) {
    return ((u - v).abs().max() / v.abs().max()).item<double>() < 1e-5;
  };
  CHECK(close(a.y, r.y));
  CHECK(close(a.dx, r.dx));
  CHECK(close(a.dw, r.dw));
  CHECK(test::first_bit_mismatch(a.db, r.db) == -1);
  CHECK(!torch::equal(a.y, r.y));  // the rotation did run
}

TEST_CASE("each GEMM quantizes its operands along its reduction dimension, with the layer's keys", "[linear]") {
  for (const char* name : {"e2m1_ref", "ufp4", "nvfp4_nvidia", "mxfp4"}) {
    Recipe r = Recipe::load(name);
    auto L = make_layer(r);
    L->ctx->step = 11;
    torch::manual_seed(2);
    torch::Tensor x = torch::randn({2, 64, 128}), w = torch::randn({96, 128}), b = torch::randn({96}), dy = torch::randn({2, 64, 96});
    Grads got = run_layer(x, w, b, dy, L);
    // The same computation spelled out with the quantizer.
    auto q = [&](const torch::Tensor& t, Gemm g, int slot, bool col) {
      QuantizeOptions o;
      o.columnwise = col;
      return quantize(t, operand_spec(*L, g, slot, 11), o).dequant;
    };
    torch::Tensor x2 = x.reshape({-1, 128}), dy2 = dy.reshape({-1, 96});
    torch::Tensor y = torch::nn::functional::linear(q(x2, Gemm::kFprop, 0, false), q(w, Gemm::kFprop, 1, false), b).view({2, 64, 96});
    torch::Tensor dx = q(dy2, Gemm::kDgrad, 0, false).mm(q(w, Gemm::kDgrad, 1, true).t()).view({2, 64, 128});
    torch::Tensor dw = q(dy2, Gemm::kWgrad, 0, true).mm(q(x2, Gemm::kWgrad, 1, true).t());
    INFO(name);
    CHECK(test::first_bit_mismatch(got.y, y) == -1);
    CHECK(test::first_bit_mismatch(got.dx, dx) == -1);
    CHECK(test::first_bit_mismatch(got.dw, dw) == -1);
    // And the rotation cancels: the gradients stay close to the exact ones (4-bit error, not noise).
    Grads exact = run_layer(x, w, b, dy, nullptr);
    CHECK(((got.dx - exact.dx).norm() / exact.dx.norm()).item<double>() < 0.3);
    CHECK(((got.dw - exact.dw).norm() / exact.dw.norm()).item<double>() < 0.3);
    CHECK(((got.y - exact.y).norm() / exact.y.norm()).item<double>() < 0.3);
  }
}

TEST_CASE("layers the policy keeps in BF16 are not quantized", "[linear]") {
  auto L = make_layer(Recipe::load("ufp4"), "lm_head");
  CHECK(L->bf16);
  torch::manual_seed(3);
  torch::Tensor x = torch::randn({32, 64}), w = torch::randn({16, 64}), dy = torch::randn({32, 16});
  check_same(run_layer(x, w, torch::Tensor(), dy, L), run_layer(x, w, torch::Tensor(), dy, nullptr));
}

TEST_CASE("SR on dY: the mean of dX and dW over many draws converges to the unquantized-dY result", "[linear]") {
  auto L = make_layer(Recipe::load(temp_recipe(R"(
[defaults]
quantize = false
grid = "e2m1"
[dgrad]
dy = { quantize = true, rounding = "sr" }
[wgrad]
dy = { quantize = true, rounding = "sr" }
)")));
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({64, 32}), w = torch::randn({48, 32}), dy = torch::randn({64, 48});
  Grads exact = run_layer(x, w, torch::Tensor(), dy, nullptr);
  const int draws = 400;
  torch::Tensor sx = torch::zeros_like(exact.dx, torch::kFloat64), sx2 = sx.clone();
  torch::Tensor sw = torch::zeros_like(exact.dw, torch::kFloat64), sw2 = sw.clone();
  for (int k = 0; k < draws; ++k) {
    L->ctx->step = k;
    Grads g = run_layer(x, w, torch::Tensor(), dy, L);
    sx += g.dx.to(torch::kFloat64); sx2 += g.dx.to(torch::kFloat64).pow(2);
    sw += g.dw.to(torch::kFloat64); sw2 += g.dw.to(torch::kFloat64).pow(2);
  }
  auto within = [&](const torch::Tensor& s, const torch::Tensor& s2, const torch::Tensor& ref) {
    torch::Tensor mean = s / draws, sd = (s2 / draws - mean.pow(2)).clamp_min(0).sqrt();
    torch::Tensor z = (mean - ref.to(torch::kFloat64)).abs() / (sd / std::sqrt(static_cast<double>(draws)) + 1e-12);
    return (z <= 4).to(torch::kFloat64).mean().item<double>();
  };
  CHECK(within(sx, sx2, exact.dx) >= 0.999);
  CHECK(within(sw, sw2, exact.dw) >= 0.999);
  // Draws differ from step to step (the key includes the step).
  L->ctx->step = 0;
  Grads a = run_layer(x, w, torch::Tensor(), dy, L);
  L->ctx->step = 1;
  CHECK(!torch::equal(a.dx, run_layer(x, w, torch::Tensor(), dy, L).dx));
}

TEST_CASE("capture writes operands before and after quantization; telemetry records alpha", "[linear]") {
  std::string dir = test::temp_dir();
  auto L = make_layer(Recipe::load("ufp4"));
  L->ctx->capture = std::make_shared<OperandCapture>(std::set<int64_t>{5}, std::vector<std::string>{"*linear_fc1"});
  L->ctx->telemetry = true;
  L->ctx->step = 5;
  torch::manual_seed(5);
  run_layer(torch::randn({32, 64}), torch::randn({16, 64}), torch::Tensor(), torch::randn({32, 16}), L);
  CHECK(L->ctx->capture->pending().size() == 6);
  std::string path = write_capture(dir, 5, L->ctx->capture->take());
  CHECK(L->ctx->capture->pending().empty());
  ArrayF32 a = read_h5_f32(path, "layers.0.mlp.linear_fc1/wgrad.x/after");
  CHECK(a.shape == std::vector<int64_t>{64, 32});  // X quantized along tokens, written transposed
  ArrayF32 b = read_h5_f32(path, "layers.0.mlp.linear_fc1/dgrad.w/before");
  CHECK(b.shape == std::vector<int64_t>{64, 16});
  CHECK(L->ctx->alpha.size() == 6);
  for (const auto& kv : L->ctx->alpha) CHECK(std::fabs(kv.second - 1.0) < 0.1);
}

TEST_CASE("CUDA == CPU: the linear layer's quantized operands, bit for bit", "[linear][cuda]") {
  UFP4_NEED_GPU();
  for (const char* name : {"e2m1_ref", "ufp4", "nvfp4_nvidia"}) {
    std::map<std::string, torch::Tensor> after[2];
    torch::manual_seed(6);
    torch::Tensor x = torch::randn({256, 128}), w = torch::randn({192, 128}), dy = torch::randn({256, 192});
    for (int dev = 0; dev < 2; ++dev) {
      auto L = make_layer(Recipe::load(name));
      L->ctx->step = 9;
      L->ctx->capture = std::make_shared<OperandCapture>(std::set<int64_t>{9}, std::vector<std::string>{});
      torch::Device d = dev ? torch::kCUDA : torch::kCPU;
      run_layer(x.to(d), w.to(d), torch::Tensor(), dy.to(d), L);
      for (const auto& kv : L->ctx->capture->pending()) after[dev][kv.first] = kv.second.second;
    }
    REQUIRE(after[0].size() == 6);
    for (const auto& kv : after[0]) {
      INFO(name << " " << kv.first);
      // CUDA feeds its BF16 GEMM with BF16 dequantized values: the CPU's FP32 values rounded (RNE).
      CHECK(test::first_bit_mismatch(kv.second.to(torch::kBFloat16).to(torch::kFloat32), after[1][kv.first]) == -1);
    }
  }
}

TEST_CASE("one read of X, dY and W for both layouts gives the bits of one layout at a time", "[linear][cuda]") {
  UFP4_NEED_GPU();
  // Outputs, gradients, telemetry and captured operands, with the pair kernel (pair_operands) and without.
  for (const char* name : {"ufp4", "e2m1_ref", "nvfp4_nvidia"})
    for (bool bf16_x : {true, false}) {
      torch::manual_seed(12);
      torch::Tensor x = torch::randn({256, 128}).cuda(), w = torch::randn({192, 128}).cuda(), dy = torch::randn({256, 192}).cuda();
      if (bf16_x) x = x.to(torch::kBFloat16), dy = dy.to(torch::kBFloat16);  // the training path's activations
      Grads g[2];
      std::map<std::string, double> alpha[2];
      OperandCapture::Operands cap[2];
      for (int pair = 0; pair < 2; ++pair) {
        auto L = make_layer(Recipe::load(name));
        L->ctx->pair_operands = pair == 1;
        L->ctx->step = 4;
        L->ctx->telemetry = true;
        L->ctx->capture = std::make_shared<OperandCapture>(std::set<int64_t>{4}, std::vector<std::string>{});
        g[pair] = run_layer(x, w, torch::Tensor(), dy, L);
        alpha[pair] = L->ctx->alpha;
        cap[pair] = L->ctx->capture->take();
        if (pair == 1 && std::string(name) == "ufp4") {  // the pair kernel does run here (BF16 dY: SR pairs too)
          CHECK(quantize_pair_fused(w, operand_spec(*L, Gemm::kFprop, 1, 4), operand_spec(*L, Gemm::kDgrad, 1, 4)));
          if (bf16_x) CHECK(quantize_pair_fused(dy, operand_spec(*L, Gemm::kDgrad, 0, 4), operand_spec(*L, Gemm::kWgrad, 0, 4)));
        }
      }
      INFO(name << (bf16_x ? " bf16" : " f32"));
      check_same(g[0], g[1]);
      CHECK(alpha[0] == alpha[1]);
      REQUIRE(cap[0].size() == cap[1].size());
      for (const auto& kv : cap[0]) {
        INFO(kv.first);
        REQUIRE(cap[1].count(kv.first));
        CHECK(test::first_bit_mismatch(kv.second.first, cap[1][kv.first].first) == -1);
        if (kv.second.second.defined()) CHECK(test::first_bit_mismatch(kv.second.second, cap[1][kv.first].second) == -1);
      }
    }
}

TEST_CASE("keys: SR keys per layer and step, RHT signs shared / per layer / per step", "[linear]") {
  Recipe r = Recipe::load("ufp4");
  auto a = make_layer(r), b = make_layer(r);
  b->layer_id = 4;
  QuantSpec a1 = operand_spec(*a, Gemm::kDgrad, 0, 10), a2 = operand_spec(*a, Gemm::kDgrad, 0, 10);
  CHECK(a1.seed == a2.seed);
  CHECK(a1.offset == a2.offset);  // a resumed run at step 10 draws the same bits
  CHECK(operand_spec(*a, Gemm::kDgrad, 0, 11).offset != a1.offset);
  CHECK(operand_spec(*a, Gemm::kWgrad, 0, 10).offset != a1.offset);
  CHECK(operand_spec(*b, Gemm::kDgrad, 0, 10).seed != a1.seed);
  // Both operands of a GEMM share the signs, so the rotation cancels.
  CHECK(operand_spec(*a, Gemm::kDgrad, 1, 10).rht_seed == a1.rht_seed);
  CHECK(operand_spec(*b, Gemm::kDgrad, 0, 10).rht_seed == a1.rht_seed);  // shared
  a->ctx->recipe.rht_signs = b->ctx->recipe.rht_signs = "per_layer";
  CHECK(operand_spec(*b, Gemm::kDgrad, 0, 10).rht_seed != operand_spec(*a, Gemm::kDgrad, 0, 10).rht_seed);
  CHECK(operand_spec(*a, Gemm::kDgrad, 0, 11).rht_seed == operand_spec(*a, Gemm::kDgrad, 0, 10).rht_seed);
  a->ctx->recipe.rht_signs = "per_step";
  CHECK(operand_spec(*a, Gemm::kDgrad, 0, 11).rht_seed != operand_spec(*a, Gemm::kDgrad, 0, 10).rht_seed);
  // The run seed re-draws the signs (seed 1 keeps the recipe's), and the SR stream.
  CHECK(rht_sign_seed(r.seed, 1) == r.seed);
  CHECK(rht_sign_seed(r.seed, 2) != r.seed);
  CHECK(rht_sign_seed(r.seed, 2) != rht_sign_seed(r.seed, 3));
  auto s2 = make_layer(r, "layers.0.mlp.linear_fc1", 8);
  s2->ctx->recipe.rht_signs = a->ctx->recipe.rht_signs = "shared";
  CHECK(operand_spec(*s2, Gemm::kDgrad, 0, 10).rht_seed != operand_spec(*a, Gemm::kDgrad, 0, 10).rht_seed);
  CHECK(operand_spec(*s2, Gemm::kDgrad, 0, 10).seed != operand_spec(*a, Gemm::kDgrad, 0, 10).seed);
}

TEST_CASE("BF16 rounding of dequantized operands moves results far less than 4-bit quantization does", "[linear][cuda]") {
  UFP4_NEED_GPU();
  // With FP32 block scales, q * s needs up to 24 bits; BF16 keeps 8 (<= 2^-9 relative per element).
  // The BF16 GEMM's effect must be small against the quantization error itself.
  for (const char* name : {"e2m1_ref", "ufp4"}) {
    torch::manual_seed(8);
    torch::Tensor x = torch::randn({512, 256}).cuda(), w = torch::randn({384, 256}).cuda(), dy = torch::randn({512, 384}).cuda();
    Recipe r = Recipe::load(name);
    auto lb = make_layer(r);
    r.gemm_precision = "fp32";
    auto lf = make_layer(r);
    Grads gb = run_layer(x, w, torch::Tensor(), dy, lb), gf = run_layer(x, w, torch::Tensor(), dy, lf);
    Grads exact = run_layer(x.cpu(), w.cpu(), torch::Tensor(), dy.cpu(), nullptr);
    auto ratio = [](const torch::Tensor& bf, const torch::Tensor& f32, const torch::Tensor& ex) {
      torch::Tensor f = f32.cpu().to(torch::kFloat64), b = bf.cpu().to(torch::kFloat64), e = ex.to(torch::kFloat64);
      return ((b - f).norm() / (f - e).norm()).item<double>();
    };
    INFO(name);
    CHECK(ratio(gb.y, gf.y, exact.y) < 0.05);
    CHECK(ratio(gb.dx, gf.dx, exact.dx) < 0.05);
    CHECK(ratio(gb.dw, gf.dw, exact.dw) < 0.05);
  }
}

TEST_CASE("RHT along tokens pads a partial segment with zero rows, exactly", "[linear]") {
  // 40 tokens: WGRAD's rotation along tokens needs whole 16-segments; padding must not change dW.
  auto L = make_layer(Recipe::load(temp_recipe("extends = \"bf16\"\n[wgrad]\nrht = 16\n")));
  torch::manual_seed(9);
  torch::Tensor x = torch::randn({40, 32}), w = torch::randn({24, 32}), dy = torch::randn({40, 24});
  Grads a = run_layer(x, w, torch::Tensor(), dy, L), r = run_layer(x, w, torch::Tensor(), dy, nullptr);
  CHECK(((a.dw - r.dw).abs().max() / r.dw.abs().max()).item<double>() < 1e-5);
  CHECK(test::first_bit_mismatch(a.dx, r.dx) == -1);
}
