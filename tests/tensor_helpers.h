// Test helpers on tensors: bitwise comparison and the quantizer tests' input regimes.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace ufp4::test {

// Index of the first element whose bits differ (NaN == NaN only when the bits match), or -1.
int64_t first_bit_mismatch(const torch::Tensor& a, const torch::Tensor& b);
std::string describe_mismatch(const torch::Tensor& a, const torch::Tensor& b, int64_t index);

// Input regimes of a quantizer test (fixed seed): "normal", "zeros", "subnormal", "near_overflow",
// "outliers", "dyadic", "mixed" (a bit of everything, including zero blocks, inf and NaN).
torch::Tensor make_input(const std::string& regime, int64_t rows, int64_t cols, uint64_t seed);

}  // namespace ufp4::test
