#include <cmath>

#include "common/error.h"
#include "kernels/quantize/grid.h"
#include "tests/catch.h"

using ufp4::Grid;

namespace {
// OCP FP4 E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit, subnormal at exponent 0, no inf/NaN.
float ocp_e2m1(uint8_t code) {
  int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  float mag = e == 0 ? 0.5f * m : std::ldexp(1.0f + 0.5f * m, e - 1);
  return s ? -mag : mag;
}
}  // namespace

TEST_CASE("E2M1 decodes every code as the OCP E2M1 definition", "[grid]") {
  Grid g = Grid::from_name("e2m1");
  for (int c = 0; c < 16; ++c) CHECK(g.decode(static_cast<uint8_t>(c)) == ocp_e2m1(static_cast<uint8_t>(c)));
  CHECK(g.gmax() == 6.0f);
}

TEST_CASE("max_fpx caps the E2M1 grid", "[grid]") {
  CHECK(Grid::from_name("e2m1", 4).levels() == std::vector<float>{0, 0.5f, 1, 1.5f, 2, 3, 4});
  CHECK(Grid::from_name("e2m1", 3).levels() == std::vector<float>{0, 0.5f, 1, 1.5f, 2, 3});
  CHECK(Grid::from_name("e2m1", 2).levels() == std::vector<float>{0, 0.5f, 1, 1.5f, 2});
  CHECK(Grid::from_name("e2m1", 2).gmax() == 2.0f);
  CHECK_THROWS_AS(Grid::from_name("e2m1", 5), ufp4::Error);
  CHECK_THROWS_AS(Grid::from_name("e1m2", 4), ufp4::Error);
}

TEST_CASE("uniform grids: E1M2 and INT4 have eight equally spaced magnitudes", "[grid]") {
  for (const char* name : {"e1m2", "int4"}) {
    Grid g = Grid::from_name(name);
    auto lv = g.levels();
    REQUIRE(lv.size() == 8);
    for (int k = 0; k < 8; ++k) CHECK(lv[k] == Approx(k * g.gmax() / 7).epsilon(1e-7));
  }
  Grid tc = Grid::from_name("int4_tc");
  CHECK(tc.values().front() == -8.0f);
  CHECK(tc.values().back() == 7.0f);
  CHECK(tc.gmax() == 8.0f);
  CHECK(tc.decode(0x8) == -8.0f);
  CHECK(tc.decode(0xf) == -1.0f);
  CHECK(tc.decode(0x7) == 7.0f);
}

TEST_CASE("Eq. 2 per-bin bias: E2M1 shrinks at 2 and 4, uniform grids never", "[grid]") {
  for (const auto& b : Grid::from_name("e2m1").bins()) {
    INFO("level " << b.level);
    if (b.level == 2.0f) CHECK(b.bias == -0.125f);
    else if (b.level == 4.0f) CHECK(b.bias == -0.25f);
    else CHECK(b.bias == 0.0f);
  }
  for (const char* name : {"e1m2", "int4", "int4_tc"})
    for (const auto& b : Grid::from_name(name).bins()) {
      INFO(name << " level " << b.level);
      CHECK(b.bias == 0.0f);
    }
}

TEST_CASE("tie rule: a midpoint goes to the even code", "[grid]") {
  const auto& p = Grid::from_name("e2m1").params();
  // Midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5 between codes (0,1) (1,2) ... (6,7): up when the upper code is even.
  const float mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  for (int i = 0; i < 7; ++i) {
    CHECK(p.mid[i] == mids[i]);
    CHECK(((p.up_at_mid >> i) & 1u) == static_cast<unsigned>((i + 1) % 2 == 0));
  }
}

TEST_CASE("custom grids from a list of magnitudes", "[grid]") {
  Grid g = Grid::parse("0,0.1,0.3,0.7,1");
  CHECK(g.name() == "custom");
  CHECK(g.levels().size() == 5);
  CHECK(g.gmax() == 1.0f);
  // 0.1 and 0.3: the FP32 midpoint 0.2f is not the exact midpoint; the flag records which side is nearer.
  const auto& p = g.params();
  double exact = (static_cast<double>(0.1f) + static_cast<double>(0.3f)) / 2;
  CHECK(((p.up_at_mid >> 1) & 1u) == static_cast<unsigned>(static_cast<double>(p.mid[1]) > exact));
  CHECK_THROWS_AS(Grid::parse("0,1,1"), ufp4::Error);
  CHECK_THROWS_AS(Grid::parse("0.5,1"), ufp4::Error);
  CHECK_THROWS_AS(Grid::parse("0,1,x"), ufp4::Error);
  CHECK_THROWS_AS(Grid::parse("0,1,2,3,4,5,6,7,8"), ufp4::Error);
  CHECK_THROWS_AS(Grid::parse("fp5"), ufp4::Error);
}
