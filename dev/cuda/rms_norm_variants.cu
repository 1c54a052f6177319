// The fused RMSNorm's kernels against their variants, first bit for bit, then timed with CUDA events (the median
// of repeats). Not part of the library.
// - Forward: the previous kernel (a warp a row, walking the row a vector at a time and reading it again for the
//   second pass) beside the production forward (cuda_rms_norm_forward, which keeps BF16 rows of up to 1024 in
//   registers): y, r and the residual sum, on model-like and special-valued rows.
// - Backward: the production choice of rows in flight a warp (cuda_rms_norm_backward) beside 1, 2 and 4 rows
//   (cuda_rms_norm_backward_rows; the production choice was 4 rows for d <= 512 and 2 for d <= 1024 before
//   the choice by registers): dx and dw, with the residual's gradient added.
//
//   cmake --build build --target dev && build/ufp4_dev_rms_norm [rows d ...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/fused/fused_device.cuh"
#include "kernels/fused/fused_kernels.h"
#include "dev/cuda/dev_harness.cuh"

namespace ufp4 {
namespace {

constexpr int kRowsPerBlock = 8;

// fused_kernels_cuda.cu's forward at b0ca9f8, BF16.
__global__ void __launch_bounds__(256) forward_previous(const RmsNormIO io) {
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= io.rows) return;
  const int64_t o = t * io.d, nv = io.d / 8;
  auto load_sum8 = [&](int64_t elem, float (&x)[8]) {
    load8<true>(io.x, elem, x);
    if (!io.residual) return;
    float res[8];
    load8<true>(io.residual, elem, res);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = round_to_dtype(true, add_rn(x[e], res[e]));
  };
  float acc = 0.0f;
  for (int64_t v = lane; v < nv; v += 32) {
    float x[8];
    load_sum8(o + 8 * v, x);
    if (io.residual) store8<true>(io.sum, o + 8 * v, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(x[e], x[e], acc);
  }
  const float ss = warp_tree_sum(acc);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(io.d) + io.eps);
  if (lane == 0) io.r[t] = canon_nan(r);
  for (int64_t v = lane; v < nv; v += 32) {
    float x[8], w[8];
    load_sum8(o + 8 * v, x);
    load8<false>(io.w, 8 * v, w);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = mul_rn(mul_rn(x[e], r), w[e]);
    store8<true>(io.y, o + 8 * v, x);
  }
}

// Rows of a kind: 0 model-like; 1 special values sprinkled (NaN, +-inf, +-0, huge, subnormal) and a zero row.
void fill(int kind, int64_t rows, int64_t d, std::vector<uint16_t>& x, std::vector<uint16_t>& res, std::vector<float>& w) {
  std::mt19937_64 g(99 + kind);
  std::normal_distribution<float> n(0.0f, 2.0f);
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  x.resize(rows * d);
  res.resize(rows * d);
  w.resize(d);
  for (auto& v : x) v = f32_to_bf16_bits(n(g));
  for (auto& v : res) v = f32_to_bf16_bits(0.5f * n(g));
  for (auto& v : w) v = u(g);
  if (kind == 1) {
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.0e38f, -3.0e38f, 1e-40f};
    std::uniform_int_distribution<int64_t> at(0, rows * d - 1);
    for (int i = 0; i < 64; ++i) x[at(g)] = f32_to_bf16_bits(special[i % 8]);
    if (rows > 5)
      for (int64_t c = 0; c < d; ++c) x[5 * d + c] = res[5 * d + c] = f32_to_bf16_bits(0.0f);
  }
}

struct Outputs {
  void *y = nullptr, *sum = nullptr;
  float* r = nullptr;
};

