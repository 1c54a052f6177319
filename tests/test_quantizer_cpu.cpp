// The CPU fast path (cpu_quantize) against the oracle (reference_quantize), bit for bit: codes,
// scales, scale codes, amax, tensor amax and dequantized values, over every grid, scale kind,
// rounding, RHT size, block size, layout, dtype and input regime the CUDA tests cover.
#include <torch/torch.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "kernels/quantize/quant_spec.h"
#include "kernels/quantize/quantize.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

struct Outputs {
  std::vector<uint8_t> dequant, codes, scale_bits;
  std::vector<float> scales, amax;
  float tensor_amax = 0;
};

Outputs run(void (*quantize)(const KernelSpec&, const QuantizeIO&), const KernelSpec& ks, const torch::Tensor& x, bool col, bool out_bf16) {
  QuantizeIO io;
  io.in = x.data_ptr();
  io.in_dtype = x.scalar_type() == torch::kBFloat16 ? DType::kBF16 : DType::kF32;
  io.rows = x.size(0);
  io.cols = x.size(1);
  io.columnwise = col;
  io.out_dtype = out_bf16 ? DType::kBF16 : DType::kF32;
  const int64_t R = out_rows(io), L = out_cols(io), nb = R * num_blocks(ks, L);
  Outputs o;
  // Filled with a pattern: an output the quantizer leaves unwritten shows up as a difference.
  o.dequant.assign(static_cast<size_t>(R * L * (out_bf16 ? 2 : 4)), 0xa5);
  o.codes.assign(static_cast<size_t>(R * ((L + 1) / 2)), 0xa5);
  o.scale_bits.assign(static_cast<size_t>(nb), 0xa5);
  o.scales.assign(static_cast<size_t>(nb), -7.0f);
  o.amax.assign(static_cast<size_t>(nb), -7.0f);
  io.dequant = o.dequant.data();
  io.codes = o.codes.data();
  io.scales = o.scales.data();
  io.amax = o.amax.data();
  io.scale_bits = o.scale_bits.data();
  io.tensor_amax = &o.tensor_amax;
  quantize(ks, io);
  return o;
}

template <typename T>
std::string first_difference(const char* what, const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
      std::ostringstream os;
      os << what << "[" << i << "]: reference " << +a[i] << ", cpu " << +b[i];
      return os.str();
    }
  return "";
}

// "" when the fast path equals the oracle on every output, else the first difference.
std::string compare(const torch::Tensor& x_f32, const QuantSpec& s, bool col, bool in_bf16, bool out_bf16) {
  const torch::Tensor x = (in_bf16 ? x_f32.to(torch::kBFloat16) : x_f32).contiguous();
  const KernelSpec ks = make_kernel_spec(s);
  const Outputs a = run(reference_quantize, ks, x, col, out_bf16), b = run(cpu_quantize, ks, x, col, out_bf16);
  std::string d = first_difference("dequant byte", a.dequant, b.dequant);
  if (d.empty()) d = first_difference("code byte", a.codes, b.codes);
  if (d.empty()) d = first_difference("scale", a.scales, b.scales);
  if (d.empty()) d = first_difference("amax", a.amax, b.amax);
  if (d.empty()) d = first_difference("scale code", a.scale_bits, b.scale_bits);
  if (d.empty()) d = first_difference("tensor amax", std::vector<float>{a.tensor_amax}, std::vector<float>{b.tensor_amax});
  return d;
}

QuantSpec spec(const std::string& grid, ScaleKind sc, Rounding rd, int rht, int block) {
  QuantSpec s;
  s.grid = Grid::parse(grid);
  s.scale = sc;
  s.rounding = rd;
  s.rht = rht;
  s.rht_seed = 17;
  s.block = block;
  s.seed = 0x1234567890abcdefULL;
  s.offset = 42;
  return s;
}

}  // namespace

TEST_CASE("CPU fast path == oracle: every grid, scale kind, rounding, RHT size, block size and layout", "[quantizer]") {
  const torch::Tensor x = test::make_input("outliers", 128, 256, 7);
  int n = 0;
  for (const char* g : {"e2m1", "0,0.5,1,1.5,2,3,4", "e1m2", "int4", "int4_tc", "0,0.0796,0.1609,0.2461,0.3379,0.4407,0.5626,0.7230"})
    for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx, ScaleKind::kUnit})
      for (auto rd : {Rounding::kRtne, Rounding::kSr})
        for (int rht : {0, 16, 32, 128})
          for (int block : {16, 32, 64, 128})
            for (bool col : {false, true}) {
              const bool in_bf16 = n % 2 == 0, out_bf16 = n % 4 < 2;
              ++n;
              INFO(g << " scale=" << to_string(sc) << " " << to_string(rd) << " rht=" << rht << " block=" << block << (col ? " col" : " row")
                     << (in_bf16 ? " in=bf16" : " in=f32") << (out_bf16 ? " out=bf16" : " out=f32"));
              REQUIRE(compare(x, spec(g, sc, rd, rht, block), col, in_bf16, out_bf16) == "");
            }
  CHECK(n == 1536);
}

TEST_CASE("CPU fast path == oracle: odd shapes, 2D tiles and every input regime (zeros, subnormals, inf, NaN, near overflow)", "[quantizer]") {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 16}, {97, 160}, {200, 328}, {33, 7}};
  int n = 0;
  for (const auto& sh : shapes)
    for (const char* regime : {"zeros", "subnormal", "normal", "near_overflow", "mixed", "dyadic"})
      for (const char* g : {"e2m1", "e1m2", "int4_tc"})
        for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx})
          for (auto rd : {Rounding::kRtne, Rounding::kSr})
            for (bool col : {false, true})
              for (bool two_d : {false, true}) {
                const torch::Tensor x = test::make_input(regime, sh.first, sh.second, 100 + n);
                QuantSpec s = spec(g, sc, rd, 0, sc == ScaleKind::kMx && !two_d ? 32 : 16);
                s.block_2d = two_d;
                const int64_t L = col ? sh.first : sh.second;
                if (!two_d && n % 3 != 0 && L % 16 == 0) s.rht = 16;
                const bool in_bf16 = n % 2 == 1, out_bf16 = (n / 2) % 2 == 1;
                ++n;
                INFO(sh.first << "x" << sh.second << " " << regime << " " << s.describe() << (col ? " col" : " row")
                               << (in_bf16 ? " in=bf16" : " in=f32") << (out_bf16 ? " out=bf16" : " out=f32"));
                REQUIRE(compare(x, s, col, in_bf16, out_bf16) == "");
              }
  CHECK(n == 1728);
}
