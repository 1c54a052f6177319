// Fused RMSNorm and cross entropy: the maths against LibTorch's composition (CPU, tolerance: a
// different summation order), exp/log against double precision, and the CUDA kernels against the CPU
// reference bit for bit (the reduction order is part of the contract, kernels/fused/fused_kernels.h).
#include <torch/torch.h>

#include <array>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "kernels/fused/fused_kernels.h"
#include "models/fused_ops.h"
#include "models/layers.h"
#include "models/transformer.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

torch::Tensor rms_norm_composed(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  torch::Tensor xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps) * w).to(x.scalar_type());
}

// Max |a - b| / (atol + rtol |b|) over elements: <= 1 passes.
double worst(const torch::Tensor& a, const torch::Tensor& b, double atol, double rtol) {
  torch::Tensor a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return ((a64 - b64).abs() / (atol + rtol * b64.abs())).max().item<double>();
}

// Distance in units in the last place of FP32 between a float and the exact value.
double ulps(float got, double exact) {
  const float e = static_cast<float>(exact);
  const float ulp = std::nextafter(std::fabs(e), std::numeric_limits<float>::infinity()) - std::fabs(e);
  return std::fabs(static_cast<double>(got) - exact) / ulp;
}

}  // namespace

TEST_CASE("exp_f32 and log_f32: within 2 ulp of double precision, exact where it must be", "[fused]") {
  double worst_exp = 0, worst_log = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 200000.0f;  // normal results
    worst_exp = std::max(worst_exp, ulps(exp_f32(x), std::exp(static_cast<double>(x))));
    const float y = std::ldexp(1.0f + static_cast<float>(i % 1000) / 1000.0f, i % 60);
    worst_log = std::max(worst_log, ulps(log_f32(y), std::log(static_cast<double>(y))) * (std::log(y) < 1e-30 ? 0 : 1));
  }
  INFO("exp worst " << worst_exp << " ulp, log worst " << worst_log << " ulp");
  CHECK(worst_exp <= 2.0);
  CHECK(worst_log <= 2.0);
  CHECK(exp_f32(0.0f) == 1.0f);
  CHECK(exp_f32(-INFINITY) == 0.0f);
  CHECK(exp_f32(-200.0f) == 0.0f);
  CHECK(std::isinf(exp_f32(89.0f)));
  CHECK(std::isnan(exp_f32(NAN)));
  CHECK(exp_f32(-100.0f) > 0.0f);  // subnormal, not flushed
  CHECK(std::fabs(exp_f32(-100.0f) - std::exp(-100.0)) <= std::ldexp(1.0, -149));  // within one subnormal step
  CHECK(log_f32(1.0f) == 0.0f);
  CHECK(std::isinf(log_f32(INFINITY)));
  CHECK(std::isnan(log_f32(0.5f)));
  CHECK(max_nan(-0.0f, 0.0f) == 0.0f);
  CHECK(!std::signbit(max_nan(-0.0f, 0.0f)));
  CHECK(!std::signbit(max_nan(0.0f, -0.0f)));
  CHECK(std::isnan(max_nan(1.0f, NAN)));
}

TEST_CASE("fused RMSNorm == LibTorch's composition, forward and backward (FP32 and BF16)", "[fused]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (int64_t d : {8, 64, 200, 20}) {
      torch::manual_seed(3);
      torch::Tensor x0 = (torch::randn({3, 13, d}) * 2.5).to(dtype);
      torch::Tensor w0 = torch::rand({d}) + 0.5;
      torch::Tensor g = torch::randn({3, 13, d}).to(dtype);
      torch::Tensor xa = x0.clone().requires_grad_(true), wa = w0.clone().requires_grad_(true);
      torch::Tensor xb = x0.clone().requires_grad_(true), wb = w0.clone().requires_grad_(true);
      torch::Tensor ya = fused_rms_norm(xa, wa, 1e-6), yb = rms_norm_composed(xb, wb, 1e-6);
      (ya.to(torch::kFloat32) * g.to(torch::kFloat32)).sum().backward();
      (yb.to(torch::kFloat32) * g.to(torch::kFloat32)).sum().backward();
      INFO("dtype " << dtype << " d " << d);
      REQUIRE(ya.scalar_type() == dtype);
      REQUIRE(xa.grad().scalar_type() == dtype);
      REQUIRE(wa.grad().scalar_type() == torch::kFloat32);
      // FP32: summation order only (d terms, ~1e-6); BF16 outputs: one BF16 rounding apart at most.
      const bool bf = dtype == torch::kBFloat16;
      CHECK(worst(ya, yb, 1e-6, bf ? 8e-3 : 1e-5) <= 1);
      // dx cancels (r g - x k): compare against the scale of its terms; dw sums 39 rows.
      const double dx_scale = xb.grad().to(torch::kFloat64).abs().max().item<double>();
      CHECK(worst(xa.grad(), xb.grad(), (bf ? 1e-2 : 1e-5) * dx_scale, bf ? 8e-3 : 1e-4) <= 1);
      const double dw_scale = wb.grad().abs().max().item<double>();
      CHECK(worst(wa.grad(), wb.grad(), (bf ? 1e-2 : 1e-5) * dw_scale, 1e-4) <= 1);
    }
}

