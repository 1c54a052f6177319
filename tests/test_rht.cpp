#include <torch/torch.h>

#include <cmath>

#include "kernels/quantize/quantize.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {
QuantSpec rht_spec(int n, uint64_t seed) {
  QuantSpec s;
  s.rht = n;
  s.rht_seed = seed;
  return s;
}
// The transform's matrix: row i is the image of e_i (x H' for a row vector x).
torch::Tensor rht_matrix(int n, uint64_t seed) { return rht(torch::eye(n), rht_spec(n, seed)); }
}  // namespace

TEST_CASE("RHT is orthogonal: H'^T H' = I (exactly for n = 16 and 64)", "[rht]") {
  for (int n : {16, 32, 64, 128}) {
    torch::Tensor h = rht_matrix(n, 42);
    torch::Tensor prod = torch::matmul(h.t(), h);
    INFO("n = " << n);
    if (n == 16 || n == 64) CHECK(torch::equal(prod, torch::eye(n)));
    else CHECK(torch::allclose(prod, torch::eye(n), 0, 1e-6));
    // Entries are +-1/sqrt(n).
    CHECK(torch::allclose(h.abs(), torch::full({n, n}, static_cast<float>(1 / std::sqrt(n)))));
  }
}

TEST_CASE("RHT equals S H with Sylvester H, and the butterfly agrees with the matrix product", "[rht]") {
  for (int n : {16, 32, 64, 128}) {
    torch::Tensor hd = torch::ones({1, 1}, torch::kFloat64);
    while (hd.size(0) < n) hd = torch::cat({torch::cat({hd, hd}, 1), torch::cat({hd, -hd}, 1)}, 0);
    hd = hd / std::sqrt(static_cast<double>(n));
    uint32_t bits[4];
    rht_sign_bits(42, bits);
    torch::Tensor signs = torch::empty({n}, torch::kFloat64);
    for (int i = 0; i < n; ++i) signs[i] = ((bits[i >> 5] >> (i & 31)) & 1u) ? -1.0 : 1.0;
    torch::Tensor expected = torch::diag(signs).matmul(hd);
    CHECK(torch::allclose(rht_matrix(n, 42).to(torch::kFloat64), expected, 0, 1e-7));
    torch::Tensor x = test::make_input("normal", 8, 4 * n, 1);
    torch::Tensor y = rht(x, rht_spec(n, 42)).to(torch::kFloat64);
    torch::Tensor ref = x.to(torch::kFloat64).reshape({8 * 4, n}).matmul(expected).reshape({8, 4 * n});
    // FP32 butterflies: log2(n) rounded additions, so a few ulps of the row norm.
    CHECK(((y - ref).abs().max() / ref.abs().max()).item<double>() < 1e-6);
  }
}

TEST_CASE("RHT on dyadic inputs: transform and inverse are exact", "[rht]") {
  torch::Tensor x = test::make_input("dyadic", 16, 128, 3);
  for (int n : {16, 64}) {
    torch::Tensor y = rht(x, rht_spec(n, 9));
    torch::Tensor back = rht(y, rht_spec(n, 9), false, torch::kFloat32, /*inverse=*/true);
    INFO("n = " << n);
    CHECK(torch::equal(back, x));
  }
  // Columnwise: along dim 0, written transposed.
  torch::Tensor yc = rht(x, rht_spec(16, 9), true);
  CHECK(torch::equal(yc, rht(x.t().contiguous(), rht_spec(16, 9))));
}

TEST_CASE("RHT signs come from the seed", "[rht]") {
  uint32_t a[4], b[4], c[4];
  rht_sign_bits(1, a);
  rht_sign_bits(1, b);
  rht_sign_bits(2, c);
  CHECK(std::equal(a, a + 4, b));
  CHECK(!std::equal(a, a + 4, c));
  CHECK(!torch::equal(rht_matrix(16, 1), rht_matrix(16, 2)));
}
