#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/philox.h"
#include "tests/catch.h"

using namespace ufp4;

TEST_CASE("FP32 -> BF16 is round-to-nearest-even, as LibTorch's cast", "[formats]") {
  torch::manual_seed(1);
  torch::Tensor x = torch::cat({torch::randn({100000}) * torch::exp(torch::randn({100000}) * 10),
                                torch::tensor({0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.0e38f,
                                               std::numeric_limits<float>::infinity(), 1e-40f})});
  torch::Tensor ref = x.to(torch::kBFloat16).view(torch::kInt16);
  const float* xs = x.data_ptr<float>();
  const int16_t* rs = ref.data_ptr<int16_t>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    INFO("x = " << xs[i]);
    REQUIRE(f32_to_bf16_bits(xs[i]) == static_cast<uint16_t>(rs[i]));
  }
  CHECK(is_nan(bf16_bits_to_f32(f32_to_bf16_bits(std::nanf("")))));
}

TEST_CASE("E4M3: every code round-trips, ties go to even, overflow saturates", "[formats]") {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN codes
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    float v = e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
    if (s) v = -v;
    INFO("code " << c << " value " << v);
    CHECK(round_to_e4m3(v) == v);
    if (v != 0.0f) CHECK(e4m3_code(v) == c);
  }
  CHECK(round_to_e4m3(448.0f) == 448.0f);
  CHECK(round_to_e4m3(463.0f) == 448.0f);
  CHECK(round_to_e4m3(464.0f) == 448.0f);   // tie between 448 and (non-existent) 480: saturates
  CHECK(round_to_e4m3(1e30f) == 448.0f);
  CHECK(round_to_e4m3(-1e30f) == -448.0f);
  CHECK(round_to_e4m3(1.0625f) == 1.0f);    // tie between 1 (even) and 1.125
  CHECK(round_to_e4m3(1.1875f) == 1.25f);   // tie between 1.125 and 1.25 (even)
  CHECK(round_to_e4m3(std::ldexp(1.0f, -10)) == 0.0f);  // half the smallest subnormal: tie to 0
  CHECK(round_to_e4m3(std::ldexp(3.0f, -10)) == std::ldexp(2.0f, -9));
}

TEST_CASE("floor_log2 and exp2_int over normals and subnormals", "[formats]") {
  for (int e = -149; e <= 127; ++e) {
    float p = exp2_int(e);
    CHECK(p == std::ldexp(1.0f, e));
    CHECK(floor_log2(p) == e);
    if (e < 127) CHECK(floor_log2(std::nextafter(2 * p, 0.0f)) == e);
  }
}

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors", "[formats]") {
  U32x4 a = philox4x32_10(0, 0, 0, 0, 0, 0);
  CHECK(a.v[0] == 0x6627e8d5u);
  CHECK(a.v[1] == 0xe169c58du);
  CHECK(a.v[2] == 0xbc57ac4cu);
  CHECK(a.v[3] == 0x9b00dbd8u);
  U32x4 b = philox4x32_10(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
  CHECK(b.v[0] == 0x408f276du);
  CHECK(b.v[1] == 0x41c83b0eu);
  CHECK(b.v[2] == 0xa20bc7c6u);
  CHECK(b.v[3] == 0x6d5451fdu);
  U32x4 c = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
  CHECK(c.v[0] == 0xd16cfe09u);
  CHECK(c.v[1] == 0x94fdccebu);
  CHECK(c.v[2] == 0x5001e420u);
  CHECK(c.v[3] == 0x24126ea1u);
  // Precomputed round keys (the kernels' form) give the same stream.
  const U32x4 d = philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, philox_keys(0x299f31d0a4093822ULL));
  for (int i = 0; i < 4; ++i) CHECK(d.v[i] == c.v[i]);
}

TEST_CASE("SR draws: element i takes byte i % 16 of the Philox call at counter i / 16", "[formats]") {
  const uint64_t seed = 0x299f31d0a4093822ULL, offset = 0x0370734413198a2eULL;
  for (uint64_t group : {uint64_t{0}, uint64_t{1}, uint64_t{0x05a308d3243f6a88ULL}}) {
    const U32x4 r = philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), static_cast<uint32_t>(offset),
                                  static_cast<uint32_t>(offset >> 32), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
    for (int b = 0; b < 16; ++b) {
      const uint32_t want = (r.v[b / 4] >> (8 * (b % 4))) & 0xffu;
      CHECK(sr_draw(seed, offset, group * 16 + static_cast<uint64_t>(b)) == want);
      CHECK(sr_byte(sr_bytes16(seed, offset, group), b) == want);
    }
  }
}
