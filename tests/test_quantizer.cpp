// The CPU oracle: exhaustive RTNE over every BF16 value for every grid, block-scale kinds, special
// values, layouts, packing.
#include <torch/torch.h>

#include <sstream>

#include <algorithm>
#include <cmath>
#include <random>

#include "common/error.h"
#include "kernels/numerics/float_bits.h"
#include "kernels/quantize/kernel_path.h"
#include "kernels/numerics/philox.h"
#include "kernels/quantize/quantize_hot.h"
#include "kernels/quantize/quantize_pair.h"
#include "kernels/numerics/rounding.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
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

TEST_CASE("The kernels' arithmetic rounding paths equal the threshold search, RTNE and SR", "[quantizer]") {
  std::mt19937_64 rng(11);
  int fast_grids = 0;
  for (const Grid& g : all_grids()) {
    const GridParams& p = g.params();
    const FastGrid f = classify_grid(p);
    INFO(g.name() << " class " << f.kind);
    if (g.name() == "e2m1" || g.name() == "e2m1_max4" || g.name() == "e2m1_max3") CHECK(f.kind == kGridE2M1);
    if (g.name() == "e1m2" || g.name() == "int4" || g.name() == "e2m1_max2") CHECK(f.kind == kGridUniform);
    if (g.name() == "int4_tc" || g.name() == "custom") CHECK(f.kind == kGridGeneric);
    if (f.kind == kGridGeneric) continue;
    ++fast_grids;
    // Every float within 2,000 ulps of each level and midpoint, plus random magnitudes up to 1.5x the top.
    std::vector<float> as = {0.0f, bits_f32(1), 1e-30f, 2.0f * p.level[p.n - 1], 1e30f};
    auto around = [&](float c) {
      for (int d = -2000; d <= 2000; ++d) {
        int64_t b = static_cast<int64_t>(f32_bits(c)) + d;
        if (b >= 0) as.push_back(bits_f32(static_cast<uint32_t>(b)));
      }
    };
    for (int i = 0; i < p.n; ++i) around(p.level[i]);
    for (int i = 0; i + 1 < p.n; ++i) around(p.mid[i]);
    std::uniform_real_distribution<float> ua(0.0f, 1.5f * p.level[p.n - 1]);
    for (int i = 0; i < 200000; ++i) as.push_back(ua(rng));
    int64_t bad = 0;
    for (float a : as) {
      const int idx = round_nearest(p, a);
      const float fast = f.kind == kGridUniform ? nearest_uniform(f, a) * f.step : nearest_e2m1(f, a);
      const int fast_idx = f.kind == kGridUniform ? static_cast<int>(nearest_uniform(f, a)) : e2m1_index(fast);
      // SR: random draws, the extreme draws and the two on either side of the decision (256 - rint(256 p)).
      const int lo = std::max(0, std::min(p.n - 1, static_cast<int>(std::upper_bound(p.level, p.level + p.n, a) - p.level) - 1));
      const double prob = lo + 1 < p.n ? (a - p.level[lo]) / (p.level[lo + 1] - p.level[lo]) : 0.0;
      const int kt = 256 - static_cast<int>(std::nearbyint(256.0 * prob));
      std::vector<uint32_t> ks = {0u, 255u};
      for (int k : {kt - 1, kt})
        if (k >= 0 && k < 256) ks.push_back(static_cast<uint32_t>(k));
      for (int k = 0; k < 3; ++k) ks.push_back(static_cast<uint32_t>(rng() & 0xffu));
      bool ok = fast == p.level[idx] && fast_idx == idx;
      for (uint32_t k : ks) {
        const float ref = p.level[round_stochastic(p, p.level, a, k)];
        const float got = f.kind == kGridUniform ? stochastic_uniform(f, a, k) * f.step : stochastic_e2m1(f, a, k);
        ok = ok && got == ref;
      }
      if (!ok && ++bad <= 5) FAIL_CHECK("a=" << a << " (bits " << f32_bits(a) << "): level " << p.level[idx] << " fast " << fast);
    }
    CHECK(bad == 0);
  }
  CHECK(fast_grids == 6);
}