TEST_CASE("fused cross entropy == LibTorch's, loss and gradient, with ignored rows and a scaled upstream gradient", "[fused]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (int64_t V : {256, 40, 1000}) {
      torch::manual_seed(5);
      torch::Tensor z0 = (torch::randn({37, V}) * 4).to(dtype);
      torch::Tensor t = torch::randint(0, V, {37}, torch::kInt64);
      t.index_put_({torch::indexing::Slice(0, 37, 6)}, -100);  // every sixth row ignored
      torch::Tensor za = z0.clone().requires_grad_(true), zb = z0.clone().requires_grad_(true);
      torch::Tensor la = fused_cross_entropy(za, t), lb = torch::nn::functional::cross_entropy(zb.to(torch::kFloat32), t);
      (la * 3.0).backward();
      (lb * 3.0).backward();
      INFO("dtype " << dtype << " V " << V);
      REQUIRE(la.scalar_type() == torch::kFloat32);
      REQUIRE(za.grad().scalar_type() == dtype);
      CHECK(worst(la, lb, 0, 2e-6) <= 1);
      const bool bf = dtype == torch::kBFloat16;
      CHECK(worst(za.grad(), zb.grad(), 1e-7, bf ? 8e-3 : 1e-5) <= 1);
      // Ignored rows get no gradient.
      CHECK(za.grad().index({torch::indexing::Slice(0, 37, 6)}).abs().sum().item<double>() == 0.0);
    }
  // Every row ignored: NaN loss (as LibTorch's mean over nothing), zero gradient.
  torch::Tensor z = torch::randn({4, 16}).requires_grad_(true);
  torch::Tensor l = fused_cross_entropy(z, torch::full({4}, -100, torch::kInt64));
  CHECK(std::isnan(l.item<float>()));
  l.backward();
  CHECK(z.grad().abs().sum().item<double>() == 0.0);
  // A target outside the vocabulary: NaN, not a read out of bounds.
  CHECK(std::isnan(fused_cross_entropy(torch::randn({2, 16}), torch::tensor({3, 16}, torch::kInt64)).item<float>()));
  CHECK_THROWS_AS(fused_cross_entropy(torch::randn({2, 16}).to(torch::kFloat64), torch::tensor({1, 2}, torch::kInt64)), Error);
  CHECK_THROWS_AS(fused_cross_entropy(torch::randn({2, 16}), torch::tensor({1, 2, 3}, torch::kInt64)), Error);
}

TEST_CASE("fused SwiGLU == LibTorch's silu(g) * u, forward and backward (FP32 and BF16)", "[fused]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    torch::manual_seed(7);
    torch::Tensor gu0 = (torch::randn({2, 9, 2 * 24}) * 4).to(dtype);
    torch::Tensor d = torch::randn({2, 9, 24}).to(dtype);
    torch::Tensor a = gu0.clone().requires_grad_(true), b = gu0.to(torch::kFloat32).clone().requires_grad_(true);
    torch::Tensor ya = fused_swiglu(a);
    auto h = b.chunk(2, -1);
    torch::Tensor yb = torch::silu(h[0]) * h[1];  // in FP32: the fused op rounds once, at the end
    (ya.to(torch::kFloat32) * d.to(torch::kFloat32)).sum().backward();
    (yb * d.to(torch::kFloat32)).sum().backward();
    INFO("dtype " << dtype);
    REQUIRE(ya.sizes() == torch::IntArrayRef({2, 9, 24}));
    REQUIRE(ya.scalar_type() == dtype);
    REQUIRE(a.grad().scalar_type() == dtype);
    const bool bf = dtype == torch::kBFloat16;
    // FP32: our exp against the platform's (~1 ulp) through a few roundings; BF16: one final rounding.
    CHECK(worst(ya, yb.to(dtype), 1e-6, bf ? 8e-3 : 1e-5) <= 1);
    CHECK(worst(a.grad(), b.grad().to(dtype), 1e-6, bf ? 8e-3 : 1e-5) <= 1);
  }
  CHECK_THROWS_AS(fused_swiglu(torch::randn({3, 7})), Error);  // odd: no gate and up halves
}

