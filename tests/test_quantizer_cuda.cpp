// CUDA kernels against the CPU oracle, bit for bit: codes, scales, amax, dequantized values.
// Runs only with a GPU (the `cuda` CTest entry; make test-gpu).
#include <torch/torch.h>

#include <sstream>

#include "common/error.h"
#include "kernels/quantize/quantize_pair.h"
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

struct Config {
  std::string grid = "e2m1";
  ScaleKind scale = ScaleKind::kFp32;
  Rounding rounding = Rounding::kRtne;
  int rht = 0, block = 16;
  bool block_2d = false, columnwise = false, in_bf16 = false, out_bf16 = false;
  std::string str() const {
    std::ostringstream os;
    os << grid << " scale=" << to_string(scale) << " " << to_string(rounding) << " rht=" << rht << " block=" << block
       << (block_2d ? " 2d" : "") << (columnwise ? " col" : " row") << (in_bf16 ? " in=bf16" : " in=f32")
       << (out_bf16 ? " out=bf16" : " out=f32");
    return os.str();
  }
};

// Both layouts of a pair kernel's output against the CPU's, bit for bit (the caller's INFO names the case).
void check_pair_outputs(const torch::Tensor& want_row, const torch::Tensor& want_col, const std::pair<torch::Tensor, torch::Tensor>& got) {
  for (int k = 0; k < 2; ++k) {
    const torch::Tensor& want = k ? want_col : want_row;
    const torch::Tensor have = (k ? got.second : got.first).cpu();
    REQUIRE(have.sizes() == want.sizes());
    const int64_t i = test::first_bit_mismatch(want, have);
    CHECK(i == -1);
    if (i >= 0) FAIL_CHECK((k ? "columnwise: " : "rowwise: ") << test::describe_mismatch(want, have, i));
  }
}

// Returns "" when CPU and CUDA agree bitwise on every output, else what differs.
std::string compare(const torch::Tensor& x_f32, const Config& c) {
  QuantSpec s;
  s.grid = Grid::parse(c.grid);
  s.scale = c.scale;
  s.rounding = c.rounding;
  s.rht = c.rht;
  s.rht_seed = 17;
  s.block = c.block;
  s.block_2d = c.block_2d;
  s.seed = 0x1234567890abcdefULL;
  s.offset = 42;
  QuantizeOptions o;
  o.columnwise = c.columnwise;
  o.out_dtype = c.out_bf16 ? torch::kBFloat16 : torch::kFloat32;
  torch::Tensor x = c.in_bf16 ? x_f32.to(torch::kBFloat16) : x_f32;
  QuantizedTensor a = quantize(x, s, o);
  QuantizedTensor b = quantize(x.to(torch::kCUDA), s, o);
  torch::cuda::synchronize();
  const std::pair<const char*, std::pair<torch::Tensor, torch::Tensor>> outs[] = {
      {"dequant", {a.dequant, b.dequant}}, {"codes", {a.codes, b.codes}}, {"scales", {a.scales, b.scales}},
      {"amax", {a.amax, b.amax}}, {"scale_bits", {a.scale_bits, b.scale_bits}}, {"tensor_amax", {a.tensor_amax, b.tensor_amax}}};
  for (const auto& o2 : outs) {
    int64_t i = test::first_bit_mismatch(o2.second.first, o2.second.second.cpu());
    if (i >= 0) return std::string(o2.first) + ": " + test::describe_mismatch(o2.second.first, o2.second.second.cpu(), i);
  }
  return "";
}

}  // namespace

TEST_CASE("CUDA == CPU: shapes with padding, real model shapes, layouts and input regimes", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{128, 128}, {304, 304}, {256, 272}, {1, 16}, {97, 160}, {8192, 5120}};
  const char* regimes[] = {"zeros", "subnormal", "normal", "near_overflow", "mixed"};
  std::vector<Config> configs;
  for (const char* g : {"e2m1", "e1m2", "int4_tc"})
    for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx})
      for (auto rd : {Rounding::kRtne, Rounding::kSr}) {
        Config c;
        c.grid = g; c.scale = sc; c.rounding = rd;
        configs.push_back(c);
      }
  size_t k = 0;
  int checked = 0;
  for (const auto& sh : shapes)
    for (bool col : {false, true})
      for (const char* regime : regimes) {
        torch::Tensor x = test::make_input(regime, sh.first, sh.second, 100 + k);
        // Each combination gets the next configs in turn: two per combination, different RHT and dtypes.
        for (int rep = 0; rep < 2; ++rep, ++k) {
          Config c = configs[k % configs.size()];
          c.columnwise = col;
          const int64_t L = col ? sh.first : sh.second;
          c.rht = (k % 3 == 0) ? 0 : (k % 3 == 1 ? 16 : 64);
          if (L % std::max(c.rht, 1) != 0) c.rht = 0;
          c.in_bf16 = k % 2 == 1;
          c.out_bf16 = (k / 2) % 2 == 1;
          c.block = c.scale == ScaleKind::kMx ? 32 : 16;
          std::string diff = compare(x, c);
          INFO(sh.first << "x" << sh.second << " " << regime << " " << c.str());
          CHECK(diff == "");
          ++checked;
        }
      }
  CHECK(checked == 120);
}

