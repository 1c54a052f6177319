// The fused cross entropy's previous kernels (the forward reading its row twice, the backward walking it a
// vector at a time) beside the production kernels (cuda_cross_entropy_forward / _backward, which keep rows of
// at most 8192 in registers): first bit for bit on logits of several kinds, then timed with CUDA events, the
// median of repeats. Not part of the library. (Its earlier "previous" kernels, an exp with rintf and software
// BF16 rounding, are in its history: results/bench/logs/cross-entropy-variants.log measured them.)
//
//   cmake --build build --target dev && build/ufp4_dev_cross_entropy [rows vocab ...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/fused/fused_device.cuh"
#include "kernels/fused/fused_kernels.h"
#include "dev/cuda/check_cuda.cuh"

namespace ufp4 {
namespace {

// The production kernels before the rows of at most 8192 were kept in registers (fused_kernels_cuda.cu at
// b0ca9f8, BF16): the forward reads its row twice, the backward walks it one vector at a time.
__global__ void __launch_bounds__(kCeThreads) forward_previous(const CrossEntropyIO io) {
  __shared__ float part[kCeThreads / 32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t t = blockIdx.x, o = t * io.vocab, nv = io.vocab / 8;
  float m = -INFINITY;
  for (int64_t v = tid; v < nv; v += kCeThreads) {
    float x[8];
    load8<true>(io.logits, o + 8 * v, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) m = fmaxf(m, x[e]);
  }
#pragma unroll
  for (int h = 1; h < 32; h *= 2) m = fmaxf(m, __shfl_xor_sync(kFull, m, h));
  if (lane == 0) part[warp] = m;
  __syncthreads();
  m = part[0];
#pragma unroll
  for (int w = 1; w < kCeThreads / 32; ++w) m = fmaxf(m, part[w]);
  __syncthreads();
  float s = 0.0f;
  for (int64_t v = tid; v < nv; v += kCeThreads) {
    float x[8];
    load8<true>(io.logits, o + 8 * v, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) s = add_rn(s, exp_f32(x[e] - m));
  }
  s = warp_tree_sum(s);
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (tid != 0) return;
  float w[kCeThreads / 32];
#pragma unroll
  for (int i = 0; i < kCeThreads / 32; ++i) w[i] = part[i];
#pragma unroll
  for (int h = 1; h < kCeThreads / 32; h *= 2) {
    float n[kCeThreads / 32];
#pragma unroll
    for (int i = 0; i < kCeThreads / 32; ++i) n[i] = add_rn(w[i], w[i ^ h]);
#pragma unroll
    for (int i = 0; i < kCeThreads / 32; ++i) w[i] = n[i];
  }
  const float lse = m != m || w[0] != w[0] ? NAN : add_rn(m, log_f32(w[0]));
  io.lse[t] = lse;
  const int64_t y = io.targets[t];
  float loss = 0.0f;
  if (y != io.ignore_index) {
    if (y >= 0 && y < io.vocab) loss = canon_nan(lse - bf16_bits_to_f32(static_cast<const uint16_t*>(io.logits)[o + y]));
    else loss = NAN;
  }
  io.loss[t] = loss;
}

__global__ void __launch_bounds__(kCeThreads) backward_previous(const CrossEntropyIO io) {
  const int64_t t = blockIdx.x, o = t * io.vocab, nv = io.vocab / 8, y = io.targets[t];
  if (y == io.ignore_index) {
    const float zero[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) store8<true>(io.dlogits, o + 8 * v, zero);
    return;
  }
  const float lse = io.lse[t], scale = *io.scale;
  for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) {
    float x[8], p[8];
    load8<true>(io.logits, o + 8 * v, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      p[e] = exp_f32(x[e] - lse);
      x[e] = mul_rn(p[e], scale);
    }
    if (static_cast<uint64_t>(y - 8 * v) < 8) {
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (8 * v + e == y) x[e] = mul_rn(p[e] - 1.0f, scale);
    }
    store8<true>(io.dlogits, o + 8 * v, x);
  }
}

uint16_t bf16_of(float f) { return f32_to_bf16_bits(f); }

// Logits of a kind: 0 model-like N(0, 3^2); 1 wide (N(0, 40^2): exponents far into the subnormals);
// 2 special values sprinkled (NaN, +-inf, +-0, huge) and some ignored or out-of-range targets.
void fill(int kind, int64_t rows, int64_t vocab, std::vector<uint16_t>& logits, std::vector<int64_t>& targets) {
  std::mt19937_64 g(1234 + kind);
  std::normal_distribution<float> n(0.0f, kind == 1 ? 40.0f : 3.0f);
  std::uniform_int_distribution<int64_t> tok(0, vocab - 1);
  logits.resize(rows * vocab);
  targets.resize(rows);
  for (auto& x : logits) x = bf16_of(n(g));
  for (auto& y : targets) y = tok(g);
  if (kind == 2) {
    const float special[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 3.0e38f, -3.0e38f, 1e-40f};
    std::uniform_int_distribution<int64_t> at(0, rows * vocab - 1);
    for (int i = 0; i < 64; ++i) logits[at(g)] = bf16_of(special[i % 8]);
    for (int64_t t = 0; t < rows; t += 97) targets[t] = -100;
    for (int64_t t = 5; t < rows; t += 131) targets[t] = vocab + 3;
    for (int64_t v = 0; v < vocab; ++v) logits[7 * vocab + v] = bf16_of(0.0f);  // a row whose max is 0
  }
}

struct Buffers {
  void* logits = nullptr;
  int64_t* targets = nullptr;
  float *loss = nullptr, *lse = nullptr, *scale = nullptr;
  void* dlogits = nullptr;
};

CrossEntropyIO io_of(const Buffers& b, int64_t rows, int64_t vocab) {
  CrossEntropyIO io;
  io.dtype = DType::kBF16;
  io.rows = rows;
  io.vocab = vocab;
  io.logits = b.logits;
  io.targets = b.targets;
  io.loss = b.loss;
  io.lse = b.lse;
  io.scale = b.scale;
  io.dlogits = b.dlogits;
  return io;
}

int run(int64_t rows, int64_t vocab) {
  const size_t n = static_cast<size_t>(rows * vocab);
  Buffers p, q;  // previous, production
  for (Buffers* b : {&p, &q}) {
    CHECK_CUDA(cudaMalloc(&b->loss, rows * 4));
    CHECK_CUDA(cudaMalloc(&b->lse, rows * 4));
    CHECK_CUDA(cudaMalloc(&b->dlogits, n * 2));
  }
  void* logits;
  int64_t* targets;
  float* scale;
  CHECK_CUDA(cudaMalloc(&logits, n * 2));
  CHECK_CUDA(cudaMalloc(&targets, rows * 8));
  CHECK_CUDA(cudaMalloc(&scale, 4));
  const float s = 1.0f / static_cast<float>(rows);
  CHECK_CUDA(cudaMemcpy(scale, &s, 4, cudaMemcpyHostToDevice));
  for (Buffers* b : {&p, &q}) { b->logits = logits; b->targets = targets; b->scale = scale; }
  const CrossEntropyIO ip = io_of(p, rows, vocab), iq = io_of(q, rows, vocab);
  int bad = 0;
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<uint16_t> h;
    std::vector<int64_t> y;
    fill(kind, rows, vocab, h, y);
    CHECK_CUDA(cudaMemcpy(logits, h.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(targets, y.data(), rows * 8, cudaMemcpyHostToDevice));
    forward_previous<<<static_cast<unsigned>(rows), kCeThreads>>>(ip);
    backward_previous<<<static_cast<unsigned>(rows), kCeThreads>>>(ip);
    cuda_cross_entropy_forward(iq, nullptr);
    cuda_cross_entropy_backward(iq, nullptr);
    CHECK_CUDA(cudaDeviceSynchronize());
    auto same = [&](const void* a, const void* b, size_t bytes, const char* what) {
      std::vector<char> x(bytes), z(bytes);
      CHECK_CUDA(cudaMemcpy(x.data(), a, bytes, cudaMemcpyDeviceToHost));
      CHECK_CUDA(cudaMemcpy(z.data(), b, bytes, cudaMemcpyDeviceToHost));
      const bool eq = std::memcmp(x.data(), z.data(), bytes) == 0;
      std::printf("rows %lld vocab %lld logits kind %d %-8s %s\n", static_cast<long long>(rows), static_cast<long long>(vocab), kind, what,
                  eq ? "bit-identical" : "DIFFERENT");
      bad += !eq;
    };
    same(p.loss, q.loss, rows * 4, "loss");
    same(p.lse, q.lse, rows * 4, "lse");
    same(p.dlogits, q.dlogits, n * 2, "dlogits");
  }
  const int reps = 21;
  const float fp = median_ms([&] { forward_previous<<<static_cast<unsigned>(rows), kCeThreads>>>(ip); }, reps);
  const float fq = median_ms([&] { cuda_cross_entropy_forward(iq, nullptr); }, reps);
  const float bp = median_ms([&] { backward_previous<<<static_cast<unsigned>(rows), kCeThreads>>>(ip); }, reps);
  const float bq = median_ms([&] { cuda_cross_entropy_backward(iq, nullptr); }, reps);
  const double gb = static_cast<double>(n) * 2 / 1e9;
  std::printf("| logits (BF16) | kernel | previous | production | previous / production | production bandwidth |\n|---|---|---|---|---|---|\n");
  std::printf("| %lldx%lld | forward | %.1f us | %.1f us | %.2f | %.2f TB/s |\n", static_cast<long long>(rows), static_cast<long long>(vocab), fp * 1e3,
              fq * 1e3, fp / fq, gb / fq);
  std::printf("| %lldx%lld | backward | %.1f us | %.1f us | %.2f | %.2f TB/s |\n", static_cast<long long>(rows), static_cast<long long>(vocab), bp * 1e3,
              bq * 1e3, bp / bq, 2 * gb / bq);
  for (Buffers* b : {&p, &q}) { cudaFree(b->loss); cudaFree(b->lse); cudaFree(b->dlogits); }
  cudaFree(logits);
  cudaFree(targets);
  cudaFree(scale);
  return bad;
}

}  // namespace
}  // namespace ufp4

int main(int argc, char** argv) {
  // The proxies' logits (32 x 1024 tokens, vocab 8192), a partial row of 3 vectors a thread, and a wide row.
  return run_shapes(argc, argv, {{32768, 8192}, {16384, 8192}, {32768, 6008}, {16384, 32768}}, ufp4::run);
}