TEST_CASE("Division by a block scale through its reciprocal is the IEEE quotient", "[quantizer]") {
  // Random scales over [2^-100, 2^100], inputs up to 8x the scale (the kernels' range: |x| <= amax = scale * gmax)
  // and arbitrary ones, and inputs built so the quotient sits next to a rounding midpoint.
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exps(-100, 99), near(-40, 3), sh(-3, 3);
  auto make = [&](int e) { return std::ldexp(1.0f + static_cast<float>(mant(rng)) / 8388608.0f, e); };
  int64_t bad = 0, n = 0;
  for (int i = 0; i < 2000000; ++i) {
    const float sc = make(exps(rng));
    const float r = 1.0f / sc;
    float x;
    switch (i % 3) {
      case 0: x = make(near(rng)) * sc; break;  // |x / sc| in [2^-40, 16)
      case 1: x = make(exps(rng)); break;
      default: {  // x = RN(q * sc) nudged by a few ulps: quotients next to midpoints of q's neighbours
        const float q = make(near(rng));
        x = bits_f32(static_cast<uint32_t>(static_cast<int64_t>(f32_bits(q * sc)) + sh(rng)));
      }
    }
    if (rng() & 1) x = -x;
    if (!std::isfinite(x)) continue;
    ++n;
    const float want = x / sc, got = div_by_scale(x, sc, r);
    if (f32_bits(want) != f32_bits(got) && ++bad <= 5) FAIL_CHECK(x << " / " << sc << ": " << got << " vs " << want);
  }
  CHECK(bad == 0);
  CHECK(n > 1900000);
  CHECK(f32_bits(div_by_scale(-0.0f, 3.0f, 1.0f / 3.0f)) == f32_bits(-0.0f));
  CHECK(div_by_scale(1e-40f, 0.5f, 2.0f) == 1e-40f / 0.5f);  // subnormal input: the division path
}

namespace {

// BF16 test blocks for the hot path: ordinary data, exact ties, and every kind of block it must decline.
torch::Tensor hot_input(const std::string& regime, const Grid& g, int64_t rows, uint64_t seed) {
  if (regime == "ties") {  // one element on gmax * 2^e, the rest on levels and midpoints times 2^e
    std::mt19937_64 rng(seed);
    std::vector<float> v;
    const GridParams& p = g.params();
    for (int i = 0; i < p.n; ++i) v.push_back(p.level[i]);
    for (int i = 0; i + 1 < p.n; ++i) v.push_back(p.mid[i]);
    torch::Tensor x = torch::empty({rows, 64});
    for (int64_t r = 0; r < rows; ++r) {
      const float s = std::ldexp(1.0f, static_cast<int>(rng() % 40) - 30);  // within the accepted scales
      for (int64_t j = 0; j < 64; ++j) {
        const float m = j % 16 == static_cast<int64_t>(r % 16) ? p.gmax : v[rng() % v.size()];
        x[r][j] = (rng() & 1 ? -m : m) * s;
      }
    }
    return x.to(torch::kBFloat16);
  }
  if (regime == "tiny") return (test::make_input("normal", rows, 64, seed) * 1e-36f).to(torch::kBFloat16);  // BF16 subnormals
  if (regime == "huge") return (test::make_input("normal", rows, 64, seed) * 3e37f).to(torch::kBFloat16);
  if (regime == "wide") return (test::make_input("mixed", rows, 64, seed)).to(torch::kBFloat16);  // zeros, inf, NaN, 2^+-12 rows
  return test::make_input(regime, rows, 64, seed).to(torch::kBFloat16);
}

}  // namespace