TEST_CASE("CUDA == CPU: every grid, scale kind, rounding, RHT size and block size", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  torch::Tensor x = test::make_input("outliers", 256, 384, 7);
  int n = 0;
  for (const char* g : {"e2m1", "e2m1_max4", "e1m2", "int4_tc", "0,0.0796,0.1609,0.2461,0.3379,0.4407,0.5626,0.7230"})
    for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx, ScaleKind::kUnit})
      for (auto rd : {Rounding::kRtne, Rounding::kSr})
        for (int rht : {0, 16, 32, 128})
          for (int block : {16, 32, 64, 128})
            for (bool col : {false, true}) {
              Config c;
              c.grid = std::string(g) == "e2m1_max4" ? "0,0.5,1,1.5,2,3,4" : g;
              c.scale = sc; c.rounding = rd; c.rht = rht; c.block = block; c.columnwise = col;
              c.in_bf16 = (n % 2) == 0;
              c.out_bf16 = (n % 4) < 2;
              ++n;
              std::string diff = compare(x, c);
              INFO(c.str());
              REQUIRE(diff == "");
            }
  // 16x16 2D weight tiles, both layouts, odd shape.
  torch::Tensor w = test::make_input("mixed", 200, 328, 8);
  for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx})
    for (bool col : {false, true}) {
      Config c;
      c.block_2d = true; c.scale = sc; c.columnwise = col;
      INFO(c.str());
      CHECK(compare(w, c) == "");
    }
}

TEST_CASE("CUDA standalone RHT == CPU, bitwise; the unfused path matches too", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  for (const char* regime : {"dyadic", "normal"})
    for (int n : {16, 32, 64, 128})
      for (bool col : {false, true}) {
        torch::Tensor x = test::make_input(regime, 256, 512, 3);
        QuantSpec s;
        s.rht = n;
        s.rht_seed = 5;
        s.scale = ScaleKind::kNvfp4;  // irrelevant to a pure rotation, and must not get in its way
        for (auto odt : {torch::kFloat32, torch::kBFloat16}) {
          torch::Tensor a = rht(x, s, col, odt), b = rht(x.to(torch::kCUDA), s, col, odt).cpu();
          INFO(regime << " n=" << n << (col ? " col" : " row"));
          CHECK(test::first_bit_mismatch(a, b) == -1);
        }
      }
  torch::Tensor x = test::make_input("outliers", 512, 256, 4).to(torch::kBFloat16);
  QuantSpec s;
  s.grid = Grid::from_name("e1m2");
  s.rht = 16;
  s.rounding = Rounding::kSr;
  for (bool col : {false, true}) {
    QuantizeOptions o;
    o.unfused = true;
    o.columnwise = col;
    torch::Tensor a = quantize(x, s, o).dequant, b = quantize(x.to(torch::kCUDA), s, o).dequant.cpu();
    CHECK(test::first_bit_mismatch(a, b) == -1);
  }
}

TEST_CASE("CUDA == CPU on the hot kernel: BF16 dequantized values of the training path, declined blocks included", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  int n = 0;
  for (const char* g : {"e2m1", "e2m1_max4", "e2m1_max2", "e1m2", "int4"})
    for (auto rd : {Rounding::kRtne, Rounding::kSr})
      for (int rht : {0, 16})
        for (bool col : {false, true})
          for (const char* regime : {"normal", "outliers", "mixed", "subnormal", "near_overflow"}) {
            const std::string name = g;
            QuantSpec s;
            s.grid = name == "e2m1_max4" ? Grid::from_name("e2m1", 4) : name == "e2m1_max2" ? Grid::from_name("e2m1", 2) : Grid::from_name(name);
            s.rounding = rd;
            s.rht = rht;
            s.rht_seed = 23;
            s.seed = 0x0123456789abcdefULL + n;
            s.offset = 3;
            QuantizeOptions o;
            o.columnwise = col;
            o.out_dtype = torch::kBFloat16;
            o.want_codes = false;
            // Odd chunk counts, a column count that is not a multiple of the block size, and a large operand.
            for (auto sh : std::vector<std::pair<int64_t, int64_t>>{{16, 48}, {208, 336}, {2048, 1536}}) {
              torch::Tensor x = test::make_input(regime, sh.first, sh.second, 300 + n).to(torch::kBFloat16);
              torch::Tensor a = quantize(x, s, o).dequant, b = quantize(x.to(torch::kCUDA), s, o).dequant.cpu();
              INFO(name << " " << to_string(rd) << " rht=" << rht << (col ? " col " : " row ") << regime << " " << sh.first << "x" << sh.second);
              const int64_t i = test::first_bit_mismatch(a, b);
              CHECK(i == -1);
              if (i >= 0) FAIL_CHECK(test::describe_mismatch(a, b, i));
              ++n;
            }
          }
  CHECK(n == 5 * 2 * 2 * 2 * 5 * 3);
}

