// The kernel suite (Figure 11): standalone vs fused vs unfused RHT + quantization, against a
// device-to-device copy of the same bytes, per shape, grid, rounding and layout. Each repeat is timed
// with CUDA events around the launches alone, after a memset of twice the L2 size has evicted the
// operands; Google Benchmark takes these as manual times.
#include "harness/bench/bench.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "common/error.h"
#include "common/log.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"

#ifdef UFP4_WITH_CUDA
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include "kernels/numerics/float_bits.h"
#include "kernels/quantize/quantize_cuda.h"
#endif

namespace ufp4 {

#ifdef UFP4_WITH_CUDA
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("bench: ") + what + ": " + cudaGetErrorString(e));
}

struct Shape {
  int64_t rows, cols;
  const char* of;        // which linear operand it is
  int64_t segments = 0;  // > 0: also the segmented quantizer over this many equal expert segments
};

// Tokens per micro-batch for activation shapes: 16,384 (8 x 2,048). MoE expert inputs get
// tokens x top-k / experts of them.
std::vector<Shape> shapes(bool quick) {
  if (quick) return {{2048, 768, "smoke"}, {16384, 2048, "smoke", 8}};
  return {{16384, 768, "dense-113m X of linear_qkv / linear_fc1"},
          {16384, 2048, "dense-113m X of linear_fc2; dense-1.5b X of linear_qkv / linear_fc1"},
          {768, 2048, "dense-113m W of linear_fc2 (hidden x ffn)"},
          {16384, 384, "moe-81m X of the router and shared expert"},
          {16384, 5632, "dense-1.5b X of linear_fc2"},
          {2048, 5632, "dense-1.5b W of linear_fc2 (hidden x ffn)"},
          {131072, 384, "moe-81m routed X of linear_fc1 (32,768 tokens x top-4, 32 experts)", 32},
          {1536, 2048, "moe-7.9b expert X (16,384 x 6 / 64 tokens)"},
          {1536, 1024, "moe-7.9b expert X of linear_fc2"},
          {2048, 1024, "moe-7.9b expert W (hidden x expert ffn)"},
          {8192, 8192, "square"}};
}

struct Device {
  void *in = nullptr, *out = nullptr, *tmp = nullptr, *flush = nullptr;
  size_t flush_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  int flushes = 0;
  // Segment tables for up to kMaxSegments experts: ends, SR seeds, RHT sign words.
  static constexpr int64_t kMaxSegments = 256;
  int32_t* seg_ends = nullptr;
  uint64_t* seg_seeds = nullptr;
  uint32_t* seg_signs = nullptr;
  int64_t* seg_src = nullptr;  // the pair's layout row map (identity: equal segments of whole 16-row groups need no padding)
  int64_t seg_src_rows = 0;