bool same(const void* a, const void* b, size_t bytes) {
  std::vector<char> p(bytes), q(bytes);
  CHECK_CUDA(cudaMemcpy(p.data(), a, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(q.data(), b, bytes, cudaMemcpyDeviceToHost));
  return std::memcmp(p.data(), q.data(), bytes) == 0;
}

int run(int64_t rows, int64_t d) {
  const size_t n = static_cast<size_t>(rows * d);
  void *x, *res;
  float* w;
  CHECK_CUDA(cudaMalloc(&x, n * 2));
  CHECK_CUDA(cudaMalloc(&res, n * 2));
  CHECK_CUDA(cudaMalloc(&w, d * 4));
  Outputs p, q;  // previous, production
  for (Outputs* o : {&p, &q}) {
    CHECK_CUDA(cudaMalloc(&o->y, n * 2));
    CHECK_CUDA(cudaMalloc(&o->sum, n * 2));
    CHECK_CUDA(cudaMalloc(&o->r, rows * 4));
  }
  auto io_of = [&](const Outputs& o, bool residual) {
    RmsNormIO io;
    io.dtype = DType::kBF16;
    io.rows = rows;
    io.d = d;
    io.x = x;
    io.w = w;
    io.y = o.y;
    io.r = o.r;
    io.residual = residual ? res : nullptr;
    io.sum = residual ? o.sum : nullptr;
    return io;
  };
  const unsigned blocks = static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  int bad = 0;
  for (int kind = 0; kind < 2; ++kind) {
    std::vector<uint16_t> hx, hres;
    std::vector<float> hw;
    fill(kind, rows, d, hx, hres, hw);
    CHECK_CUDA(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(res, hres.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(w, hw.data(), d * 4, cudaMemcpyHostToDevice));
    for (bool residual : {false, true}) {
      forward_previous<<<blocks, 256>>>(io_of(p, residual));
      cuda_rms_norm_forward(io_of(q, residual), nullptr);
      CHECK_CUDA(cudaDeviceSynchronize());
      const bool eq = same(p.y, q.y, n * 2) && same(p.r, q.r, rows * 4) && (!residual || same(p.sum, q.sum, n * 2));
      std::printf("rows %lld d %lld kind %d residual %d: y, r%s %s\n", static_cast<long long>(rows), static_cast<long long>(d), kind, residual,
                  residual ? ", sum" : "", eq ? "bit-identical" : "DIFFERENT");
      bad += !eq;
    }
  }
  std::printf("| rows x d (BF16) | residual | previous | production | previous / production | production bandwidth |\n|---|---|---|---|---|---|\n");
  for (bool residual : {false, true}) {
    const RmsNormIO ip = io_of(p, residual), iq = io_of(q, residual);
    const float tp = median_ms([&] { forward_previous<<<blocks, 256>>>(ip); }, 51);
    const float tq = median_ms([&] { cuda_rms_norm_forward(iq, nullptr); }, 51);
    const double gb = static_cast<double>(n) * 2 * (residual ? 4 : 2) / 1e9;  // x (+ residual) in, y (+ sum) out
    std::printf("| %lldx%lld | %s | %.1f us | %.1f us | %.2f | %.2f TB/s |\n", static_cast<long long>(rows), static_cast<long long>(d),
                residual ? "yes" : "no", tp * 1e3, tq * 1e3, tp / tq, gb / tq);
  }
  for (Outputs* o : {&p, &q}) { cudaFree(o->y); cudaFree(o->sum); cudaFree(o->r); }
  cudaFree(x);
  cudaFree(res);
  cudaFree(w);
  return bad;
}

// The backward's rows in flight: 0 (production), 1, 2, 4 on the same inputs (x, dy and dsum model-like, r from
// the forward); each one's dx and dw against production's, then their times.
int run_backward(int64_t rows, int64_t d) {
  const size_t n = static_cast<size_t>(rows * d);
  const int64_t partials = rms_norm_partials(rows, d);
  std::vector<uint16_t> hx, hdy;
  std::vector<float> hw;
  fill(0, rows, d, hx, hdy, hw);
  void *x, *dy, *dsum, *y;
  float *w, *r, *part;
  CHECK_CUDA(cudaMalloc(&x, n * 2));
  CHECK_CUDA(cudaMalloc(&dy, n * 2));
  CHECK_CUDA(cudaMalloc(&dsum, n * 2));
  CHECK_CUDA(cudaMalloc(&y, n * 2));
  CHECK_CUDA(cudaMalloc(&w, d * 4));
  CHECK_CUDA(cudaMalloc(&r, rows * 4));
  CHECK_CUDA(cudaMalloc(&part, partials * 4));
  CHECK_CUDA(cudaMemcpy(x, hx.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dy, hdy.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dsum, hx.data(), n * 2, cudaMemcpyHostToDevice));  // any model-like rows
  CHECK_CUDA(cudaMemcpy(w, hw.data(), d * 4, cudaMemcpyHostToDevice));
  RmsNormIO io;
  io.dtype = DType::kBF16, io.rows = rows, io.d = d, io.x = x, io.w = w, io.y = y, io.r = r;
  cuda_rms_norm_forward(io, nullptr);
  io.dy = dy, io.dsum = dsum, io.partials = part;
  const int variants[] = {0, 1, 2, 4};
  void* dx[4];
  float* dw[4];
  int bad = 0;
  for (int i = 0; i < 4; ++i) {
    CHECK_CUDA(cudaMalloc(&dx[i], n * 2));
    CHECK_CUDA(cudaMalloc(&dw[i], d * 4));
    RmsNormIO v = io;
    v.dx = dx[i], v.dw = dw[i];
    cuda_rms_norm_backward_rows(v, variants[i], nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    if (i == 0) continue;
    const bool eq = same(dx[0], dx[i], n * 2) && same(dw[0], dw[i], d * 4);
    std::printf("rows %lld d %lld backward, %d rows in flight: dx, dw %s\n", static_cast<long long>(rows), static_cast<long long>(d), variants[i],
                eq ? "bit-identical to production's" : "DIFFERENT");
    bad += !eq;
  }
  std::printf("| rows x d (BF16, with dsum) | production | 1 row in flight | 2 rows | 4 rows | production bandwidth |\n|---|---|---|---|---|---|\n");
  float t[4];
  for (int i = 0; i < 4; ++i) {
    RmsNormIO v = io;
    v.dx = dx[i], v.dw = dw[i];
    t[i] = median_ms([&] { cuda_rms_norm_backward_rows(v, variants[i], nullptr); }, 51);
  }
  const double gb = (static_cast<double>(n) * 2 * 4 + static_cast<double>(partials) * 4 * 2) / 1e9;  // x, dy, dsum in, dx out; partials out and in
  std::printf("| %lldx%lld | %.1f us | %.1f us | %.1f us | %.1f us | %.2f TB/s |\n", static_cast<long long>(rows), static_cast<long long>(d), t[0] * 1e3,
              t[1] * 1e3, t[2] * 1e3, t[3] * 1e3, gb / t[0]);
  for (int i = 0; i < 4; ++i) { cudaFree(dx[i]); cudaFree(dw[i]); }
  for (void* p : {x, dy, dsum, y}) cudaFree(p);
  for (float* p : {w, r, part}) cudaFree(p);
  return bad;
}

}  // namespace
}  // namespace ufp4

int main(int argc, char** argv) {
  // The proxies' rows (32 x 1024 tokens of d = 320 and 192), dense-113m's (16 x 2048 of 768) and a partial row.
  return run_shapes(argc, argv, {{32768, 320}, {32768, 192}, {32768, 768}, {4099, 1016}},
                    [](int64_t rows, int64_t d) { return ufp4::run(rows, d) + ufp4::run_backward(rows, d); });
}