TEST_CASE("CUDA pair kernel == two CPU quantizations: both layouts from one read, declined blocks included", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  int n = 0, fused = 0;
  struct Case {
    bool f32;
    Rounding rd;
    int row_rht, col_rht;
  };
  const Case cases[] = {{false, Rounding::kRtne, 16, 16}, {false, Rounding::kSr, 16, 16}, {false, Rounding::kSr, 0, 16},
                        {false, Rounding::kRtne, 0, 16},  {false, Rounding::kRtne, 0, 0},  {false, Rounding::kSr, 0, 0},
                        {true, Rounding::kRtne, 16, 16},  {true, Rounding::kRtne, 0, 0}};
  for (const char* g : {"e2m1", "e1m2", "int4"})
    for (const Case& c : cases)
      for (const char* regime : {"normal", "outliers", "mixed", "subnormal", "near_overflow"})
        // A partial tile in both directions, whole tiles, an operand of a real model's shape, and blocks of
        // 8 row tiles ending in a partial block whose last tile is partial (1168 = 18 x 64 + 16).
        for (auto sh : std::vector<std::pair<int64_t, int64_t>>{{16, 48}, {208, 336}, {2048, 1280}, {1168, 96}}) {
          QuantSpec rs, cs;
          rs.grid = cs.grid = Grid::from_name(g);
          rs.rounding = cs.rounding = c.rd;
          rs.rht = c.row_rht;
          cs.rht = c.col_rht;
          rs.rht_seed = 23;
          cs.rht_seed = 29;  // each output keeps its own keys
          rs.seed = 0x0123456789abcdefULL + n;
          cs.seed = 0x7777777777777777ULL + n;
          rs.offset = 3;
          cs.offset = 5;
          torch::Tensor x = test::make_input(regime, sh.first, sh.second, 500 + n);
          if (!c.f32) x = x.to(torch::kBFloat16);
          QuantizeOptions o;
          o.out_dtype = torch::kBFloat16;
          o.want_codes = false;
          torch::Tensor want_row = quantize(x, rs, o).dequant;
          o.columnwise = true;
          torch::Tensor want_col = quantize(x, cs, o).dequant;
          torch::Tensor xc = x.to(torch::kCUDA);
          fused += quantize_pair_fused(xc, rs, cs);
          auto got = quantize_pair(xc, rs, cs);
          INFO(g << (c.f32 ? " f32 " : " bf16 ") << to_string(c.rd) << " rht=" << c.row_rht << "/" << c.col_rht << " " << regime << " "
                 << sh.first << "x" << sh.second);
          check_pair_outputs(want_row, want_col, got);
          ++n;
        }
  CHECK(n == 3 * 8 * 5 * 4);
  CHECK(fused == n);  // every case ran the pair kernel
}

