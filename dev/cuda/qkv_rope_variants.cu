// The packed QKV RoPE kernel (cuda_qkv_rope: a thread per 8 pairs of a token, walking the token's heads
// one by one) beside variants: four or two heads' loads issued before their stores, with and without a
// register bound. First bit for bit against the production kernel (forward and inverse, q, k and v),
// then timed with CUDA events (the median of 20 launches, L2 not flushed: the step's operands are fresh
// too). Not part of the library.
//
//   cmake --build build --target dev && build/ufp4_dev_qkv_rope
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


template <bool kBf16, bool kCopy>
__device__ __forceinline__ void qkv_rope_group_batched(const HeadsView& in, const HeadsView& out, int64_t nh, int64_t b, int64_t t, int64_t j,
                                               int64_t half, const float (&c)[8], const float (&sn)[8]) {
  constexpr int kBatch = 4, kWords = kBf16 ? 1 : 2, kSize = kBf16 ? 2 : 4;  // kWords: 16-byte words in 8 elements
  const int64_t in0 = b * in.stride_b + t * in.stride_s + j, out0 = b * out.stride_b + t * out.stride_s + j;
  for (int64_t h0 = 0; h0 < nh; h0 += kBatch) {
    if (kCopy) {
      uint4 w[kBatch][2][kWords];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (h0 + u < nh) {
          const char* src = static_cast<const char*>(in.p) + (in0 + (h0 + u) * in.stride_h) * kSize;
#pragma unroll
          for (int k = 0; k < kWords; ++k) {
            w[u][0][k] = reinterpret_cast<const uint4*>(src)[k];
            w[u][1][k] = reinterpret_cast<const uint4*>(src + half * kSize)[k];
          }
        }
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (h0 + u < nh) {
          char* dst = static_cast<char*>(out.p) + (out0 + (h0 + u) * out.stride_h) * kSize;
#pragma unroll
          for (int k = 0; k < kWords; ++k) {
            reinterpret_cast<uint4*>(dst)[k] = w[u][0][k];
            reinterpret_cast<uint4*>(dst + half * kSize)[k] = w[u][1][k];
          }
        }
      continue;
    }
    float a[kBatch][8], bb[kBatch][8];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (h0 + u < nh) {
        const int64_t i = in0 + (h0 + u) * in.stride_h;
        load8<kBf16>(in.p, i, a[u]);
        load8<kBf16>(in.p, i + half, bb[u]);
      }
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (h0 + u < nh) {
#pragma unroll
        for (int e = 0; e < 8; ++e) rope_pair(kBf16, a[u][e], bb[u][e], c[e], sn[e], a[u][e], bb[u][e]);
        const int64_t o = out0 + (h0 + u) * out.stride_h;
        store8<kBf16>(out.p, o, a[u]);
        store8<kBf16>(out.p, o + half, bb[u]);
      }
  }
}



template <bool kBf16, int kMinBlocks>
__global__ void __launch_bounds__(256, kMinBlocks) qkv_rope_batched_kernel(const QkvRopeIO io) {
  const int64_t half = io.head_dim / 2, per_token = half / 8, n = io.batch * io.seq * per_token;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / per_token, j = (i % per_token) * 8, t = bt % io.seq, b = bt / io.seq;
    float c[8], sn[8];
    rope_tables8<kBf16>(io.cos, io.sin, half, t, j, io.inverse, c, sn);
    qkv_rope_group_batched<kBf16, false>(io.in[0], io.out[0], io.heads, b, t, j, half, c, sn);
    qkv_rope_group_batched<kBf16, false>(io.in[1], io.out[1], io.kv_heads, b, t, j, half, c, sn);
    qkv_rope_group_batched<kBf16, true>(io.in[2], io.out[2], io.kv_heads, b, t, j, half, c, sn);
  }
}

struct Shape { const char* name; int64_t B, S, H, KV, hd; };