namespace {

// RoPE tables as the model builds them: FP32 [rows, hd / 2].
std::pair<torch::Tensor, torch::Tensor> rope_tables(int64_t rows, int64_t hd) {
  torch::Tensor inv = torch::pow(10000.0, -torch::arange(0, hd, 2, torch::kFloat64) / static_cast<double>(hd));
  torch::Tensor ang = torch::outer(torch::arange(rows, torch::kFloat64), inv);
  return {ang.cos().to(torch::kFloat32), ang.sin().to(torch::kFloat32)};
}

// q and k of a packed qkv activation [B, S, (H + 2 KV) hd], as the attention layer views them.
std::pair<torch::Tensor, torch::Tensor> qk_views(const torch::Tensor& qkv, int64_t H, int64_t KV, int64_t hd) {
  const int64_t B = qkv.size(0), S = qkv.size(1);
  auto parts = qkv.split({H * hd, KV * hd, KV * hd}, -1);
  return {parts[0].view({B, S, H, hd}).transpose(1, 2), parts[1].view({B, S, KV, hd}).transpose(1, 2)};
}

// Fused RoPE and the composition on q and k of the same qkv, forward and backward; "" when every output
// and the qkv gradient agree bit for bit.
std::string rope_vs_composition(const torch::Tensor& qkv0, const torch::Tensor& cos, const torch::Tensor& sin, int64_t H, int64_t KV, int64_t hd) {
  const int64_t S = qkv0.size(1);
  torch::manual_seed(11);
  torch::Tensor a = qkv0.clone().requires_grad_(true), b = qkv0.clone().requires_grad_(true);
  auto [qa, ka] = qk_views(a, H, KV, hd);
  auto [qb, kb] = qk_views(b, H, KV, hd);
  torch::Tensor yqa = fused_rope(qa, cos, sin), yka = fused_rope(ka, cos, sin);
  torch::Tensor c = cos.slice(0, 0, S), sn = sin.slice(0, 0, S);
  torch::Tensor yqb = rope_composition(qb, c, sn), ykb = rope_composition(kb, c, sn);
  // dq on [B, S, H, hd] memory (as attention's backward gives it), dk on [B, H, S, hd] memory: both strides.
  torch::Tensor dq = torch::randn({yqa.size(0), yqa.size(2), yqa.size(1), yqa.size(3)}).to(qkv0.scalar_type()).to(qkv0.device()).transpose(1, 2);
  torch::Tensor dk = torch::randn(yka.sizes()).to(qkv0.scalar_type()).to(qkv0.device());
  torch::autograd::backward({yqa, yka}, {dq, dk});
  torch::autograd::backward({yqb, ykb}, {dq, dk});
  const std::vector<std::string> names = {"q", "k", "dqkv"};
  const std::vector<torch::Tensor> x = {yqa.cpu(), yka.cpu(), a.grad().cpu()}, y = {yqb.cpu(), ykb.cpu(), b.grad().cpu()};
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t at = test::first_bit_mismatch(x[i], y[i]);
    if (at >= 0) return names[i] + ": " + test::describe_mismatch(x[i], y[i], at);
  }
  return "";
}

// The packed-projection RoPE against the composition on the same qkv (q and k rotated, v its view),
// forward and backward with gradients of three layouts; "" when q, k, v and the qkv gradient agree bit for bit.
std::string qkv_rope_vs_composition(const torch::Tensor& qkv0, const torch::Tensor& cos, const torch::Tensor& sin, int64_t H, int64_t KV,
                                    int64_t hd) {
  const int64_t B = qkv0.size(0), S = qkv0.size(1);
  torch::Tensor a = qkv0.clone().requires_grad_(true), b = qkv0.clone().requires_grad_(true);
  std::vector<torch::Tensor> ya = fused_qkv_rope(a, cos, sin, H, KV);
  auto [qb, kb] = qk_views(b, H, KV, hd);
  torch::Tensor c = cos.slice(0, 0, S), sn = sin.slice(0, 0, S);
  torch::Tensor vb = b.split({H * hd, KV * hd, KV * hd}, -1)[2].view({B, S, KV, hd}).transpose(1, 2);
  std::vector<torch::Tensor> yb = {rope_composition(qb, c, sn), rope_composition(kb, c, sn), vb};
  // dq on [B, S, H, hd] memory (as attention's backward gives it), dk on [B, KV, S, hd] memory, dv a
  // slice of a wider tensor: three kinds of strides.
  torch::manual_seed(12);
  auto opt = torch::TensorOptions().dtype(qkv0.scalar_type()).device(qkv0.device());
  torch::Tensor dq = torch::randn({B, S, H, hd}).to(opt).transpose(1, 2);
  torch::Tensor dk = torch::randn({B, KV, S, hd}).to(opt);
  torch::Tensor dv = torch::randn({B, S, KV, 2 * hd}).to(opt).narrow(3, hd, hd).transpose(1, 2);
  torch::autograd::backward(ya, {dq, dk, dv});
  torch::autograd::backward(yb, {dq, dk, dv});
  const std::vector<std::string> names = {"q", "k", "v", "dqkv"};
  const std::vector<torch::Tensor> x = {ya[0].cpu(), ya[1].cpu(), ya[2].cpu(), a.grad().cpu()}, y = {yb[0].cpu(), yb[1].cpu(), yb[2].cpu(), b.grad().cpu()};
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t at = test::first_bit_mismatch(x[i], y[i]);
    if (at >= 0) return names[i] + ": " + test::describe_mismatch(x[i], y[i], at);
  }
  // attention's layout: [B, heads, S, hd] on [B, S, heads, hd] memory
  for (size_t i = 0; i < 3; ++i)
    if (!ya[i].transpose(1, 2).is_contiguous()) return names[i] + ": not on [B, S, heads, hd] memory";
  return "";
}

}  // namespace