TEST_CASE("CUDA segmented quantizer == its CPU oracle: segments of any length, padding, keys per operand", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  // 12 segments: empty ones, single rows, lengths that are and are not multiples of 16; then rows past the last end.
  // Columnwise segments start on multiples of 128 (the largest block and RHT), their operands a multiple of the RHT size long.
  const int64_t G = 12, cols = 384;
  std::vector<int32_t> row_ends, col_ends, col_lens;
  const int32_t counts[G] = {17, 0, 70, 1, 32, 0, 45, 16, 128, 3, 0, 200};
  int32_t r = 0, c = 0;
  for (int32_t n : counts) {
    row_ends.push_back(r += n);
    const int32_t len = ((n + 127) / 128) * 128;  // whole RHT-128 segments: the caller's zero rows
    col_lens.push_back(len);
    col_ends.push_back(c += len + (n % 3 == 0 ? 128 : 0));  // some segments with layout padding after the operand
  }
  SegmentKeys keys;
  for (int64_t g = 0; g < G; ++g) {
    keys.seeds.push_back(0x9e3779b97f4a7c15ULL * (g + 1));
    keys.rht_seeds.push_back(1000 + g);
  }
  const int64_t rows_row = r + 9, rows_col = c + 40;
  auto segment_spec = [&](const char* grid, ScaleKind sc, Rounding rd, int rht, int block, uint64_t offset) {
    QuantSpec s;
    s.grid = Grid::parse(grid);
    s.scale = sc;
    s.rounding = rd;
    s.rht = rht;
    s.block = block;
    s.offset = offset;
    s.rht_seed = keys.rht_seeds[8];  // segment 8's signs are the spec's own (the hot kernels' flips from their parameters)
    return s;
  };
  // Columnwise operand lengths: whole RHT segments, or (without the RHT) any length, so that SR indices
  // fall off the 16-element groups.
  auto operand_lens = [&](bool rht) { return rht ? col_lens : std::vector<int32_t>(counts, counts + G); };
  torch::Tensor xr = test::make_input("outliers", rows_row, cols, 3);
  torch::Tensor xc = test::make_input("outliers", rows_col, cols, 4);
  // The caller's zero rows complete each columnwise operand; other layout rows hold anything (not read).
  {
    int64_t begin = 0;
    for (int64_t g = 0; g < G; begin = col_ends[g++]) xc.slice(0, begin + counts[g], begin + col_lens[g]).zero_();
  }
  int n = 0;
  for (const char* grid : {"e2m1", "e1m2", "int4_tc"})
    for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx})
      for (auto rd : {Rounding::kRtne, Rounding::kSr})
        for (int rht : {0, 16, 128})
          for (int block : {16, 64})
            for (bool col : {false, true}) {
              const QuantSpec s = segment_spec(grid, sc, rd, rht, block, 42);
              const bool in_bf16 = (n % 2) == 0, out_bf16 = (n % 4) < 2;
              ++n;
              torch::Tensor x = (col ? xc : xr).to(in_bf16 ? torch::kBFloat16 : torch::kFloat32);
              torch::Tensor ends = torch::tensor(col ? col_ends : row_ends, torch::kInt32);
              torch::Tensor lens = col ? torch::tensor(col_lens, torch::kInt32) : torch::Tensor();
              const auto out = out_bf16 ? torch::kBFloat16 : torch::kFloat32;
              torch::Tensor a = quantize_segments(x, s, keys, ends, lens, col, out);
              torch::Tensor b = quantize_segments(x.to(torch::kCUDA), s, keys, ends.to(torch::kCUDA),
                                                  lens.defined() ? lens.to(torch::kCUDA) : lens, col, out).cpu();
              INFO(grid << " scale=" << to_string(sc) << " " << to_string(rd) << " rht=" << rht << " block=" << block << (col ? " col" : " row")
                        << (in_bf16 ? " in=bf16" : " in=f32") << (out_bf16 ? " out=bf16" : " out=f32"));
              const int64_t i = test::first_bit_mismatch(a, b);
              REQUIRE(i < 0);
            }
  // The training path's specs (the hot kernels: BF16, 1x16, FP32 scales, RHT off or 16) on every input
  // regime, so that the chunks the hot arithmetic declines (zero, subnormal, huge, non-finite) are met.
  // BF16 input (the activations) and FP32 input (the experts' master weights).
  for (const char* regime : {"outliers", "mixed", "subnormal", "near_overflow"}) {
    torch::Tensor hr32 = test::make_input(regime, rows_row, cols, 5);
    torch::Tensor hc32 = test::make_input(regime, rows_col, cols, 6);
    int64_t begin = 0;
    for (int64_t g = 0; g < G; begin = col_ends[g++]) hc32.slice(0, begin + counts[g], begin + col_lens[g]).zero_();
    const torch::Tensor hr = hr32.to(torch::kBFloat16), hc = hc32.to(torch::kBFloat16);
    for (bool f32 : {false, true})
      for (const char* grid : {"e2m1", "e1m2", "int4_tc"})
        for (auto rd : {Rounding::kRtne, Rounding::kSr})
          for (int rht : {0, 16})
            for (bool col : {false, true}) {
              const QuantSpec s = segment_spec(grid, ScaleKind::kFp32, rd, rht, 16, 9);
              const std::vector<int32_t> lens = operand_lens(rht);
              const torch::Tensor& x = col ? (f32 ? hc32 : hc) : (f32 ? hr32 : hr);
              torch::Tensor ends = torch::tensor(col ? col_ends : row_ends, torch::kInt32);
              torch::Tensor ln = col ? torch::tensor(lens, torch::kInt32) : torch::Tensor();
              torch::Tensor a = quantize_segments(x, s, keys, ends, ln, col, torch::kBFloat16);
              torch::Tensor b = quantize_segments(x.to(torch::kCUDA), s, keys, ends.to(torch::kCUDA),
                                                  ln.defined() ? ln.to(torch::kCUDA) : ln, col, torch::kBFloat16).cpu();
              INFO(regime << (f32 ? " fp32 " : " bf16 ") << grid << " " << to_string(rd) << " rht=" << rht << (col ? " col" : " row"));
              REQUIRE(test::first_bit_mismatch(a, b) < 0);
            }
  }
  // A gathered layout (src): each operand's rows taken from scattered rows of a source, -1 (zeros) for
  // the rows that complete an RHT segment and for layout padding. The hot columnwise kernel reads the
  // source in place; every other kernel gets the gathered copy; the CPU oracle gathers. All three equal
  // the oracle on the copy.
  {
    const int64_t in_rows = 600;  // more than the 512 operand rows
    torch::Tensor source = test::make_input("mixed", in_rows, cols, 11).to(torch::kBFloat16);
    std::vector<int64_t> src_col(rows_col, -1), src_row(rows_row, -1);
    int64_t k = 0, cb = 0, rb = 0;
    for (int64_t g = 0; g < G; cb = col_ends[g], rb = row_ends[g], ++g)
      for (int64_t i = 0; i < counts[g]; ++i, ++k) {
        src_col[cb + i] = (k * 263) % in_rows;  // 263 is prime to 600: distinct source rows
        src_row[rb + i] = (k * 263) % in_rows;
      }
    int cases = 0;
    for (const char* grid : {"e2m1", "e1m2"})
      for (auto rd : {Rounding::kRtne, Rounding::kSr})
        for (int rht : {0, 16})
          for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4})
            for (bool col : {true, false}) {
              const QuantSpec s = segment_spec(grid, sc, rd, rht, 16, 5);
              const std::vector<int32_t> lens = operand_lens(rht);
              torch::Tensor src = torch::tensor(col ? src_col : src_row, torch::kInt64);
              torch::Tensor ends = torch::tensor(col ? col_ends : row_ends, torch::kInt32);
              torch::Tensor ln = col ? torch::tensor(lens, torch::kInt32) : torch::Tensor();
              torch::Tensor want = quantize_segments(gather_rows(source, src), s, keys, ends, ln, col, torch::kBFloat16);
              torch::Tensor cpu = quantize_segments(source, s, keys, ends, ln, col, torch::kBFloat16, src);
              torch::Tensor gpu = quantize_segments(source.to(torch::kCUDA), s, keys, ends.to(torch::kCUDA),
                                                    ln.defined() ? ln.to(torch::kCUDA) : ln, col, torch::kBFloat16, src.to(torch::kCUDA)).cpu();
              INFO("gathered " << grid << " " << to_string(rd) << " rht=" << rht << " scale=" << to_string(sc) << (col ? " col" : " row"));
              REQUIRE(want.size(0) == (col ? rows_col : rows_row));
              REQUIRE(test::first_bit_mismatch(want, cpu) < 0);
              REQUIRE(test::first_bit_mismatch(want, gpu) < 0);
              ++cases;
            }
    CHECK(cases == 32);
  }
  // Columnwise widths the hot kernel's 128-column tiles do not divide (200: a partial tile) and one it
  // does not take (202: not a multiple of 8; the general kernel, on the gathered copy when gathered).
  for (int64_t width : {200, 202}) {
    torch::Tensor hc = test::make_input("mixed", rows_col, width, 12);
    int64_t begin = 0;
    for (int64_t g = 0; g < G; begin = col_ends[g++]) hc.slice(0, begin + counts[g], begin + col_lens[g]).zero_();
    hc = hc.to(torch::kBFloat16);
    torch::Tensor source = test::make_input("outliers", 600, width, 13).to(torch::kBFloat16);
    std::vector<int64_t> src_col(rows_col, -1);
    int64_t k = 0;
    for (int64_t g = 0, cb = 0; g < G; cb = col_ends[g++])
      for (int64_t i = 0; i < counts[g]; ++i, ++k) src_col[cb + i] = (k * 263) % 600;
    torch::Tensor src = torch::tensor(src_col, torch::kInt64);
    torch::Tensor ends = torch::tensor(col_ends, torch::kInt32);
    for (auto rd : {Rounding::kRtne, Rounding::kSr})
      for (int rht : {0, 16}) {
        const QuantSpec s = segment_spec("e2m1", ScaleKind::kFp32, rd, rht, 16, 7);
        torch::Tensor ln = torch::tensor(operand_lens(rht), torch::kInt32);
        torch::Tensor a = quantize_segments(hc, s, keys, ends, ln, true, torch::kBFloat16);
        torch::Tensor b = quantize_segments(hc.to(torch::kCUDA), s, keys, ends.to(torch::kCUDA), ln.to(torch::kCUDA), true, torch::kBFloat16).cpu();
        torch::Tensor hc32 = hc.to(torch::kFloat32) * 1.0009765625;  // FP32 values off the BF16 grid
        torch::Tensor a32 = quantize_segments(hc32, s, keys, ends, ln, true, torch::kBFloat16);
        torch::Tensor b32 = quantize_segments(hc32.to(torch::kCUDA), s, keys, ends.to(torch::kCUDA), ln.to(torch::kCUDA), true, torch::kBFloat16).cpu();
        torch::Tensor want = quantize_segments(gather_rows(source, src), s, keys, ends, ln, true, torch::kBFloat16);
        torch::Tensor gpu = quantize_segments(source.to(torch::kCUDA), s, keys, ends.to(torch::kCUDA), ln.to(torch::kCUDA), true,
                                              torch::kBFloat16, src.to(torch::kCUDA)).cpu();
        INFO("width " << width << " " << to_string(rd) << " rht=" << rht);
        REQUIRE(test::first_bit_mismatch(a, b) < 0);
        REQUIRE(test::first_bit_mismatch(a32, b32) < 0);
        REQUIRE(test::first_bit_mismatch(want, gpu) < 0);
      }
  }
  // 16x16 2D weight tiles: 6 experts' [64, 200] weights stacked, both directions.
  torch::Tensor w = test::make_input("mixed", 6 * 64, 200, 8);
  torch::Tensor wends = torch::arange(1, 7, torch::kInt32) * 64;
  SegmentKeys wkeys;
  for (int g = 0; g < 6; ++g) {
    wkeys.seeds.push_back(g * 77 + 1);
    wkeys.rht_seeds.push_back(g);
  }
  for (auto sc : {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx})
    for (bool col : {false, true}) {
      QuantSpec s;
      s.block_2d = true;
      s.scale = sc;
      torch::Tensor a = quantize_segments(w, s, wkeys, wends, torch::Tensor(), col, torch::kFloat32);
      torch::Tensor b = quantize_segments(w.to(torch::kCUDA), s, wkeys, wends.to(torch::kCUDA), torch::Tensor(), col, torch::kFloat32).cpu();
      INFO("2d scale=" << to_string(sc) << (col ? " col" : " row"));
      CHECK(test::first_bit_mismatch(a, b) < 0);
    }
}