namespace {

// Every 16-element chunk of x [rows, 64] (BF16, or FP32 with kF32) through the hot arithmetic for grid g,
// rounding rd and RHT size rht, against the reference's dequantized values. Returns the mismatching
// chunks; counts the declined and the checked ones.
template <bool kF32>
int64_t compare_hot_chunks(const Grid& g, Rounding rd, int rht, const std::string& regime, const torch::Tensor& x, int64_t& declined,
                           int64_t& checked) {
  QuantSpec s;
  s.grid = g;
  s.rounding = rd;
  s.rht = rht;
  s.rht_seed = 99;
  s.seed = 0xfeedfacecafebeefULL;
  s.offset = 7;
  QuantizeOptions o;
  o.out_dtype = torch::kBFloat16;
  o.want_codes = false;
  const torch::Tensor want = quantize(x, s, o).dequant;
  std::ostringstream os;
  os << g.name() << " " << to_string(rd) << " rht=" << rht << " " << regime;
  const std::string label = os.str();
  const KernelSpec ks = make_kernel_spec(s);
  const HotParams h = make_hot_params(ks);
  const auto* in = reinterpret_cast<const uint32_t*>(x.data_ptr());
  const auto* ref = reinterpret_cast<const uint32_t*>(want.data_ptr());
  const int kind = (ks.fast.kind == kGridE2M1 ? 4 : 0) + (s.rounding == Rounding::kSr ? 2 : 0) + (s.rht ? 1 : 0);
  constexpr int kWords = kF32 ? 16 : 8;  // input words a chunk
  int64_t bad = 0;
  for (int64_t c = 0; c < x.numel() / 16; ++c) {
    uint32_t out[8];
    const uint32_t* p = in + kWords * c;
    const uint64_t oi = static_cast<uint64_t>(16 * c);
#define UFP4_HOT(C, S, R) (kF32 ? hot_chunk_f32<C, S, R>(h, p, oi, out) : hot_chunk<C, S, R>(h, p, oi, out))
    bool ok;
    switch (kind) {
      case 0: ok = UFP4_HOT(kGridUniform, false, false); break;
      case 1: ok = UFP4_HOT(kGridUniform, false, true); break;
      case 2: ok = UFP4_HOT(kGridUniform, true, false); break;
      case 3: ok = UFP4_HOT(kGridUniform, true, true); break;
      case 4: ok = UFP4_HOT(kGridE2M1, false, false); break;
      case 5: ok = UFP4_HOT(kGridE2M1, false, true); break;
      case 6: ok = UFP4_HOT(kGridE2M1, true, false); break;
      default: ok = UFP4_HOT(kGridE2M1, true, true); break;
    }
#undef UFP4_HOT
    if (!ok) { ++declined; continue; }
    ++checked;
    for (int k = 0; k < 8; ++k)
      if (out[k] != ref[8 * c + k] && ++bad <= 3)
        FAIL_CHECK(label << " chunk " << c << " word " << k << ": " << std::hex << out[k] << " vs " << ref[8 * c + k]);
  }
  return bad;
}

}  // namespace