TEST_CASE("fused RoPE == LibTorch's composition bit for bit, forward and backward, on q and k views of a packed qkv", "[fused]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (auto hd : {16, 64}) {
      const int64_t B = 2, S = 9, H = 4, KV = 2;
      torch::manual_seed(hd);
      torch::Tensor qkv = (torch::randn({B, S, (H + 2 * KV) * hd}) * 3).to(dtype);
      auto [cos, sin] = rope_tables(S + 3, hd);  // the model's tables are longer than the sequence
      INFO("dtype " << dtype << " hd " << hd);
      CHECK(rope_vs_composition(qkv, cos, sin, H, KV, hd) == "");
    }
  auto [cos, sin] = rope_tables(4, 8);
  CHECK_THROWS_AS(fused_rope(torch::randn({1, 2, 5, 8}), cos, sin), Error);  // tables shorter than the sequence
  CHECK_THROWS_AS(fused_rope(torch::randn({1, 2, 3, 8}).to(torch::kFloat64), cos, sin), Error);
}

TEST_CASE("fused packed-QKV RoPE == LibTorch's composition bit for bit: q, k rotated, v copied, the projection's gradient", "[fused]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (auto shape : std::vector<std::array<int64_t, 4>>{{4, 2, 16, 9}, {6, 2, 64, 5}, {3, 3, 32, 4}, {2, 1, 16, 1}}) {
      const int64_t H = shape[0], KV = shape[1], hd = shape[2], S = shape[3], B = 2;
      torch::manual_seed(hd + S);
      torch::Tensor qkv = (torch::randn({B, S, (H + 2 * KV) * hd}) * 3).to(dtype);
      auto [cos, sin] = rope_tables(S + 3, hd);
      INFO("dtype " << dtype << " H " << H << " KV " << KV << " hd " << hd << " S " << S);
      CHECK(qkv_rope_vs_composition(qkv, cos, sin, H, KV, hd) == "");
    }
  auto [cos, sin] = rope_tables(4, 16);
  CHECK_FALSE(fused_qkv_rope_applies(torch::randn({1, 3, 7 * 16}), cos, sin, 4, 2));  // 7 hd != (4 + 2 2) hd
  CHECK_FALSE(fused_qkv_rope_applies(torch::randn({1, 5, 8 * 16}), cos, sin, 4, 2));  // tables shorter than the sequence
  CHECK_THROWS_AS(fused_qkv_rope(torch::randn({1, 3, 8 * 16}).to(torch::kFloat64), cos, sin, 4, 2), Error);
}

TEST_CASE("the CPU model never takes the fused ops (CI curves stay LibTorch's)", "[fused]") {
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = Recipe::load("bf16");
  torch::manual_seed(0);
  Transformer a(model_config("tiny"), ctx);
  torch::Tensor tokens = torch::randint(0, 256, {2, 33}, torch::kInt64);
  const float on = a->loss(tokens.slice(1, 0, 32), tokens.slice(1, 1, 33)).loss.item<float>();
  a->set_fused_ops(false);
  const float off = a->loss(tokens.slice(1, 0, 32), tokens.slice(1, 1, 33)).loss.item<float>();
  CHECK(on == off);
}

