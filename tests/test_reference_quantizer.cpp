// The CPU oracle: exhaustive RTNE over every BF16 value for every grid, block-scale kinds, special
// values, layouts, packing.
#include <torch/torch.h>

#include <cmath>

#include "harness/error.h"
#include "kernels/float_bits.h"
#include "kernels/rounding.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

std::vector<Grid> all_grids() {
  return {Grid::from_name("e2m1"), Grid::from_name("e2m1", 4), Grid::from_name("e2m1", 3), Grid::from_name("e2m1", 2),
          Grid::from_name("e1m2"), Grid::from_name("int4"),    Grid::from_name("int4_tc"),
          Grid::parse("0,0.0796,0.1609,0.2461,0.3379,0.4407,0.5626,0.7230")};  // NF4-like positive half
}

QuantSpec spec_of(const Grid& g, ScaleKind scale = ScaleKind::kFp32) {
  QuantSpec s;
  s.grid = g;
  s.scale = scale;
  return s;
}

}  // namespace

TEST_CASE("RTNE, every BF16 value: nearest level, ties to even code, saturation", "[quantizer]") {
  // All finite BF16 values in [-1.5 gmax, 1.5 gmax], with unit scale so the value is what is rounded.
  for (const Grid& g : all_grids()) {
    std::vector<float> vals;
    for (uint32_t b = 0; b < 65536; ++b) {
      float v = bf16_bits_to_f32(static_cast<uint16_t>(b));
      if (is_finite(v) && std::fabs(v) <= 1.5f * g.gmax()) vals.push_back(v);
    }
    while (vals.size() % 16) vals.push_back(0.0f);
    torch::Tensor x = torch::from_blob(vals.data(), {static_cast<int64_t>(vals.size() / 16), 16}, torch::kFloat32).clone();
    QuantizedTensor q = quantize(x, spec_of(g, ScaleKind::kUnit));
    const float* dq = q.dequant.data_ptr<float>();
    const uint8_t* codes = q.codes.data_ptr<uint8_t>();
    const std::vector<float> levels = g.values();
    const GridParams& p = g.params();
    int64_t bad = 0;
    for (size_t i = 0; i < vals.size() && bad < 5; ++i) {
      const float v = vals[i];
      uint8_t code = (codes[i / 2] >> ((i & 1) * 4)) & 0xf;
      double dbest = 1e300;
      for (float l : levels) dbest = std::min(dbest, std::fabs(static_cast<double>(v) - l));
      double d = std::fabs(static_cast<double>(v) - dq[i]);
      bool ok = d == dbest && g.decode(code) == dq[i];
      // A tie: the chosen code must be even.
      int nearest = 0;
      for (float l : levels) nearest += std::fabs(static_cast<double>(v) - l) == dbest;
      if (nearest > 1) ok = ok && (code & 1) == 0;
      // The kernels' threshold rounding gives the same level.
      float a = g.symmetric() ? std::fabs(v) : v;
      int idx = round_nearest(p, a);
      float kernel_value = g.symmetric() ? (std::signbit(v) ? -p.level[idx] : p.level[idx]) : p.level[idx];
      ok = ok && kernel_value == dq[i];
      if (!ok) {
        ++bad;
        FAIL_CHECK(g.name() << ": v=" << v << " got " << dq[i] << " (code " << int(code) << "), kernel rule " << kernel_value
                            << ", nearest distance " << dbest);
      }
    }
    CHECK(bad == 0);
    // Saturation at both ends.
    torch::Tensor big = torch::full({1, 16}, 10.0f * g.gmax());
    big[0][1] = -10.0f * g.gmax();
    QuantizedTensor qb = quantize(big, spec_of(g, ScaleKind::kUnit));
    CHECK(qb.dequant[0][0].item<float>() == levels.back());
    CHECK(qb.dequant[0][1].item<float>() == levels.front());
  }
}