TEST_CASE("CUDA segmented pair kernel == CPU oracle of both operands: rowwise in place, columnwise gathered, rows read through a gather", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  // 12 experts' rows (empty ones, single rows, multiples of 16 and not), 9 dropped rows past the last end;
  // the columnwise layout as the MoE WGRAD's: each expert's rows from a multiple of 16, zeros after.
  const int64_t G = 12;
  const int32_t counts[G] = {17, 0, 70, 1, 32, 0, 45, 16, 128, 3, 0, 200};
  std::vector<int32_t> row_ends, col_ends, lens16, lens0;
  int32_t r = 0, c = 0;
  for (int32_t n : counts) {
    row_ends.push_back(r += n);
    lens16.push_back((n + 15) / 16 * 16);  // the RHT-16 operand: the caller's zero rows complete it
    lens0.push_back(n);
    c += (n + 15) / 16 * 16;
    col_ends.push_back(c);
  }
  const int64_t rows = r + 9, layout_rows = rows + G * 15;
  std::vector<int64_t> src(layout_rows, -1);
  for (int64_t g = 0, rb = 0, cb = 0; g < G; rb = row_ends[g], cb = col_ends[g], ++g)
    for (int64_t i = 0; i < counts[g]; ++i) src[cb + i] = rb + i;
  SegmentKeys rkeys, ckeys;
  for (int64_t g = 0; g < G; ++g) {
    rkeys.seeds.push_back(0x9e3779b97f4a7c15ULL * (g + 1));
    rkeys.rht_seeds.push_back(100 + g);
    ckeys.seeds.push_back(0x5851f42d4c957f2dULL * (g + 3));
    ckeys.rht_seeds.push_back(700 + g);
  }
  struct Case {
    Rounding rd;
    int row_rht, col_rht;
  };
  const Case cases[] = {{Rounding::kRtne, 16, 16}, {Rounding::kSr, 16, 16}, {Rounding::kSr, 0, 16},
                        {Rounding::kRtne, 0, 16},  {Rounding::kRtne, 0, 0},  {Rounding::kSr, 0, 0}};
  const torch::Tensor row_ends_d = torch::tensor(row_ends, torch::kInt32).to(torch::kCUDA);
  const torch::Tensor col_ends_d = torch::tensor(col_ends, torch::kInt32).to(torch::kCUDA);
  const torch::Tensor src_h = torch::tensor(src, torch::kInt64), src_d = src_h.to(torch::kCUDA);
  const torch::Tensor rkt = segment_key_table(rkeys, torch::kCUDA), ckt = segment_key_table(ckeys, torch::kCUDA);
  int n = 0, fused = 0;
  for (const char* grid : {"e2m1", "e1m2", "int4"})
    for (const Case& k : cases)
      for (const char* regime : {"normal", "outliers", "mixed", "subnormal", "near_overflow"})
        // Three whole 128-column tiles, and a partial one (208 = 128 + 80).
        for (int64_t cols : {384, 208}) {
          QuantSpec rs, cs;
          rs.grid = cs.grid = Grid::from_name(grid);
          rs.rounding = cs.rounding = k.rd;
          rs.rht = k.row_rht;
          cs.rht = k.col_rht;
          rs.offset = 3 + n;
          cs.offset = 5;
          // Expert 2's signs are the specs' own (the kernel's flips from its parameters), the others' not.
          rs.rht_seed = rkeys.rht_seeds[2];
          cs.rht_seed = ckeys.rht_seeds[2];
          // Without the RHT the columnwise operands are the rows themselves: SR draws off the 16-element groups.
          const std::vector<int32_t>& lens = k.col_rht ? lens16 : lens0;
          // The routed rows as the MoE's dispatch makes them: each a copy of one of fewer token rows (gather),
          // passed formed (x) and read in place through the gather (the kernel's read map).
          const torch::Tensor tokens = test::make_input(regime, rows / 2 + 5, cols, 900 + n).to(torch::kBFloat16);
          const torch::Tensor gather = torch::randint(0, tokens.size(0), {rows}, torch::kInt64);
          torch::Tensor x = tokens.index_select(0, gather);
          const torch::Tensor ln = torch::tensor(lens, torch::kInt32);
          const torch::Tensor want_row = quantize_segments(x, rs, rkeys, torch::tensor(row_ends, torch::kInt32), torch::Tensor(), false, torch::kBFloat16);
          const torch::Tensor want_col = quantize_segments(x, cs, ckeys, torch::tensor(col_ends, torch::kInt32), ln, true, torch::kBFloat16, src_h);
          const torch::Tensor xd = x.to(torch::kCUDA);
          fused += quantize_segments_pair_fused(xd, rs, cs, G);
          const auto got = quantize_segments_pair(xd, rs, rkt, row_ends_d, cs, ckt, col_ends_d, ln.to(torch::kCUDA), src_d);
          INFO(grid << " " << to_string(k.rd) << " rht=" << k.row_rht << "/" << k.col_rht << " " << regime << " cols=" << cols);
          check_pair_outputs(want_row, want_col, got);
          const auto got_gathered = quantize_segments_pair(tokens.to(torch::kCUDA), rs, rkt, row_ends_d, cs, ckt, col_ends_d, ln.to(torch::kCUDA), src_d,
                                                           gather.to(torch::kCUDA));
          INFO("read through the gather");
          check_pair_outputs(want_row, want_col, got_gathered);
          ++n;
        }
  CHECK(n == 3 * 6 * 5 * 2);
  CHECK(fused == n);  // every case ran the pair kernel
  // Rowwise RHT without the columnwise one is no recipe's: two quantizations, the same bits.
  {
    QuantSpec rs, cs;
    rs.rht = 16;
    torch::Tensor x = test::make_input("mixed", rows, 384, 77).to(torch::kBFloat16);
    CHECK_FALSE(quantize_segments_pair_fused(x.to(torch::kCUDA), rs, cs, G));
    const auto got = quantize_segments_pair(x.to(torch::kCUDA), rs, rkt, row_ends_d, cs, ckt, col_ends_d, torch::tensor(lens0, torch::kInt32).to(torch::kCUDA), src_d);
    CHECK(test::first_bit_mismatch(quantize_segments(x, rs, rkeys, torch::tensor(row_ends, torch::kInt32), torch::Tensor(), false, torch::kBFloat16),
                                   got.first.cpu()) < 0);
  }
}