namespace {

// The residual add fused into the norm against the add followed by fused_rms_norm, on one device:
// s, y, both inputs' gradients and the weight's, with s's gradient from a later use or none (the
// stream's last add); "" when all agree bit for bit.
std::string add_rms_norm_vs_separate(const torch::Tensor& x0, const torch::Tensor& res0, const torch::Tensor& w0, bool s_used) {
  torch::manual_seed(5);
  auto opt = x0.options();
  torch::Tensor gy = torch::randn(x0.sizes()).to(opt), gs = torch::randn(x0.sizes()).to(opt);
  std::vector<torch::Tensor> got[2];
  for (int fused = 0; fused < 2; ++fused) {
    torch::Tensor x = x0.clone().requires_grad_(true), res = res0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    torch::Tensor s, y;
    if (fused) std::tie(s, y) = fused_add_rms_norm(x, res, w, 1e-6);
    else { s = x + res; y = fused_rms_norm(s, w, 1e-6); }
    if (s_used) torch::autograd::backward({y, s}, {gy, gs});
    else torch::autograd::backward({y}, {gy});
    got[fused] = {s.detach().cpu(), y.detach().cpu(), x.grad().cpu(), res.grad().cpu(), w.grad().cpu()};
  }
  const std::vector<std::string> names = {"s", "y", "dx", "dresidual", "dw"};
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t at = test::first_bit_mismatch(got[0][i], got[1][i]);
    if (at >= 0) return names[i] + ": " + test::describe_mismatch(got[0][i], got[1][i], at);
  }
  return "";
}

}  // namespace

TEST_CASE("residual add + RMSNorm in one op == the add then the fused norm, bit for bit, forward and backward", "[fused]") {
  for (auto dtype : {torch::kFloat32, torch::kBFloat16})
    for (int64_t d : {8, 64, 384, 200})
      for (bool s_used : {true, false}) {
        torch::manual_seed(d);
        torch::Tensor x = (torch::randn({3, 13, d}) * 2.5).to(dtype), res = (torch::randn({3, 13, d}) * 0.7).to(dtype);
        INFO("dtype " << dtype << " d " << d << " s used " << s_used);
        CHECK(add_rms_norm_vs_separate(x, res, torch::rand({d}) + 0.5, s_used) == "");
      }
  auto w = torch::ones({8});
  CHECK_THROWS_AS(fused_add_rms_norm(torch::randn({2, 8}), torch::randn({3, 8}), w, 1e-6), Error);
  CHECK_THROWS_AS(fused_add_rms_norm(torch::randn({2, 8}), torch::randn({2, 8}).to(torch::kBFloat16), w, 1e-6), Error);
}

#ifdef UFP4_WITH_CUDA
namespace {

DType dt(const torch::Tensor& t) { return t.scalar_type() == torch::kBFloat16 ? DType::kBF16 : DType::kF32; }

// "" when the outputs agree bit for bit, else the first that differs and where.
std::string first_difference(const std::vector<std::string>& names, const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t at = test::first_bit_mismatch(a[i], b[i]);
    if (at >= 0) return names[i] + ": " + test::describe_mismatch(a[i], b[i], at);
  }
  return "";
}

// The CUDA kernels and the CPU reference on the same inputs; "" when every output agrees bitwise.
std::string rms_norm_mismatch(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy) {
  const int64_t rows = x.size(0), d = x.size(1);
  auto run = [&](const torch::Device& dev) {
    torch::Tensor xs = x.to(dev), ws = w.to(dev), dys = dy.to(dev);
    torch::Tensor y = torch::empty_like(xs), r = torch::empty({rows}, ws.options()), dx = torch::empty_like(xs), dw = torch::empty({d}, ws.options());
    torch::Tensor partials = torch::empty({rms_norm_partials(rows, d)}, ws.options());
    RmsNormIO io;
    io.dtype = dt(x);
    io.rows = rows;
    io.d = d;
    io.x = xs.data_ptr();
    io.w = ws.data_ptr<float>();
    io.y = y.data_ptr();
    io.r = r.data_ptr<float>();
    io.dy = dys.data_ptr();
    io.dx = dx.data_ptr();
    io.dw = dw.data_ptr<float>();
    io.partials = partials.data_ptr<float>();
    if (dev.is_cuda()) { cuda_rms_norm_forward(io, nullptr); cuda_rms_norm_backward(io, nullptr); torch::cuda::synchronize(); }
    else { reference_rms_norm_forward(io); reference_rms_norm_backward(io); }
    return std::vector<torch::Tensor>{y.cpu(), r.cpu(), dx.cpu(), dw.cpu()};
  };
  return first_difference({"y", "r", "dx", "dw"}, run(torch::kCPU), run(torch::kCUDA));
}