TEST_CASE("FP32 max scaling: the block amax lands on gmax, zero and non-finite blocks are defined", "[quantizer]") {
  torch::Tensor x = test::make_input("mixed", 8, 64, 3);
  QuantizedTensor q = quantize(x, spec_of(Grid::from_name("e2m1")));
  // Zero blocks: scale 0, dequantized +-0 with the input's sign, codes = sign bits.
  CHECK(q.scales[0][0].item<float>() == 0.0f);
  CHECK(q.dequant[1][0].item<float>() == 0.0f);
  CHECK(std::signbit(q.dequant[1][0].item<float>()));
  CHECK(q.codes[1][0].item<uint8_t>() == 0x88);
  CHECK(q.codes[0][0].item<uint8_t>() == 0x00);
  // The inf block (row 2, block 0) and the NaN block (last row, last block) are NaN throughout.
  CHECK(torch::isnan(q.dequant[2].slice(0, 0, 16)).all().item<bool>());
  CHECK(torch::isnan(q.dequant[7].slice(0, 48, 64)).all().item<bool>());
  CHECK((q.codes[2].slice(0, 0, 8) == 0).all().item<bool>());
  CHECK(std::isnan(q.scales[2][0].item<float>()));
  // Elsewhere: finite, and the element holding the block amax dequantizes to +-amax within 1 ulp.
  torch::Tensor finite = q.dequant[3];
  CHECK(torch::isfinite(finite).all().item<bool>());
  for (int b = 0; b < 4; ++b) {
    torch::Tensor blk = x[3].slice(0, b * 16, b * 16 + 16);
    int64_t i = blk.abs().argmax().item<int64_t>();
    float amax = blk.abs().max().item<float>();
    CHECK(std::fabs(q.dequant[3][b * 16 + i].item<float>()) == Approx(amax).epsilon(2e-7));
    CHECK(q.amax[3][b].item<float>() == amax);
    CHECK(q.scales[3][b].item<float>() == amax / 6.0f);
  }
}

TEST_CASE("E1M2 and symmetric INT4 are the same grid under max scaling", "[quantizer]") {
  torch::Tensor x = test::make_input("outliers", 64, 128, 5);
  for (bool col : {false, true}) {
    QuantizeOptions o;
    o.columnwise = col;
    QuantizedTensor a = quantize(x, spec_of(Grid::from_name("e1m2")), o), b = quantize(x, spec_of(Grid::from_name("int4")), o);
    CHECK(test::first_bit_mismatch(a.dequant, b.dequant) == -1);
    CHECK(test::first_bit_mismatch(a.codes, b.codes) == -1);
  }
}

TEST_CASE("NVFP4 two-level scales follow Transformer Engine's arithmetic", "[quantizer]") {
  torch::Tensor x = test::make_input("outliers", 32, 64, 7);
  QuantizedTensor q = quantize(x, spec_of(Grid::from_name("e2m1"), ScaleKind::kNvfp4));
  const float tensor_amax = x.abs().max().item<float>();
  CHECK(q.tensor_amax.item<float>() == tensor_amax);
  const float s_enc = 448.0f * 6.0f / tensor_amax;
  for (int r = 0; r < 32; ++r)
    for (int b = 0; b < 4; ++b) {
      float amax = x[r].slice(0, b * 16, b * 16 + 16).abs().max().item<float>();
      float e4m3 = round_to_e4m3(amax * (s_enc * (1.0f / 6.0f)));
      CHECK(q.scale_bits[r][b].item<uint8_t>() == e4m3_code(e4m3));
      CHECK(q.scales[r][b].item<float>() == e4m3 * (1.0f / s_enc));
    }
  // Relative error stays at the E2M1 level (the E4M3 scale costs little).
  double err = ((q.dequant - x).norm() / x.norm()).item<double>();
  CHECK(err < 0.15);
  // All-zero tensor: S_enc = 1, everything zero.
  QuantizedTensor z = quantize(torch::zeros({2, 32}), spec_of(Grid::from_name("e2m1"), ScaleKind::kNvfp4));
  CHECK((z.dequant == 0).all().item<bool>());
}

