// The fused cross entropy's previous kernels (an exp with rintf and a float-to-integer conversion, a
// NaN-propagating max, software BF16 rounding, the row read twice) beside the production kernels
// (cuda_cross_entropy_forward / _backward): first bit for bit on logits of several kinds, then timed with
// CUDA events, the median of repeats. Not part of the library.
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

#include "kernels/fused/fused_kernels.h"
#include "dev/cuda/dev_harness.cuh"

namespace ufp4 {
namespace {


constexpr unsigned kFull = 0xffffffffu;

__device__ float exp_previous(float x) {
  if (!(x > -104.0f)) return x != x ? x : 0.0f;
  if (x > 88.8f) return INFINITY;
  const float n = rintf(mul_rn(x, 1.44269502f));
  float r = fmaf(-n, 0.693145751953125f, x);
  r = fmaf(-n, 1.42860677e-6f, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int ni = static_cast<int>(n);
  if (ni >= -125 && ni <= 127) return bits_f32(f32_bits(p) + (static_cast<uint32_t>(ni) << 23));
  return ldexpf(p, ni);
}

__device__ void load8_bf16(const void* base, int64_t elem, float (&v)[8]) {
  const uint4 q = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(base) + elem);
  const uint32_t w[4] = {q.x, q.y, q.z, q.w};
  for (int k = 0; k < 4; ++k) { v[2 * k] = bits_f32(w[k] << 16); v[2 * k + 1] = bits_f32(w[k] & 0xffff0000u); }
}

__device__ void store8_bf16_previous(void* base, int64_t elem, const float (&v_in)[8]) {
  float v[8];
  for (int e = 0; e < 8; ++e) v[e] = canon_nan(v_in[e]);
  uint4 q;
  q.x = static_cast<uint32_t>(f32_to_bf16_bits(v[0])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[1])) << 16);
  q.y = static_cast<uint32_t>(f32_to_bf16_bits(v[2])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[3])) << 16);
  q.z = static_cast<uint32_t>(f32_to_bf16_bits(v[4])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[5])) << 16);
  q.w = static_cast<uint32_t>(f32_to_bf16_bits(v[6])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[7])) << 16);
  *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + elem) = q;
}

__device__ float warp_sum(float v) {
  for (int h = 1; h < 32; h *= 2) v = add_rn(v, __shfl_xor_sync(kFull, v, h));
  return v;
}

__global__ void __launch_bounds__(kCeThreads) forward_previous(const CrossEntropyIO io) {
  __shared__ float part[kCeThreads / 32];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t t = blockIdx.x, o = t * io.vocab, nv = io.vocab / 8;
  float m = -INFINITY;
  for (int64_t v = tid; v < nv; v += kCeThreads) {
    float x[8];
    load8_bf16(io.logits, o + 8 * v, x);
    for (int e = 0; e < 8; ++e) m = max_nan(m, x[e]);
  }
  for (int h = 1; h < 32; h *= 2) m = max_nan(m, __shfl_xor_sync(kFull, m, h));
  if (lane == 0) part[warp] = m;
  __syncthreads();
  m = part[0];
  for (int w = 1; w < kCeThreads / 32; ++w) m = max_nan(m, part[w]);
  __syncthreads();
  float s = 0.0f;
  for (int64_t v = tid; v < nv; v += kCeThreads) {
    float x[8];
    load8_bf16(io.logits, o + 8 * v, x);
    for (int e = 0; e < 8; ++e) s = add_rn(s, exp_previous(x[e] - m));
  }
  s = warp_sum(s);
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (tid != 0) return;
  float w[kCeThreads / 32];
  for (int i = 0; i < kCeThreads / 32; ++i) w[i] = part[i];
  for (int h = 1; h < kCeThreads / 32; h *= 2) {
    float n[kCeThreads / 32];
    for (int i = 0; i < kCeThreads / 32; ++i) n[i] = add_rn(w[i], w[i ^ h]);
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
  const bool counted = y != io.ignore_index;
  const float lse = io.lse[t], scale = *io.scale;
  for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) {
    float x[8];
    load8_bf16(io.logits, o + 8 * v, x);
    for (int e = 0; e < 8; ++e) {
      const float p = exp_previous(x[e] - lse);
      x[e] = counted ? mul_rn(8 * v + e == y ? p - 1.0f : p, scale) : 0.0f;
    }
    store8_bf16_previous(io.dlogits, o + 8 * v, x);
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
  return run_shapes(argc, argv, {{16384, 32768}, {32768, 32768}, {1000, 50264}}, ufp4::run);
}