// A CUDA-graph step keeps the step number in device memory (QuantSpec::offset_add): the kernels add
// it to the SR offset. The draws must be those of the same offset given in the spec, in every kernel
// family: the hot kernel (rowwise, columnwise), the general kernel, the segmented kernels, the dense
// and segmented pair kernels.
TEST_CASE("an SR offset in device memory gives the bits of the same offset in the spec", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  const uint64_t step8 = 8 * 1234567;
  torch::Tensor add = torch::tensor({static_cast<int64_t>(step8)}, torch::kInt64).to(torch::kCUDA);
  auto spec = [&](bool device, int rht, int block) {
    QuantSpec s;
    s.rounding = Rounding::kSr;
    s.rht = rht;
    s.rht_seed = 5;
    s.block = block;
    s.seed = 0xfeedbeefcafe1234ULL;
    s.offset = 3 + (device ? 0 : step8);
    if (device) s.offset_add = reinterpret_cast<const uint64_t*>(add.data_ptr<int64_t>());
    return s;
  };
  int n = 0;
  for (bool bf16 : {true, false})  // BF16 in and out: the hot kernel; FP32: the general kernel
    for (int rht : {0, 16})
      for (int block : {16, 32})
        for (bool col : {false, true}) {
          torch::Tensor x = test::make_input("mixed", 512, 384, 7 + n).to(torch::kCUDA).to(bf16 ? torch::kBFloat16 : torch::kFloat32);
          QuantizeOptions o;
          o.columnwise = col;
          o.out_dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
          o.want_codes = false;
          torch::Tensor a = quantize(x, spec(false, rht, block), o).dequant.cpu(), b = quantize(x, spec(true, rht, block), o).dequant.cpu();
          INFO((bf16 ? "bf16" : "f32") << " rht=" << rht << " block=" << block << (col ? " col" : " row"));
          CHECK(test::first_bit_mismatch(a, b) == -1);
          // Segmented: 4 experts' rows (multiples of 16 long, so columnwise blocks start on their boundaries).
          SegmentKeys keys;
          for (int g = 0; g < 4; ++g) {
            keys.seeds.push_back(0x1000 + g);
            keys.rht_seeds.push_back(77 + g);
          }
          torch::Tensor ends = torch::tensor(std::vector<int32_t>{64, 64, 256, 512}, torch::kInt32).to(torch::kCUDA);
          torch::Tensor sa = quantize_segments(x, spec(false, rht, block), keys, ends, torch::Tensor(), col, o.out_dtype).cpu();
          torch::Tensor sb = quantize_segments(x, spec(true, rht, block), keys, ends, torch::Tensor(), col, o.out_dtype).cpu();
          CHECK(test::first_bit_mismatch(sa, sb) == -1);
          if (bf16 && block == 16 && !col) {
            // The pair kernels (both layouts from one read): dense, and segmented with the columnwise
            // operand gathered through its row map (here the identity: the segments are whole 16-row groups).
            CHECK(quantize_pair_fused(x, spec(true, rht, block), spec(true, rht, block)));
            const auto pa = quantize_pair(x, spec(false, rht, block), spec(false, rht, block));
            const auto pb = quantize_pair(x, spec(true, rht, block), spec(true, rht, block));
            CHECK(test::first_bit_mismatch(pa.first.cpu(), pb.first.cpu()) == -1);
            CHECK(test::first_bit_mismatch(pa.second.cpu(), pb.second.cpu()) == -1);
            const torch::Tensor kt = segment_key_table(keys, torch::kCUDA);
            const torch::Tensor lens = torch::tensor(std::vector<int32_t>{64, 0, 192, 256}, torch::kInt32).to(torch::kCUDA);
            const torch::Tensor src = torch::arange(512, torch::dtype(torch::kInt64).device(torch::kCUDA));
            CHECK(quantize_segments_pair_fused(x, spec(true, rht, block), spec(true, rht, block), 4));
            const auto qa = quantize_segments_pair(x, spec(false, rht, block), kt, ends, spec(false, rht, block), kt, ends, lens, src);
            const auto qb = quantize_segments_pair(x, spec(true, rht, block), kt, ends, spec(true, rht, block), kt, ends, lens, src);
            CHECK(test::first_bit_mismatch(qa.first.cpu(), qb.first.cpu()) == -1);
            CHECK(test::first_bit_mismatch(qa.second.cpu(), qb.second.cpu()) == -1);
          }
          ++n;
        }
  CHECK(n == 16);
  // The CPU references read no device memory: such a spec is refused there.
  QuantizeOptions o;
  CHECK_THROWS_AS(quantize(torch::ones({16, 16}), spec(true, 0, 16), o), Error);
}