TEST_CASE("MX scales are E8M0 powers of two by the OCP rule", "[quantizer]") {
  torch::Tensor x = test::make_input("normal", 16, 64, 9) * 37.0f;
  QuantSpec s = spec_of(Grid::from_name("e2m1"), ScaleKind::kMx);
  s.block = 32;
  QuantizedTensor q = quantize(x, s);
  for (int r = 0; r < 16; ++r)
    for (int b = 0; b < 2; ++b) {
      float amax = x[r].slice(0, b * 32, b * 32 + 32).abs().max().item<float>();
      int e = floor_log2(amax) - 2;  // emax of E2M1 is 2
      CHECK(q.scales[r][b].item<float>() == std::ldexp(1.0f, e));
      CHECK(q.scale_bits[r][b].item<uint8_t>() == e + 127);
    }
  QuantizedTensor z = quantize(torch::zeros({1, 32}), s);
  CHECK(z.scale_bits[0][0].item<uint8_t>() == 0);
}

TEST_CASE("16x16 2D scaling gives identical rowwise and columnwise weights", "[quantizer]") {
  torch::Tensor w = test::make_input("outliers", 48, 80, 11);
  QuantSpec s = spec_of(Grid::from_name("e2m1"));
  s.block_2d = true;
  QuantizeOptions col;
  col.columnwise = true;
  QuantizedTensor a = quantize(w, s), b = quantize(w, s, col);
  CHECK(test::first_bit_mismatch(a.dequant, b.dequant.t().contiguous()) == -1);
  s.rht = 16;
  CHECK_THROWS_AS(quantize(w, s), Error);
}

TEST_CASE("columnwise(X) is rowwise(X^T) bit for bit, stochastic rounding included", "[quantizer]") {
  torch::Tensor x = test::make_input("normal", 96, 160, 13);
  for (auto rounding : {Rounding::kRtne, Rounding::kSr})
    for (int rht : {0, 16, 32}) {
      QuantSpec s = spec_of(Grid::from_name("e2m1"));
      s.rounding = rounding;
      s.rht = rht;
      s.seed = 77;
      QuantizeOptions col;
      col.columnwise = true;
      QuantizedTensor a = quantize(x, s, col), b = quantize(x.t().contiguous(), s);
      INFO("rht " << rht << " rounding " << to_string(rounding));
      CHECK(test::first_bit_mismatch(a.dequant, b.dequant) == -1);
      CHECK(test::first_bit_mismatch(a.codes, b.codes) == -1);
    }
}

TEST_CASE("packed codes and scales decode to the dequantized values", "[quantizer]") {
  for (const Grid& g : all_grids())
    for (int block : {16, 32}) {
      QuantSpec s = spec_of(g);
      s.block = block;
      torch::Tensor x = test::make_input("outliers", 7, 97, 17);  // odd width: partial blocks and a half byte
      QuantizedTensor q = quantize(x, s);
      torch::Tensor d = decode_packed(q.codes, q.scales, s, 97);
      INFO(g.name() << " block " << block);
      CHECK(test::first_bit_mismatch(d, q.dequant) == -1);
    }
}

TEST_CASE("the unfused path with an FP32 intermediate equals the fused path", "[quantizer]") {
  torch::Tensor x = test::make_input("outliers", 32, 128, 19);
  QuantSpec s = spec_of(Grid::from_name("e1m2"));
  s.rht = 16;
  s.rht_seed = 3;
  QuantizeOptions unf;
  unf.unfused = true;
  unf.unfused_dtype = torch::kFloat32;
  CHECK(test::first_bit_mismatch(quantize(x, s).dequant, quantize(x, s, unf).dequant) == -1);
}

TEST_CASE("bad shapes and specs are rejected with the field and the allowed values", "[quantizer]") {
  QuantSpec s;
  s.block = 24;
  std::string msg;
  try { s.validate(); } catch (const Error& e) { msg = e.what(); }
  CHECK(msg == "block: 24 is not allowed (allowed: 16, 32, 64, 128)");
  s.block = 16;
  s.rht = 16;
  CHECK_THROWS_AS(quantize(torch::zeros({4, 40}), s), Error);  // 16 does not divide 40
  CHECK_THROWS_AS(quantize(torch::zeros({4, 32}, torch::kFloat64), QuantSpec{}), Error);
  CHECK_THROWS_AS(quantize(torch::zeros({32}), QuantSpec{}), Error);
}