  explicit Device(int64_t max_elems) {
    int dev = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    flush_bytes = std::max<size_t>(2 * static_cast<size_t>(prop.l2CacheSize), 64u << 20);
    const size_t bytes = static_cast<size_t>(max_elems) * 2;
    check(cudaMalloc(&in, bytes), "cudaMalloc");
    check(cudaMalloc(&out, bytes), "cudaMalloc");
    check(cudaMalloc(&tmp, bytes), "cudaMalloc");
    check(cudaMalloc(&flush, flush_bytes), "cudaMalloc");
    check(cudaMalloc(&seg_ends, kMaxSegments * sizeof(int32_t)), "cudaMalloc");
    check(cudaMalloc(&seg_seeds, kMaxSegments * sizeof(uint64_t)), "cudaMalloc");
    check(cudaMalloc(&seg_signs, kMaxSegments * 4 * sizeof(uint32_t)), "cudaMalloc");
    std::vector<uint64_t> seeds(kMaxSegments);
    std::vector<uint32_t> signs(kMaxSegments * 4);
    for (int64_t g = 0; g < kMaxSegments; ++g) {
      seeds[g] = 1000 + g;
      rht_sign_bits(2000 + g, &signs[4 * g]);
    }
    check(cudaMemcpy(seg_seeds, seeds.data(), seeds.size() * sizeof(uint64_t), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(seg_signs, signs.data(), signs.size() * sizeof(uint32_t), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
    // Gaussian BF16 input (never zeros: they hide unwritten outputs and can run faster).
    std::vector<uint16_t> host(static_cast<size_t>(max_elems));
    std::mt19937_64 rng(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& h : host) h = f32_to_bf16_bits(nd(rng));
    check(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~Device() {
    cudaFree(in); cudaFree(out); cudaFree(tmp); cudaFree(flush);
    cudaFree(seg_ends); cudaFree(seg_seeds); cudaFree(seg_signs); cudaFree(seg_src);
    cudaEventDestroy(start); cudaEventDestroy(stop); cudaStreamDestroy(stream);
  }
  // Evicts the operands from L2 between repeats (not timed).
  void flush_l2() { check(cudaMemsetAsync(flush, ++flushes & 0xff, flush_bytes, stream), "L2 flush"); }
};

struct Case {
  std::string name, kind, grid, rounding;
  bool columnwise = false;
  Shape shape{};
  double bytes = 0, flops = 0;
};

KernelSpec spec_of(const Case& c, int rht) {
  QuantSpec s;
  s.grid = Grid::from_name(c.grid);
  s.rounding = parse_rounding(c.rounding);
  s.rht = rht;
  s.rht_seed = 1234;
  s.seed = 99;
  s.offset = 7;
  return make_kernel_spec(s);
}

// Enqueues the case's work on the stream.
void launch(const Case& c, Device& d) {
  const int64_t R = c.shape.rows, C = c.shape.cols, n = R * C;
  if (c.kind == "copy") {
    check(cudaMemcpyAsync(d.out, d.in, static_cast<size_t>(n) * 2, cudaMemcpyDeviceToDevice, d.stream), "copy");
    return;
  }
  if (c.kind == "segments") {
    const int64_t G = c.shape.segments;  // ends uploaded by upload_segment_ends()
    SegmentedQuantizeIO io;
    io.in = d.in;
    io.in_dtype = DType::kBF16;
    io.rows = R;
    io.cols = C;
    io.columnwise = c.columnwise;
    io.dequant = d.out;
    io.out_dtype = DType::kBF16;
    io.segments = G;
    io.ends = d.seg_ends;
    io.seeds = d.seg_seeds;
    io.rht_signs = d.seg_signs;
    cuda_quantize_segments(spec_of(c, 16), io, d.stream);
    return;
  }
  if (c.kind == "segments-pair") {
    // Both operands of the tensor from one read (as the MoE layer quantizes X and dY): rowwise in place
    // into out, columnwise through the row map into tmp.
    SegmentedPairIO p;
    for (SegmentedQuantizeIO* io : {&p.row, &p.col}) {
      io->in = d.in;
      io->in_dtype = io->out_dtype = DType::kBF16;
      io->rows = R;
      io->cols = C;
      io->segments = c.shape.segments;
      io->ends = d.seg_ends;
      io->seeds = d.seg_seeds;
      io->rht_signs = d.seg_signs;
    }
    p.row.dequant = d.out;
    p.col.dequant = d.tmp;
    p.col.columnwise = true;
    p.col.src_rows = d.seg_src;
    p.col.in_rows = R;
    cuda_quantize_segments_pair(spec_of(c, 16), spec_of(c, 16), p, d.stream);
    return;
  }
  if (c.kind == "pair") {
    // Both layouts of a dense linear's operand from one read (kernels/quantize/quantize_pair.h), the RHT on both.
    PairIO p;
    p.in = d.in;
    p.rows = R;
    p.cols = C;
    p.row_out = d.out;
    p.col_out = d.tmp;
    cuda_quantize_pair(spec_of(c, 16), spec_of(c, 16), p, d.stream);
    return;
  }
  QuantizeIO io;
  io.in_dtype = DType::kBF16;
  io.out_dtype = DType::kBF16;
  io.dequant = d.out;
  if (c.kind == "unfused") {
    // Rotated operand materialized in BF16 (transposed when columnwise), then a plain rowwise quantization.
    cuda_rht(spec_of(c, 16), d.in, DType::kBF16, d.tmp, DType::kBF16, R, C, c.columnwise, d.stream);
    io.in = d.tmp;
    io.rows = c.columnwise ? C : R;
    io.cols = c.columnwise ? R : C;
    cuda_quantize(spec_of(c, 0), io, d.stream);
    return;
  }
  io.in = d.in;
  io.rows = R;
  io.cols = C;
  io.columnwise = c.columnwise;
  cuda_quantize(spec_of(c, c.kind == "fused" ? 16 : 0), io, d.stream);
}

// Equal segments of whole 16-row groups (the expert layout of a balanced router), before the timing.
void upload_segment_ends(const Case& c, Device& d) {
  const int64_t G = c.shape.segments, R = c.shape.rows;
  if (G > Device::kMaxSegments) throw Error("bench: too many segments");
  std::vector<int32_t> ends(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) ends[g] = static_cast<int32_t>(((R * (g + 1) / G) / 16) * 16);
  ends[G - 1] = static_cast<int32_t>(R);
  check(cudaMemcpy(d.seg_ends, ends.data(), ends.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "cudaMemcpy");
  if (c.kind == "segments-pair" && d.seg_src_rows < R) {
    std::vector<int64_t> src(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) src[r] = r;
    cudaFree(d.seg_src);
    check(cudaMalloc(&d.seg_src, src.size() * sizeof(int64_t)), "cudaMalloc");
    check(cudaMemcpy(d.seg_src, src.data(), src.size() * sizeof(int64_t), cudaMemcpyHostToDevice), "cudaMemcpy");
    d.seg_src_rows = R;
  }
}

void time_case(benchmark::State& st, const Case& c, Device& d) {
  try {
    if (c.kind == "segments" || c.kind == "segments-pair") upload_segment_ends(c, d);
    launch(c, d);  // warm-up: module load, first-touch
    check(cudaStreamSynchronize(d.stream), "warm-up");
    for (auto _ : st) {
      d.flush_l2();
      check(cudaEventRecord(d.start, d.stream), "cudaEventRecord");
      launch(c, d);
      check(cudaEventRecord(d.stop, d.stream), "cudaEventRecord");
      check(cudaEventSynchronize(d.stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, d.start, d.stop), "cudaEventElapsedTime");
      st.SetIterationTime(ms * 1e-3);
    }
    check(cudaGetLastError(), "kernel");
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
    return;
  }
  st.counters["bytes"] = c.bytes;
  st.counters["flops"] = c.flops;
  st.counters["GBps"] = benchmark::Counter(c.bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

std::vector<Case> cases(bool quick) {
  std::vector<Case> v;
  for (const Shape& sh : shapes(quick)) {
    const std::string dims = std::to_string(sh.rows) + "x" + std::to_string(sh.cols);
    const double n = static_cast<double>(sh.rows) * static_cast<double>(sh.cols);
    Case copy;
    copy.name = "copy/" + dims;
    copy.kind = "copy";
    copy.shape = sh;
    copy.bytes = 4 * n;  // BF16 read + BF16 write: the same bytes as a fused quantize-dequantize
    v.push_back(copy);
    for (const char* kind : {"standalone", "fused", "unfused"})
      for (const char* grid : {"e2m1", "e1m2"})
        for (const char* rounding : {"rtne", "sr"})
          for (bool col : {false, true}) {
            Case c;
            c.kind = kind; c.grid = grid; c.rounding = rounding; c.columnwise = col; c.shape = sh;
            c.name = std::string("quantize/") + kind + "/" + grid + "/" + rounding + "/" + (col ? "col" : "row") + "/" + dims;
            const bool rht = c.kind != "standalone";
            c.bytes = (c.kind == "unfused" ? 8 : 4) * n;  // unfused: the BF16 temporary is written and read back
            // FLOPs: 4 butterfly adds + 1 scaling multiply per element for RHT-16; one divide and one
            // multiply (dequantize) per element for the quantizer.
            c.flops = n * (2 + (rht ? 5 : 0));
            v.push_back(c);
          }
    // Both layouts from one read (the dense pair kernel), against the fused row and col rows' sum.
    for (const char* grid : {"e2m1", "e1m2"})
      for (const char* rounding : {"rtne", "sr"}) {
        Case c;
        c.kind = "pair"; c.grid = grid; c.rounding = rounding; c.shape = sh;
        c.name = std::string("quantize/pair/") + grid + "/" + rounding + "/" + dims;
        c.bytes = 6 * n;  // one BF16 read, two BF16 writes
        c.flops = n * 14;
        v.push_back(c);
      }
    // The segmented quantizer (RHT-16 fused, each segment with its own keys) beside the same tensor's "fused" rows.
    if (sh.segments > 0)
      for (const char* grid : {"e2m1", "e1m2"})
        for (const char* rounding : {"rtne", "sr"})
          for (bool col : {false, true}) {
            Case c;
            c.kind = "segments"; c.grid = grid; c.rounding = rounding; c.columnwise = col; c.shape = sh;
            c.name = std::string("quantize/segments") + std::to_string(sh.segments) + "/" + grid + "/" + rounding + "/" + (col ? "col" : "row") + "/" + dims;
            c.bytes = 4 * n;
            c.flops = n * 7;
            v.push_back(c);
          }
    // Both of its layouts from one read (the segmented pair kernel): against the row and col rows' sum.
    if (sh.segments > 0)
      for (const char* grid : {"e2m1", "e1m2"})
        for (const char* rounding : {"rtne", "sr"}) {
          Case c;
          c.kind = "segments-pair"; c.grid = grid; c.rounding = rounding; c.shape = sh;
          c.name = std::string("quantize/segments") + std::to_string(sh.segments) + "/" + grid + "/" + rounding + "/pair/" + dims;
          c.bytes = 6 * n;  // one BF16 read, two BF16 writes
          c.flops = n * 14;
          v.push_back(c);
        }
  }
  return v;
}

// Keeps the aggregates (median, mean, stddev) of each benchmark while printing as usual.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  std::map<std::string, KernelBenchRow> rows;
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Aggregate) continue;
      KernelBenchRow& row = rows[r.run_name.function_name];
      row.name = r.run_name.function_name;
      const double us = r.GetAdjustedRealTime() * to_us(r.time_unit);
      if (r.aggregate_name == "median") row.time_us = us;
      if (r.aggregate_name == "mean") {
        row.time_us_mean = us;
        row.iterations = static_cast<int64_t>(r.iterations);
        row.repetitions = static_cast<int64_t>(r.repetitions);
        auto b = r.counters.find("bytes"), f = r.counters.find("flops");
        if (b != r.counters.end()) row.bytes = b->second.value;
        if (f != r.counters.end()) row.flops = f->second.value;
      }
      if (r.aggregate_name == "stddev") row.time_us_sd = us;
    }
    ConsoleReporter::ReportRuns(runs);
  }

 private:
  static double to_us(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond: return 1e-3;
      case benchmark::kMicrosecond: return 1.0;
      case benchmark::kMillisecond: return 1e3;
      default: return 1e6;
    }
  }
};

}  // namespace

std::vector<KernelBenchRow> run_kernel_benchmarks(const KernelBenchOptions& o) {
  if (!cuda_available()) throw Error("bench kernels: no CUDA device is visible (the kernel suite needs a GPU)");
  const std::vector<Case> all = cases(o.quick);
  int64_t max_elems = 0;
  for (const auto& c : all) max_elems = std::max(max_elems, c.shape.rows * c.shape.cols);
  log_info("bench kernels: " + std::to_string(all.size()) + " benchmarks, " + std::to_string(o.repetitions) + " x " +
           std::to_string(o.iterations) + " timed repeats each");
  Device dev(max_elems);
  for (const auto& c : all)
    benchmark::RegisterBenchmark(c.name.c_str(), [&c, &dev](benchmark::State& st) { time_case(st, c, dev); })
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->Iterations(o.iterations)
        ->Repetitions(o.repetitions)
        ->ReportAggregatesOnly(true);
  std::vector<std::string> args = {"ufp4-bench"};
  if (!o.filter.empty()) args.push_back("--benchmark_filter=" + o.filter);
  if (!o.json_out.empty()) {
    args.push_back("--benchmark_out=" + o.json_out);
    args.push_back("--benchmark_out_format=json");
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  benchmark::Initialize(&argc, argv.data());
  CollectingReporter rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  benchmark::ClearRegisteredBenchmarks();
  std::vector<KernelBenchRow> out;
  for (auto& kv : rep.rows) out.push_back(kv.second);
  if (out.empty()) throw Error("bench kernels: no benchmark matched --filter '" + o.filter + "'");
  return out;
}

#else

std::vector<KernelBenchRow> run_kernel_benchmarks(const KernelBenchOptions&) {
  throw Error("bench kernels: this build has no CUDA kernels (build on a GPU machine: make gpu)");
}

#endif

void write_kernel_bench(const std::string& path, const std::vector<KernelBenchRow>& rows, const KernelBenchOptions& o) {
  H5Writer w(path);
  write_bench_header(w, std::string("kernel benchmarks (Google Benchmark, manual time from CUDA events, L2 flushed before each repeat)"));
  w.attr("iterations", static_cast<int64_t>(o.iterations));
  w.attr("repetitions", static_cast<int64_t>(o.repetitions));
  write_kernel_rows(w, rows);
  w.commit();
}

}  // namespace ufp4