TEST_CASE("CUDA batched pair kernel == two CPU quantizations of each matrix: many weights, expert stacks, declined blocks", "[quantizer][cuda]") {
  UFP4_NEED_GPU();
  int cases = 0;
  for (const char* g : {"e2m1", "e1m2", "int4"})
    for (int rht : {16, 0}) {
      QuantSpec rs, cs;
      rs.grid = cs.grid = Grid::from_name(g);
      rs.rht = cs.rht = rht;
      rs.rht_seed = 23;
      cs.rht_seed = 29;  // each output keeps its own signs
      rs.seed = 11, cs.seed = 13;
      // More tasks than one launch takes (kPairBatchTasks), of the shapes weights have: whole and partial
      // tiles, expert stacks [E, N, K], every input regime, one weight with all-zero and tiny blocks (the
      // hot arithmetic declines them; the general code takes them).
      std::vector<torch::Tensor> ws;
      const std::vector<std::vector<int64_t>> shapes = {{16, 48}, {208, 336}, {1168, 96}, {4, 64, 48}, {3, 208, 32}, {2, 16, 16}, {384, 768}};
      const char* regimes[] = {"normal", "outliers", "mixed", "subnormal", "near_overflow"};
      for (int i = 0; i < kPairBatchTasks + 5; ++i) {
        const auto& sh = shapes[i % shapes.size()];
        const int64_t E = sh.size() == 3 ? sh[0] : 1, N = sh[sh.size() - 2], K = sh.back();
        torch::Tensor w = test::make_input(regimes[i % 5], E * N, K, 900 + i).view(sh).contiguous();
        if (i == 1) {
          w.view({-1, K}).narrow(0, 16, 16).narrow(1, 32, 16).zero_();
          w.view({-1, K}).narrow(0, 48, 16).narrow(1, 0, 16).mul_(1e-30);
        }
        ws.push_back(w);
      }
      std::vector<torch::Tensor> wd;
      for (const auto& w : ws) {
        wd.push_back(w.to(torch::kCUDA));
        REQUIRE(quantize_pair_batch_fused(wd.back(), rs, cs));
      }
      const auto got = quantize_pair_batch(wd, rs, cs);
      REQUIRE(got.size() == ws.size());
      QuantizeOptions o;
      o.out_dtype = torch::kBFloat16;
      o.want_codes = false;
      for (size_t i = 0; i < ws.size(); ++i) {
        const torch::Tensor w = ws[i].dim() == 3 ? ws[i] : ws[i].unsqueeze(0);
        const torch::Tensor row = got[i].first.dim() == 3 ? got[i].first : got[i].first.unsqueeze(0);
        const torch::Tensor col = got[i].second.dim() == 3 ? got[i].second : got[i].second.unsqueeze(0);
        REQUIRE(got[i].first.sizes() == ws[i].sizes());
        for (int64_t e = 0; e < w.size(0); ++e) {
          o.columnwise = false;
          const torch::Tensor want_row = quantize(w[e], rs, o).dequant;
          o.columnwise = true;
          const torch::Tensor want_col = quantize(w[e], cs, o).dequant;
          INFO(g << " rht=" << rht << " weight " << i << " matrix " << e);
          check_pair_outputs(want_row, want_col, {row[e], col[e]});
          ++cases;
        }
      }
    }
  CHECK(cases > 6 * (kPairBatchTasks + 5));
  // Outside it: BF16 input, stochastic rounding, a row count no multiple of 16.
  QuantSpec rtne, sr;
  rtne.grid = sr.grid = Grid::from_name("e1m2");
  rtne.rht = sr.rht = 16;
  sr.rounding = Rounding::kSr;
  const torch::Tensor w = torch::randn({64, 64}).cuda();
  CHECK_FALSE(quantize_pair_batch_fused(w.to(torch::kBFloat16), rtne, rtne));
  CHECK_FALSE(quantize_pair_batch_fused(w, sr, sr));
  CHECK_FALSE(quantize_pair_batch_fused(torch::randn({40, 64}).cuda(), rtne, rtne));
  CHECK_THROWS_AS(quantize_pair_batch({w, w.to(torch::kBFloat16)}, rtne, rtne), Error);
}