std::string cross_entropy_mismatch(const torch::Tensor& z, const torch::Tensor& t) {
  const int64_t rows = z.size(0), V = z.size(1);
  auto run = [&](const torch::Device& dev) {
    torch::Tensor zs = z.to(dev), ts = t.to(dev);
    const auto f32 = zs.options().dtype(torch::kFloat32);
    torch::Tensor loss = torch::empty({rows}, f32), lse = torch::empty({rows}, f32), scale = torch::full({1}, 0.37f, f32),
                  dz = torch::empty_like(zs);
    CrossEntropyIO io;
    io.dtype = dt(z);
    io.rows = rows;
    io.vocab = V;
    io.logits = zs.data_ptr();
    io.targets = ts.data_ptr<int64_t>();
    io.loss = loss.data_ptr<float>();
    io.lse = lse.data_ptr<float>();
    io.scale = scale.data_ptr<float>();
    io.dlogits = dz.data_ptr();
    if (dev.is_cuda()) { cuda_cross_entropy_forward(io, nullptr); cuda_cross_entropy_backward(io, nullptr); torch::cuda::synchronize(); }
    else { reference_cross_entropy_forward(io); reference_cross_entropy_backward(io); }
    return std::vector<torch::Tensor>{loss.cpu(), lse.cpu(), dz.cpu()};
  };
  return first_difference({"loss", "lse", "dlogits"}, run(torch::kCPU), run(torch::kCUDA));
}

}  // namespace

TEST_CASE("CUDA residual add + RMSNorm == CPU reference and == the add then the fused norm on the GPU, bitwise", "[fused][cuda]") {
  UFP4_NEED_GPU();
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (int64_t d : {8, 64, 384, 768, 200, 2048, 320, 1024})
      for (bool s_used : {true, false}) {
        torch::manual_seed(d + 1);
        const int64_t rows = d == 768 ? 4099 : 77;
        torch::Tensor x = (torch::randn({rows, d}) * 2.5).to(dtype), res = (torch::randn({rows, d}) * 0.7).to(dtype);
        torch::Tensor w = torch::rand({d}) + 0.5;
        INFO("dtype " << dtype << " d " << d << " s used " << s_used);
        CHECK(add_rms_norm_vs_separate(x.cuda(), res.cuda(), w.cuda(), s_used) == "");
        auto run = [&](const torch::Device& dev) {
          auto leaf = [&](const torch::Tensor& t) { return t.to(dev).detach().clone().requires_grad_(true); };  // to(kCPU) alone: t itself
          torch::Tensor xs = leaf(x), rs = leaf(res), ws = leaf(w);
          auto [sum, y] = fused_add_rms_norm(xs, rs, ws, 1e-6);
          torch::manual_seed(9);
          torch::Tensor gy = torch::randn(x.sizes()).to(dtype).to(dev), gs = torch::randn(x.sizes()).to(dtype).to(dev);
          if (s_used) torch::autograd::backward({y, sum}, {gy, gs});
          else torch::autograd::backward({y}, {gy});
          if (dev.is_cuda()) torch::cuda::synchronize();
          return std::vector<torch::Tensor>{sum.detach().cpu(), y.detach().cpu(), xs.grad().cpu(), rs.grad().cpu(), ws.grad().cpu()};
        };
        CHECK(first_difference({"s", "y", "dx", "dresidual", "dw"}, run(torch::kCPU), run(torch::kCUDA)) == "");
      }
}

TEST_CASE("CUDA RMSNorm == CPU reference, bitwise: y, r, dx, dw", "[fused][cuda]") {
  UFP4_NEED_GPU();
  // d covers every register variant (1, 2, 3, 4, 6 and 8 vectors a lane, the forward's and the backward's), whole and
  // partial (192 and 320: the proxies'; 1016); rows cover partial groups.
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (auto shape : std::vector<std::pair<int64_t, int64_t>>{
             {1000, 768}, {33, 384}, {5, 2048}, {17, 8}, {70, 1032}, {129, 1536}, {2, 512}, {41, 1016}, {19, 320}, {23, 192}}) {
      torch::manual_seed(shape.first + shape.second);
      torch::Tensor x = (torch::randn({shape.first, shape.second}) * 3).to(dtype);
      torch::Tensor w = torch::rand({shape.second}) + 0.5;
      torch::Tensor dy = torch::randn({shape.first, shape.second}).to(dtype);
      INFO("dtype " << dtype << " rows " << shape.first << " d " << shape.second);
      CHECK(rms_norm_mismatch(x, w, dy) == "");
    }
}