TEST_CASE("The hot kernel's chunk arithmetic equals the reference bit for bit, or declines the chunk", "[quantizer]") {
  const std::vector<Grid> grids = {Grid::from_name("e2m1"), Grid::from_name("e2m1", 4), Grid::from_name("e2m1", 3),
                                   Grid::from_name("e2m1", 2), Grid::from_name("e1m2"), Grid::from_name("int4")};
  const int64_t rows = 1024;
  int64_t checked = 0;
  for (const Grid& g : grids)
    for (auto rd : {Rounding::kRtne, Rounding::kSr})
      for (int rht : {0, 16})
        for (const char* regime : {"normal", "outliers", "dyadic", "ties", "tiny", "huge", "wide", "near_overflow"}) {
          torch::Tensor x = hot_input(regime, g, rows, checked + 1);
          int64_t declined = 0;
          const int64_t bad = compare_hot_chunks<false>(g, rd, rht, regime, x, declined, checked);
          CHECK(bad == 0);
          const std::string r = regime;
          INFO(g.name() << " " << to_string(rd) << " rht=" << rht << " " << regime << ": " << declined << " declined");
          if (r == "normal" || r == "outliers" || r == "dyadic" || r == "ties") CHECK(declined == 0);
          if (r == "tiny" || r == "huge") CHECK(declined > 0);  // the range checks do fire
        }
  CHECK(checked > 450000);

  // hot_div over the accepted scales: the IEEE quotient whenever |q| >= 2^-43, and a quotient of the
  // same sign and zeroness below (all that rounding looks at there), for BF16-derived |x| >= 2^-135.
  std::mt19937_64 rng(3);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> de(-60, 11), qe(-43, 3), tiny_e(-135, -44), sh(-3, 3);
  auto make = [&](int e) { return std::ldexp(1.0f + static_cast<float>(mant(rng)) / 8388608.0f, e); };
  int64_t bad = 0;
  for (int i = 0; i < 1000000; ++i) {
    const float d = make(de(rng)), rd = 1.0f / d;
    const float q = make(qe(rng));
    float x = bits_f32(static_cast<uint32_t>(static_cast<int64_t>(f32_bits(q * d)) + sh(rng)));
    if (rng() & 1) x = -x;
    if (f32_bits(hot_div(x, d, rd)) != f32_bits(x / d) && std::fabs(x / d) >= 0x1p-43f && ++bad <= 3) FAIL_CHECK(x << " / " << d);
    const float xt = std::ldexp(1.0f, tiny_e(rng)) * (rng() & 1 ? -1.0f : 1.0f), got = hot_div(xt, d, rd), want = xt / d;
    if ((got == 0.0f) != (want == 0.0f) || std::signbit(got) != std::signbit(xt) || (std::fabs(want) < 0x1p-43f) != (std::fabs(got) < 0x1p-43f))
      if (++bad <= 3) FAIL_CHECK("tiny " << xt << " / " << d << ": " << got << " vs " << want);
  }
  CHECK(bad == 0);
}

TEST_CASE("The hot chunk arithmetic on FP32 input (the pair kernel's weights) equals the reference bit for bit, or declines", "[quantizer]") {
  // The pair kernel feeds FP32 weights to the hot arithmetic (round to nearest); SR is held to the
  // reference too. FP32 values are not sums of BF16 values: the butterflies round, as the reference's do.
  const std::vector<Grid> grids = {Grid::from_name("e2m1"), Grid::from_name("e2m1", 4), Grid::from_name("e1m2"), Grid::from_name("int4")};
  const int64_t rows = 512;
  int64_t checked = 0, seed = 1;
  for (const Grid& g : grids)
    for (auto rd : {Rounding::kRtne, Rounding::kSr})
      for (int rht : {0, 16})
        for (const char* regime : {"normal", "outliers", "dyadic", "subnormal", "mixed", "near_overflow", "tiny_values"}) {
          const std::string r = regime;
          torch::Tensor x = test::make_input(r == "tiny_values" ? "normal" : regime, rows, 64, ++seed);
          if (r == "tiny_values") {  // half the elements near FP32's smallest normals, in blocks of ordinary amax
            torch::manual_seed(seed);
            x = x * torch::where(torch::rand({rows, 64}) < 0.5, torch::full({rows, 64}, 1e-38f), torch::ones({rows, 64}));
          }
          int64_t declined = 0;
          const int64_t bad = compare_hot_chunks<true>(g, rd, rht, regime, x, declined, checked);
          CHECK(bad == 0);
          INFO(g.name() << " " << to_string(rd) << " rht=" << rht << " " << regime << ": " << declined << " declined");
          if (r == "normal" || r == "outliers" || r == "dyadic" || r == "tiny_values") CHECK(declined == 0);
          if (r == "subnormal" || r == "near_overflow") CHECK(declined > 0);  // the range checks do fire
        }
  CHECK(checked > 150000);
}