float time_ms(void (*launch)(const QkvRopeIO&, unsigned), const QkvRopeIO& io, unsigned blocks) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  std::vector<float> t;
  for (int r = 0; r < 23; ++r) {
    CHECK_CUDA(cudaEventRecord(a));
    launch(io, blocks);
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void production(const QkvRopeIO& io, unsigned) { cuda_qkv_rope(io, nullptr); }
template <int kMinBlocks>
void batched(const QkvRopeIO& io, unsigned blocks) { qkv_rope_batched_kernel<true, kMinBlocks><<<blocks, 256>>>(io); }

int run() {
  const Shape shapes[] = {{"dense-113m", 16, 2048, 12, 4, 64}, {"dense-35m", 16, 1024, 6, 2, 64}, {"dense-20m", 16, 1024, 4, 2, 64}};
  std::printf("| shape | direction | kernel | us | GB/s | bits vs production |\n|---|---|---|---|---|---|\n");
  for (const Shape& sh : shapes) {
    const int64_t T = sh.B * sh.S, W = (sh.H + 2 * sh.KV) * sh.hd, n = T * W, half = sh.hd / 2;
    std::vector<uint16_t> host(n);
    std::mt19937 g(7);
    for (auto& v : host) v = static_cast<uint16_t>(0x3f80 + (g() % 0x0800) - 0x0400 + ((g() & 1) << 15));  // BF16 of magnitude 2^-8 to 2^8, both signs
    std::vector<float> cs(sh.S * half), sn(sh.S * half);
    for (int64_t t = 0; t < sh.S; ++t)
      for (int64_t j = 0; j < half; ++j) {
        const double ang = t * std::pow(10000.0, -2.0 * j / sh.hd);
        cs[t * half + j] = static_cast<float>(std::cos(ang));
        sn[t * half + j] = static_cast<float>(std::sin(ang));
      }
    void *packed, *heads, *ref;
    float *dc, *ds;
    CHECK_CUDA(cudaMalloc(&packed, n * 2));
    CHECK_CUDA(cudaMalloc(&heads, n * 2));
    CHECK_CUDA(cudaMalloc(&ref, n * 2));
    CHECK_CUDA(cudaMalloc(&dc, cs.size() * 4));
    CHECK_CUDA(cudaMalloc(&ds, sn.size() * 4));
    CHECK_CUDA(cudaMemcpy(packed, host.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(heads, host.data(), n * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(dc, cs.data(), cs.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(ds, sn.data(), sn.size() * 4, cudaMemcpyHostToDevice));
    for (bool inverse : {false, true}) {
      // Forward: packed [B, S, (H + 2 KV) hd] -> three [B, S, heads, hd] blocks; inverse: the blocks -> packed.
      auto io_for = [&](void* out) {
        QkvRopeIO io;
        io.dtype = DType::kBF16;
        io.batch = sh.B;
        io.seq = sh.S;
        io.heads = sh.H;
        io.kv_heads = sh.KV;
        io.head_dim = sh.hd;
        io.cos = dc;
        io.sin = ds;
        io.inverse = inverse;
        const int64_t nh[3] = {sh.H, sh.KV, sh.KV};
        int64_t block = 0;
        for (int p = 0; p < 3; ++p) {
          const int64_t col = p == 0 ? 0 : (p == 1 ? sh.H : sh.H + sh.KV) * sh.hd;  // the part's first column in a packed row
          HeadsView pk{static_cast<char*>(inverse ? out : packed) + col * 2, sh.S * W, sh.hd, W};
          HeadsView hv{static_cast<char*>(inverse ? heads : out) + block * 2, sh.S * nh[p] * sh.hd, sh.hd, nh[p] * sh.hd};
          block += T * nh[p] * sh.hd;
          io.in[p] = inverse ? hv : pk;
          io.out[p] = inverse ? pk : hv;
        }
        return io;
      };
      const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((T * half / 8 + 255) / 256, 132 * 32));
      struct V { const char* name; void (*f)(const QkvRopeIO&, unsigned); };
      const V variants[] = {{"production (heads one by one)", production}, {"4 heads' loads first, 1 block an SM bound", batched<1>},
                            {"4 heads' loads first, 2 blocks an SM bound", batched<2>}};
      std::vector<uint16_t> want(n), got(n);
      for (const V& v : variants) {
        // Production writes `ref`; a variant writes the buffer the other direction reads (restored after it).
        void* dst = v.f == production ? ref : (inverse ? packed : heads);
        CHECK_CUDA(cudaMemset(dst, 0, n * 2));
        QkvRopeIO io = io_for(dst);
        v.f(io, blocks);
        CHECK_CUDA(cudaDeviceSynchronize());
        CHECK_CUDA(cudaMemcpy(v.f == production ? want.data() : got.data(), dst, n * 2, cudaMemcpyDeviceToHost));
        const bool same = v.f == production || std::memcmp(want.data(), got.data(), n * 2) == 0;
        const float ms = time_ms(v.f, io, blocks);
        if (inverse && v.f != production) CHECK_CUDA(cudaMemcpy(packed, host.data(), n * 2, cudaMemcpyHostToDevice));  // restore the input
        if (!inverse && v.f != production) CHECK_CUDA(cudaMemcpy(heads, host.data(), n * 2, cudaMemcpyHostToDevice));
        std::printf("| %s | %s | %s | %.1f | %.0f | %s |\n", sh.name, inverse ? "backward" : "forward", v.name, ms * 1e3, 4.0 * n / (ms * 1e6),
                    v.f == production ? "-" : (same ? "identical" : "DIFFERENT"));
      }
    }
    cudaFree(packed); cudaFree(heads); cudaFree(ref); cudaFree(dc); cudaFree(ds);
  }
  return 0;
}

}  // namespace
}  // namespace ufp4

int main() { return ufp4::run(); }