TEST_CASE("CUDA cross entropy == CPU reference, bitwise: loss, lse, gradient (ignored, out-of-range, -inf and NaN rows)", "[fused][cuda]") {
  UFP4_NEED_GPU();
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    // Vocabularies from one vector (8) to 50000, the proxies' 8192 among them; rows that fill the block's
    // threads and rows that leave some idle (2400, 6008).
    for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{7, 32768}, {100, 256}, {3, 50000}, {9, 8}, {33, 8192}, {5, 6008}, {6, 2400}}) {
      const int64_t rows = shape.first, V = shape.second;
      torch::manual_seed(rows + V);
      torch::Tensor z = torch::randn({rows, V}) * 5;
      z.index_put_({0, torch::indexing::Slice(0, V, 3)}, -INFINITY);  // masked entries
      if (rows > 2) z.index_put_({2, V / 2}, NAN);
      torch::Tensor t = torch::randint(0, V, {rows}, torch::kInt64);
      t.index_put_({1}, -100);
      if (rows > 3) t.index_put_({3}, V);  // out of range: NaN loss
      INFO("dtype " << dtype << " rows " << rows << " V " << V);
      CHECK(cross_entropy_mismatch(z.to(dtype), t) == "");
    }
}

TEST_CASE("CUDA SwiGLU == CPU reference, bitwise: output and both gradient halves", "[fused][cuda]") {
  UFP4_NEED_GPU();
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{1000, 2048}, {3, 8}, {77, 704}}) {
      const int64_t rows = shape.first, h = shape.second;
      torch::manual_seed(rows + h);
      torch::Tensor gu = torch::randn({rows, 2 * h}) * 6;
      gu.index_put_({0, 0}, -200.0f);  // exp overflows: sigmoid 0
      gu.index_put_({0, 1}, NAN);
      gu.index_put_({0, 2}, -INFINITY);
      gu = gu.to(dtype);
      torch::Tensor d = torch::randn({rows, h}).to(dtype);
      auto run = [&](const torch::Device& dev) {
        torch::Tensor g2 = gu.to(dev), d2 = d.to(dev), out = torch::empty({rows, h}, g2.options()), dgu = torch::empty_like(g2);
        SwiGluIO io;
        io.dtype = dt(gu);
        io.rows = rows;
        io.hidden = h;
        io.gu = g2.data_ptr();
        io.out = out.data_ptr();
        io.dout = d2.data_ptr();
        io.dgu = dgu.data_ptr();
        if (dev.is_cuda()) { cuda_swiglu_forward(io, nullptr); cuda_swiglu_backward(io, nullptr); torch::cuda::synchronize(); }
        else { reference_swiglu_forward(io); reference_swiglu_backward(io); }
        return std::vector<torch::Tensor>{out.cpu(), dgu.cpu()};
      };
      INFO("dtype " << dtype << " rows " << rows << " h " << h);
      CHECK(first_difference({"out", "dgu"}, run(torch::kCPU), run(torch::kCUDA)) == "");
    }
}

TEST_CASE("CUDA RoPE == CPU reference and == the composition on the GPU, bitwise, forward and backward", "[fused][cuda]") {
  UFP4_NEED_GPU();
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (auto shape : std::vector<std::array<int64_t, 5>>{{16, 1024, 4, 2, 64}, {3, 77, 12, 4, 64}, {2, 40, 2, 1, 128}, {1, 5, 3, 1, 16}}) {
      const int64_t B = shape[0], S = shape[1], H = shape[2], KV = shape[3], hd = shape[4];
      torch::manual_seed(B * S + hd);
      torch::Tensor qkv = (torch::randn({B, S, (H + 2 * KV) * hd}) * 3).to(dtype);
      auto [cos, sin] = rope_tables(S + 1, hd);
      INFO("dtype " << dtype << " B " << B << " S " << S << " H " << H << " KV " << KV << " hd " << hd);
      // The kernel against the reference, on the strided q view, both directions, into [B, H, S, hd] memory and
      // into [B, S, H, hd] memory (the layout the model's attention takes).
      for (bool inverse : {false, true})
      for (bool heads_inner : {false, true}) {
        auto run = [&](const torch::Device& dev) {
          torch::Tensor x = qkv.to(dev), c = cos.to(dev), sn = sin.to(dev);
          torch::Tensor q = qk_views(x, H, KV, hd).first;
          torch::Tensor y = heads_inner ? torch::empty({B, S, H, hd}, q.options()).transpose(1, 2) : torch::empty({B, H, S, hd}, q.options());
          RopeIO io;
          io.dtype = dt(qkv);
          io.batch = B;
          io.heads = H;
          io.seq = S;
          io.head_dim = hd;
          io.x = q.data_ptr();
          io.stride_b = q.stride(0);
          io.stride_h = q.stride(1);
          io.stride_s = q.stride(2);
          io.cos = c.data_ptr<float>();
          io.sin = sn.data_ptr<float>();
          io.inverse = inverse;
          io.y = y.data_ptr();
          io.y_stride_b = y.stride(0);
          io.y_stride_h = y.stride(1);
          io.y_stride_s = y.stride(2);
          if (dev.is_cuda()) { cuda_rope(io, nullptr); torch::cuda::synchronize(); }
          else reference_rope(io);
          return std::vector<torch::Tensor>{y.contiguous().cpu()};
        };
        INFO("inverse " << inverse << " heads inner " << heads_inner);
        CHECK(first_difference({"y"}, run(torch::kCPU), run(torch::kCUDA)) == "");
      }
      // The autograd op against LibTorch's composition, both on the GPU.
      CHECK(rope_vs_composition(qkv.to(torch::kCUDA), cos.to(torch::kCUDA), sin.to(torch::kCUDA), H, KV, hd) == "");
    }
}