TEST_CASE("The pair kernel covers X, dY and W of the quantized recipes, and declines what it cannot do", "[quantizer]") {
  auto spec = [](const char* grid, Rounding rd, int rht) {
    QuantSpec s;
    s.grid = Grid::from_name(grid);
    s.rounding = rd;
    s.rht = rht;
    return make_kernel_spec(s);
  };
  std::vector<float> buf(64 * 48 + 8);
  REQUIRE((reinterpret_cast<uintptr_t>(buf.data()) & 15u) == 0);
  PairIO io;
  io.in = io.row_out = io.col_out = buf.data();
  io.rows = 64;
  io.cols = 48;
  const auto rn = Rounding::kRtne, sr = Rounding::kSr;
  for (const char* g : {"e2m1", "e1m2", "int4"}) {
    io.in_dtype = DType::kBF16;
    CHECK(pair_path_applies(spec(g, rn, 16), spec(g, rn, 16), io));  // UFP4's X: FPROP and WGRAD, both rotated
    CHECK(pair_path_applies(spec(g, sr, 16), spec(g, sr, 16), io));  // UFP4's dY: DGRAD and WGRAD
    CHECK(pair_path_applies(spec(g, sr, 0), spec(g, sr, 16), io));   // the E2M1 reference's dY: WGRAD rotated only
    CHECK(pair_path_applies(spec(g, rn, 0), spec(g, rn, 0), io));
    CHECK(!pair_path_applies(spec(g, rn, 16), spec(g, rn, 0), io));  // rotated rowwise only: no recipe's
    CHECK(!pair_path_applies(spec(g, rn, 16), spec(g, sr, 16), io));  // one rounding a launch
    io.in_dtype = DType::kF32;
    CHECK(pair_path_applies(spec(g, rn, 16), spec(g, rn, 16), io));  // UFP4's W: FPROP and DGRAD
    CHECK(pair_path_applies(spec(g, rn, 0), spec(g, rn, 0), io));    // the E2M1 reference's W
    CHECK(!pair_path_applies(spec(g, sr, 16), spec(g, sr, 16), io));  // FP32 input: round to nearest only
    CHECK(!pair_path_applies(spec(g, rn, 0), spec(g, rn, 16), io));
  }
  io.in_dtype = DType::kBF16;
  const KernelSpec a = spec("e2m1", rn, 16);
  auto declines = [&](auto&& change) {
    PairIO io2 = io;
    KernelSpec r = a, c = a;
    change(r, c, io2);
    return !pair_path_applies(r, c, io2);
  };
  CHECK(declines([&](KernelSpec&, KernelSpec& c, PairIO&) { c = spec("e1m2", rn, 16); }));  // two grid kinds
  CHECK(declines([&](KernelSpec& r, KernelSpec&, PairIO&) { r = spec("int4_tc", rn, 16); }));
  CHECK(declines([](KernelSpec& r, KernelSpec&, PairIO&) { r.block = 32; }));
  CHECK(declines([](KernelSpec&, KernelSpec& c, PairIO&) { c.scale_kind = 1; }));
  CHECK(declines([](KernelSpec&, KernelSpec&, PairIO& i) { i.rows = 40; }));
  CHECK(declines([](KernelSpec&, KernelSpec&, PairIO& i) { i.cols = 40; }));
  CHECK(declines([&](KernelSpec&, KernelSpec&, PairIO& i) { i.in = buf.data() + 1; }));
  CHECK(declines([&](KernelSpec&, KernelSpec&, PairIO& i) { i.col_out = buf.data() + 2; }));
  CHECK(declines([](KernelSpec&, KernelSpec&, PairIO& i) { i.row_out = nullptr; }));
}