TEST_CASE("CUDA packed-QKV RoPE == CPU reference and == the composition on the GPU, bitwise, forward and backward", "[fused][cuda]") {
  UFP4_NEED_GPU();
  for (auto dtype : {torch::kBFloat16, torch::kFloat32})
    for (auto shape : std::vector<std::array<int64_t, 5>>{{16, 1024, 12, 4, 64}, {3, 77, 6, 2, 64}, {2, 40, 2, 1, 128}, {1, 5, 3, 3, 16}}) {
      const int64_t B = shape[0], S = shape[1], H = shape[2], KV = shape[3], hd = shape[4];
      torch::manual_seed(B * S + hd);
      torch::Tensor qkv = (torch::randn({B, S, (H + 2 * KV) * hd}) * 3).to(dtype);
      auto [cos, sin] = rope_tables(S + 1, hd);
      INFO("dtype " << dtype << " B " << B << " S " << S << " H " << H << " KV " << KV << " hd " << hd);
      // The autograd op on each device: outputs and the projection's gradient, bit for bit.
      auto run = [&](const torch::Device& dev) {
        torch::Tensor x = qkv.to(dev).detach().clone().requires_grad_(true);  // to(kCPU) alone would be qkv itself
        std::vector<torch::Tensor> y = fused_qkv_rope(x, cos.to(dev), sin.to(dev), H, KV);
        torch::manual_seed(3);
        std::vector<torch::Tensor> g;
        for (const auto& t : y) g.push_back(torch::randn({t.size(0), t.size(2), t.size(1), t.size(3)}).to(dtype).to(dev).transpose(1, 2));
        torch::autograd::backward(y, g);
        if (dev.is_cuda()) torch::cuda::synchronize();
        return std::vector<torch::Tensor>{y[0].contiguous().cpu(), y[1].contiguous().cpu(), y[2].contiguous().cpu(), x.grad().cpu()};
      };
      CHECK(first_difference({"q", "k", "v", "dqkv"}, run(torch::kCPU), run(torch::kCUDA)) == "");
      CHECK(qkv_rope_vs_composition(qkv.to(torch::kCUDA), cos.to(torch::kCUDA), sin.to(torch::kCUDA), H, KV, hd) == "");
    }
}

TEST_CASE("tiny model on CUDA: fused ops change loss and gradients only by rounding", "[fused][cuda]") {
  UFP4_NEED_GPU();
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = Recipe::load("bf16");
  torch::manual_seed(0);
  Transformer m(model_config("tiny"), ctx);
  m->to(torch::kCUDA);
  m->set_compute_dtype(torch::kBFloat16);
  torch::Tensor tokens = torch::randint(0, 256, {4, 65}, torch::kInt64).to(torch::kCUDA);
  auto grads = [&](bool fused) {
    m->set_fused_ops(fused);
    m->zero_grad();
    TransformerOutput o = m->loss(tokens.slice(1, 0, 64), tokens.slice(1, 1, 65));
    o.loss.backward();
    std::vector<torch::Tensor> g;
    for (const auto& p : m->parameters()) g.push_back(p.grad().detach().clone().cpu());
    return std::make_pair(o.loss.item<double>(), g);
  };
  const auto a = grads(true), b = grads(false);
  // BF16 activations: the two paths round differently at 2^-9 relative, and the differences travel.
  CHECK(std::fabs(a.first - b.first) <= 2e-3 * std::fabs(b.first));
  for (size_t i = 0; i < a.second.size(); ++i) {
    const double err = (a.second[i] - b.second[i]).norm().item<double>(), ref = b.second[i].norm().item<double>();
    INFO("parameter " << i);
    CHECK(err <= 3e-2 * ref + 1e-8);
  }
}
#endif