TEST_CASE("select_path: which CUDA kernel each kind of call runs (the dispatcher's one decision)", "[quantizer]") {
  QuantSpec s;
  s.grid = Grid::from_name("e2m1");
  s.rht = 16;
  s.rounding = Rounding::kSr;
  std::vector<uint16_t> buf(64 * 32 + 8);
  QuantizeIO io;
  io.in = buf.data();
  io.dequant = buf.data();
  io.in_dtype = io.out_dtype = DType::kBF16;
  io.rows = 64;
  io.cols = 32;
  REQUIRE((reinterpret_cast<uintptr_t>(buf.data()) & 15u) == 0);
  auto path = [&](auto&& change) {
    QuantSpec s2 = s;
    QuantizeIO io2 = io;
    change(s2, io2);
    return select_path(make_kernel_spec(s2), io2);
  };
  CHECK(path([](QuantSpec&, QuantizeIO&) {}) == KernelPath::kHot);  // the training path
  CHECK(path([](QuantSpec&, QuantizeIO& i) { i.columnwise = true; }) == KernelPath::kHot);
  // 1x16 calls the hot kernel declines, with whole 16-element chunks: the 1x16 kernel.
  CHECK(path([](QuantSpec&, QuantizeIO& i) { i.in_dtype = DType::kF32; }) == KernelPath::kFast16);
  CHECK(path([&](QuantSpec&, QuantizeIO& i) { i.codes = reinterpret_cast<uint8_t*>(buf.data()); }) == KernelPath::kFast16);
  CHECK(path([](QuantSpec& q, QuantizeIO&) { q.scale = ScaleKind::kNvfp4; }) == KernelPath::kFast16);
  CHECK(path([](QuantSpec& q, QuantizeIO&) { q.grid = Grid::from_name("int4_tc"); }) == KernelPath::kFast16);
  // Everything else: the general kernel.
  CHECK(path([](QuantSpec& q, QuantizeIO&) { q.rht = 32; }) == KernelPath::kGeneral);
  CHECK(path([](QuantSpec& q, QuantizeIO&) { q.block = 32; }) == KernelPath::kGeneral);
  CHECK(path([](QuantSpec&, QuantizeIO& i) { i.cols = 24; }) == KernelPath::kGeneral);
  CHECK(path([](QuantSpec&, QuantizeIO& i) { i.in = reinterpret_cast<const uint8_t*>(i.in) + 2; }) == KernelPath::kGeneral);  // unaligned
  CHECK(std::string(kernel_path_name(KernelPath::kFast16)) == "fast16");
}

TEST_CASE("The hot kernel covers the training path's activation quantizations and nothing it cannot do", "[quantizer]") {
  QuantSpec s;
  s.grid = Grid::from_name("e1m2");
  s.rht = 16;
  s.rounding = Rounding::kSr;
  QuantizeIO io;
  std::vector<uint16_t> buf(64 * 32 + 8);
  io.in = buf.data();
  io.dequant = buf.data();
  io.in_dtype = io.out_dtype = DType::kBF16;
  io.rows = 64;
  io.cols = 32;
  const bool aligned = (reinterpret_cast<uintptr_t>(buf.data()) & 15u) == 0;
  REQUIRE(aligned);
  for (const char* g : {"e1m2", "e2m1", "int4"})
    for (int rht : {0, 16})
      for (bool col : {false, true}) {
        s.grid = Grid::from_name(g);
        s.rht = rht;
        io.columnwise = col;
        CHECK(hot_path_applies(make_kernel_spec(s), io));
      }
  s.rht = 16;
  io.columnwise = false;
  auto declines = [&](auto&& change) {
    QuantSpec s2 = s;
    QuantizeIO io2 = io;
    change(s2, io2);
    return !hot_path_applies(make_kernel_spec(s2), io2);
  };
  CHECK(declines([](QuantSpec& q, QuantizeIO&) { q.grid = Grid::from_name("int4_tc"); }));
  CHECK(declines([](QuantSpec& q, QuantizeIO&) { q.scale = ScaleKind::kNvfp4; }));
  CHECK(declines([](QuantSpec& q, QuantizeIO&) { q.rht = 32; }));
  CHECK(declines([](QuantSpec& q, QuantizeIO&) { q.block = 32; }));
  CHECK(declines([](QuantSpec&, QuantizeIO& i) { i.in_dtype = DType::kF32; }));
  CHECK(declines([](QuantSpec&, QuantizeIO& i) { i.out_dtype = DType::kF32; }));
  CHECK(declines([&](QuantSpec&, QuantizeIO& i) { i.codes = reinterpret_cast<uint8_t*>(buf.data()); }));
  CHECK(declines([](QuantSpec&, QuantizeIO& i) { i.cols = 24; }));
  CHECK(declines([](QuantSpec&, QuantizeIO& i) { i.columnwise = true; i.rows = 40; }));
  CHECK(declines([](QuantSpec&, QuantizeIO& i) { i.columnwise = true; i.cols = 36; }));
  CHECK(declines([&](QuantSpec&, QuantizeIO& i) { i.in = buf.data() + 1; }));
}
