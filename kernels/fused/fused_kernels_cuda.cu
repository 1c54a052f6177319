// CUDA kernels of the fused ops (contract and reduction order: kernels/fused/fused_kernels.h). Rows move in
// 16-byte vectors of 8 BF16 (or two of 4 FP32) values; a partner's vectors are i = p, p + P, ...
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"
#include "kernels/numerics/cuda_check.cuh"
#include "kernels/fused/fused_kernels.h"
#include "kernels/fused/fused_device.cuh"

namespace ufp4 {

namespace {

constexpr int kRowsPerBlock = 8;  // RMSNorm: warps (rows or groups) a 256-thread block

// x + residual rounded to the dtype, in place.
template <bool kBf16>
__device__ __forceinline__ void add_residual8(float (&x)[8], const float (&res)[8]) {
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = round_to_dtype(kBf16, add_rn(x[e], res[e]));
}

// 8 elements of the row to normalize: x, or x + residual rounded to the dtype.
template <bool kBf16>
__device__ __forceinline__ void load_sum8(const RmsNormIO& io, int64_t elem, float (&x)[8]) {
  load8<kBf16>(io.x, elem, x);
  if (!io.residual) return;
  float res[8];
  load8<kBf16>(io.residual, elem, res);
  add_residual8<kBf16>(x, res);
}

// Row t's 1 / rms from each lane's sum of squares (the warp's butterfly): stored to io.r[t] by lane 0, and returned.
__device__ __forceinline__ float store_inverse_rms(const RmsNormIO& io, int64_t t, float acc) {
  const float ss = warp_tree_sum(acc);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(io.d) + io.eps);
  if (threadIdx.x % 32 == 0) io.r[t] = canon_nan(r);
  return r;
}

// Vector v of the output row at o: (x r) w, rounded once each.
template <bool kBf16>
__device__ __forceinline__ void store_normalized8(const RmsNormIO& io, int64_t o, int64_t v, float r, float (&x)[8]) {
  float w[8];
  load8<false>(io.w, 8 * v, w);
#pragma unroll
  for (int e = 0; e < 8; ++e) x[e] = mul_rn(mul_rn(x[e], r), w[e]);
  store8<kBf16>(io.y, o + 8 * v, x);
}

template <bool kBf16>
__global__ void __launch_bounds__(256) rms_norm_forward_kernel(const RmsNormIO io) {
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= io.rows) return;
  const int64_t o = t * io.d, nv = io.d / 8;
  float acc = 0.0f;
  for (int64_t v = lane; v < nv; v += 32) {
    float x[8];
    load_sum8<kBf16>(io, o + 8 * v, x);
    if (io.residual) store8<kBf16>(io.sum, o + 8 * v, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(x[e], x[e], acc);
  }
  const float r = store_inverse_rms(io, t, acc);
  for (int64_t v = lane; v < nv; v += 32) {
    float x[8];
    load_sum8<kBf16>(io, o + 8 * v, x);  // the row again, from L1 (the sum recomputed, not read back from a store)
    store_normalized8<kBf16>(io, o, v, r, x);
  }
}

// The same forward for BF16 rows of at most 32 kNv vectors (d <= 256 kNv): each lane issues every load of
// its share of the row (x and the residual) before it uses any, and keeps the summed row in registers for
// the second pass. One row at a time, a warp waits on one or two loads at once, too few at the proxies'
// widths (d = 192 to 768: one to three vectors a lane) to keep HBM busy. Each lane folds its vectors in
// the same order as rms_norm_forward_kernel: the same bits.
template <int kNv>
__global__ void __launch_bounds__(256) rms_norm_forward_kept_kernel(const RmsNormIO io) {
  const int lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= io.rows) return;
  const int64_t o = t * io.d, nv = io.d / 8;
  Raw8<true> xr[kNv], rr[kNv];
#pragma unroll
  for (int j = 0; j < kNv; ++j) {
    const int64_t v = lane + 32 * j;
    if (v >= nv) break;
    xr[j] = load_raw8<true>(io.x, o + 8 * v);
    if (io.residual) rr[j] = load_raw8<true>(io.residual, o + 8 * v);
  }
  float x[kNv][8];
  float acc = 0.0f;
#pragma unroll
  for (int j = 0; j < kNv; ++j) {
    const int64_t v = lane + 32 * j;
    if (v >= nv) break;
    unpack8<true>(xr[j], x[j]);
    if (io.residual) {
      float res[8];
      unpack8<true>(rr[j], res);
      add_residual8<true>(x[j], res);
      store8<true>(io.sum, o + 8 * v, x[j]);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) acc = fmaf(x[j][e], x[j][e], acc);
  }
  const float r = store_inverse_rms(io, t, acc);
#pragma unroll
  for (int j = 0; j < kNv && lane + 32 * j < nv; ++j) store_normalized8<true>(io, o, lane + 32 * j, r, x[j]);
}

// A warp per group of kRmsGroupRows rows: dx row by row, the group's weight-gradient sums in registers
// (kNv vectors a lane: d <= 256 kNv). With BF16 rows of d <= 1024 (kKeep) the warp loads kRows rows'
// x, dy and dsum before it uses any and keeps them in registers for both passes: a model has only
// rows / 16 such warps, too few at the proxies' sizes to hide a row's memory latency one row at a
// time. Otherwise one row at a time, its second pass reading the row again from L1. Each row's
// arithmetic and the sums' row order are those of one row at a time either way: the same bits, for
// any kRows.
constexpr int kRmsBackwardWarps = 4;  // warps (groups) a block: small blocks, so more of them fit an SM

// Rows in flight a warp: as many as keep the kernel within 128 registers (ptxas, sm_90a), so that four
// blocks fit an SM and the 32 x 1024-token batches' rows / 64 blocks (512) run in one wave on 132 SMs. Four
// rows of d <= 256 take 126 registers; four rows of d <= 512 took 168, three blocks an SM and a second
// wave of 116 blocks (the dense proxy's d = 320), hence two there; one row past that (dev/cuda/rms_norm_variants.cu times them).
constexpr int rms_backward_rows(bool bf16, int nv) { return !(bf16 && nv <= 4) ? 1 : nv <= 1 ? 4 : nv <= 2 ? 2 : 1; }

template <bool kBf16, int kNv, int kRows>
__global__ void __launch_bounds__(32 * kRmsBackwardWarps) rms_norm_backward_kernel(const RmsNormIO io) {
  constexpr bool kKeep = kBf16 && kNv <= 4;
  static_assert(kKeep || kRows == 1, "rows are kept in registers for BF16 rows of d <= 1024 only");
  const int lane = threadIdx.x % 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * kRmsBackwardWarps + threadIdx.x / 32;
  const int64_t nv = io.d / 8, t0 = g * kRmsGroupRows;
  if (t0 >= io.rows) return;
  const int64_t t1 = t0 + kRmsGroupRows < io.rows ? t0 + kRmsGroupRows : io.rows;
  const float fd = static_cast<float>(io.d);
  float acc[kNv][8];
#pragma unroll
  for (int j = 0; j < kNv; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[j][e] = 0.0f;
  for (int64_t t = t0; t < t1; t += kRows) {
    Raw8<kBf16> xr[kRows][kNv], dyr[kRows][kNv], dsr[kRows][kNv];
    float r[kRows], dot[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      dot[i] = 0.0f;
      r[i] = 0.0f;
      if (t + i >= t1) continue;
      const int64_t o = (t + i) * io.d;
      r[i] = io.r[t + i];
      if constexpr (kKeep) {
#pragma unroll
        for (int j = 0; j < kNv; ++j) {
          const int64_t v = lane + 32 * j;
          if (v >= nv) break;
          xr[i][j] = load_raw8<kBf16>(io.x, o + 8 * v);
          dyr[i][j] = load_raw8<kBf16>(io.dy, o + 8 * v);
          if (io.dsum) dsr[i][j] = load_raw8<kBf16>(io.dsum, o + 8 * v);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (t + i >= t1) continue;
      const int64_t o = (t + i) * io.d;
#pragma unroll
      for (int j = 0; j < kNv; ++j) {
        const int64_t v = lane + 32 * j;
        if (v >= nv) break;
        float x[8], dy[8], w[8];
        unpack8<kBf16>(kKeep ? xr[i][j] : load_raw8<kBf16>(io.x, o + 8 * v), x);
        unpack8<kBf16>(kKeep ? dyr[i][j] : load_raw8<kBf16>(io.dy, o + 8 * v), dy);
        load8<false>(io.w, 8 * v, w);
#pragma unroll
        for (int e = 0; e < 8; ++e) dot[i] = fmaf(mul_rn(dy[e], w[e]), x[e], dot[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < kRows; ++i) dot[i] = warp_tree_sum(dot[i]);  // t + i >= t1 is the whole warp's: a zero sum
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (t + i >= t1) continue;
      const int64_t o = (t + i) * io.d;
      const float k = mul_rn(dot[i], mul_rn(mul_rn(r[i], r[i]), r[i])) / fd;
#pragma unroll
      for (int j = 0; j < kNv; ++j) {
        const int64_t v = lane + 32 * j;
        if (v >= nv) break;
        float x[8], dy[8], w[8], dx[8];
        unpack8<kBf16>(kKeep ? xr[i][j] : load_raw8<kBf16>(io.x, o + 8 * v), x);  // else the warp's own row, from L1
        unpack8<kBf16>(kKeep ? dyr[i][j] : load_raw8<kBf16>(io.dy, o + 8 * v), dy);
        load8<false>(io.w, 8 * v, w);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          dx[e] = fmaf(-k, x[e], mul_rn(mul_rn(dy[e], w[e]), r[i]));
          acc[j][e] = fmaf(dy[e], mul_rn(x[e], r[i]), acc[j][e]);
        }
        if (io.dsum) {
          float ds[8];
          unpack8<kBf16>(kKeep ? dsr[i][j] : load_raw8<kBf16>(io.dsum, o + 8 * v), ds);
#pragma unroll
          for (int e = 0; e < 8; ++e) dx[e] = add_rn(round_to_dtype(kBf16, dx[e]), ds[e]);
        }
        store8<kBf16>(io.dx, o + 8 * v, dx);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kNv; ++j) {
    const int64_t v = lane + 32 * j;
    if (v >= nv) break;
    float4* p = reinterpret_cast<float4*>(io.partials + g * io.d + 8 * v);
    p[0] = make_float4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]);
    p[1] = make_float4(acc[j][4], acc[j][5], acc[j][6], acc[j][7]);
  }
}

// dw[j] from the group sums: 32 columns x 32 strands a block, then a warp's tree per column.
__global__ void __launch_bounds__(1024) rms_norm_weight_grad_kernel(const float* partials, int64_t groups, int64_t d, float* dw) {
  __shared__ float strand[kStrands][33];
  const int c = threadIdx.x % 32, s = threadIdx.x / 32;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * 32 + c;
  float a = 0.0f;
  if (col < d)
    for (int64_t g = s; g < groups; g += kStrands) a = add_rn(a, partials[g * d + col]);
  strand[s][c] = a;
  __syncthreads();
  // Warp s now takes column s of the block, its lanes the strands.
  const int64_t out = static_cast<int64_t>(blockIdx.x) * 32 + s;
  const float v = warp_tree_sum(strand[c][s]);
  if (c == 0 && out < d) dw[out] = canon_nan(v);
}

// Cross entropy, a block a row. The forward's row max is fmaxf's, which skips NaNs where the contract's
// max_nan returns one: a row holding a NaN gets a NaN sum of exponentials instead, so lse and the loss are
// the same NaN; otherwise the two maxima are equal (up to the sign of a zero maximum, which changes no
// x - m and no lse). The kernels (after these helpers) walk a row a vector at a time, the forward twice.

// The row's max from each thread's: the warps' butterflies, then warp 0's over the warps in order.
__device__ __forceinline__ float ce_block_max(float m, float (&part)[kCeThreads / 32]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
  for (int h = 1; h < 32; h *= 2) m = fmaxf(m, __shfl_xor_sync(kFull, m, h));
  if (lane == 0) part[warp] = m;
  __syncthreads();
  m = part[0];
#pragma unroll
  for (int w = 1; w < kCeThreads / 32; ++w) m = fmaxf(m, part[w]);
  __syncthreads();  // part is reused
  return m;
}

// The row's sum of exponentials from each thread's (the contract's tree: the warps' butterflies, then the
// butterfly's steps h = 32, 64, 128 on the warp sums); meaningful in thread 0 only.
__device__ __forceinline__ float ce_block_sum(float s, float (&part)[kCeThreads / 32]) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  s = warp_tree_sum(s);
  if (lane == 0) part[warp] = s;
  __syncthreads();
  if (threadIdx.x != 0) return 0.0f;
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
  return w[0];
}

// Thread 0's end of row t: lse and the loss, given the target y and its logit (read only when y is in range).
__device__ __forceinline__ void ce_write_row(const CrossEntropyIO& io, int64_t t, float m, float sum, int64_t y, float target_logit) {
  const float lse = m != m || sum != sum ? NAN : add_rn(m, log_f32(sum));
  io.lse[t] = lse;
  float loss = 0.0f;
  if (y != io.ignore_index) loss = y >= 0 && y < io.vocab ? canon_nan(lse - target_logit) : NAN;
  io.loss[t] = loss;
}

template <bool kBf16>
__device__ __forceinline__ float ce_logit(const CrossEntropyIO& io, int64_t elem) {
  return kBf16 ? bf16_bits_to_f32(static_cast<const uint16_t*>(io.logits)[elem]) : static_cast<const float*>(io.logits)[elem];
}

// The gradient of vector v of a row (target y): softmax times the scale, less the scale at the target.
__device__ __forceinline__ void ce_gradient8(float (&x)[8], float lse, float scale, int64_t y, int64_t v) {
  float p[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    p[e] = exp_f32(x[e] - lse);
    x[e] = mul_rn(p[e], scale);
  }
  if (static_cast<uint64_t>(y - 8 * v) < 8) {  // the vector holding the target
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (8 * v + e == y) x[e] = mul_rn(p[e] - 1.0f, scale);
  }
}

// An ignored row's gradient is 0.
template <bool kBf16>
__device__ __forceinline__ void ce_zero_row(const CrossEntropyIO& io, int64_t o, int64_t nv) {
  const float zero[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) store8<kBf16>(io.dlogits, o + 8 * v, zero);
}

// At the proxies' 32768 x 8192 BF16 logits memory is not what bounds the two kernels: keeping a row's vectors
// in registers, every load issued before any value is used (as the RMSNorm forward does), read the row once
// instead of twice and was slower on an H200, 292 against 277 us forward and 367 against 330 us backward
// (Nsight Compute, results/bench/logs/fused-kept-d981fb7/); at 32768 wide, 16 vectors a thread, 1.8x slower
// (dev/cuda/cross_entropy_variants.cu's log).
template <bool kBf16>
__global__ void __launch_bounds__(kCeThreads) cross_entropy_forward_kernel(const CrossEntropyIO io) {
  __shared__ float part[kCeThreads / 32];
  const int64_t t = blockIdx.x, o = t * io.vocab, nv = io.vocab / 8;
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) {
    float x[8];
    load8<kBf16>(io.logits, o + 8 * v, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) m = fmaxf(m, x[e]);
  }
  m = ce_block_max(m, part);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) {
    float x[8];
    load8<kBf16>(io.logits, o + 8 * v, x);  // second read: L1/L2
#pragma unroll
    for (int e = 0; e < 8; ++e) s = add_rn(s, exp_f32(x[e] - m));
  }
  s = ce_block_sum(s, part);
  if (threadIdx.x != 0) return;
  const int64_t y = io.targets[t];
  ce_write_row(io, t, m, s, y, y >= 0 && y < io.vocab ? ce_logit<kBf16>(io, o + y) : 0.0f);
}

template <bool kBf16>
__global__ void __launch_bounds__(kCeThreads) cross_entropy_backward_kernel(const CrossEntropyIO io) {
  const int64_t t = blockIdx.x, o = t * io.vocab, nv = io.vocab / 8, y = io.targets[t];
  if (y == io.ignore_index) return ce_zero_row<kBf16>(io, o, nv);
  const float lse = io.lse[t], scale = *io.scale;
  for (int64_t v = threadIdx.x; v < nv; v += kCeThreads) {
    float x[8];
    load8<kBf16>(io.logits, o + 8 * v, x);
    ce_gradient8(x, lse, scale, y, v);
    store8<kBf16>(io.dlogits, o + 8 * v, x);
  }
}

// SwiGLU: a thread per 8 consecutive outputs of a row (h % 8 == 0), grid-stride.
template <bool kBf16>
__global__ void __launch_bounds__(256) swiglu_forward_kernel(const SwiGluIO io) {
  const int64_t per_row = io.hidden / 8, n = io.rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, j = (i % per_row) * 8;
    float g[8], u[8];
    load8<kBf16>(io.gu, t * 2 * io.hidden + j, g);
    load8<kBf16>(io.gu, t * 2 * io.hidden + io.hidden + j, u);
#pragma unroll
    for (int e = 0; e < 8; ++e) g[e] = swiglu_forward(g[e], u[e]);
    store8<kBf16>(io.out, t * io.hidden + j, g);
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(256) swiglu_backward_kernel(const SwiGluIO io) {
  const int64_t per_row = io.hidden / 8, n = io.rows * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / per_row, j = (i % per_row) * 8;
    float g[8], u[8], d[8];
    load8<kBf16>(io.gu, t * 2 * io.hidden + j, g);
    load8<kBf16>(io.gu, t * 2 * io.hidden + io.hidden + j, u);
    load8<kBf16>(io.dout, t * io.hidden + j, d);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      float dg, du;
      swiglu_backward(g[e], u[e], d[e], dg, du);
      g[e] = dg;
      u[e] = du;
    }
    store8<kBf16>(io.dgu, t * 2 * io.hidden + j, g);
    store8<kBf16>(io.dgu, t * 2 * io.hidden + io.hidden + j, u);
  }
}

// RoPE: a thread per 8 consecutive pairs (j, j + hd/2) of a row (b, h, s), grid-stride.
template <bool kBf16>
__global__ void __launch_bounds__(256) rope_kernel(const RopeIO io) {
  const int64_t half = io.head_dim / 2, per_row = half / 8, n = io.batch * io.heads * io.seq * per_row;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    // Rows in (b, s, h) order: a token's heads lie side by side in the projection's output and, for the
    // layout attention takes, in y.
    const int64_t row = i / per_row, j = (i % per_row) * 8, h = row % io.heads, bt = row / io.heads, t = bt % io.seq, bb = bt / io.seq;
    const int64_t in = bb * io.stride_b + h * io.stride_h + t * io.stride_s, out = bb * io.y_stride_b + h * io.y_stride_h + t * io.y_stride_s;
    float a[8], b[8];
    load8<kBf16>(io.x, in + j, a);
    load8<kBf16>(io.x, in + half + j, b);
    const float4* cp = reinterpret_cast<const float4*>(io.cos + t * half + j);
    const float4* sp = reinterpret_cast<const float4*>(io.sin + t * half + j);
    const float4 c0 = cp[0], c1 = cp[1], s0 = sp[0], s1 = sp[1];
    const float c[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w}, sn[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float ce = round_to_dtype(kBf16, c[e]), se = round_to_dtype(kBf16, sn[e]);
      rope_pair(kBf16, a[e], b[e], ce, io.inverse ? -se : se, a[e], b[e]);
    }
    store8<kBf16>(io.y, out + j, a);
    store8<kBf16>(io.y, out + half + j, b);
  }
}

// One head group of qkv_rope_kernel's token: nh heads, 8 pairs (j, j + hd / 2) each; rotated (c, sn in
// the dtype, sn negated for the inverse) or, with kCopy, copied as raw 16-byte words. (Measured against
// this: a thread a head, which re-reads the tables for each, slower; four heads' loads issued before
// their stores: dev/cuda/qkv_rope_variants.cu.)
template <bool kBf16, bool kCopy>
__device__ __forceinline__ void qkv_rope_group(const HeadsView& in, const HeadsView& out, int64_t nh, int64_t b, int64_t t, int64_t j,
                                               int64_t half, const float (&c)[8], const float (&sn)[8]) {
  constexpr int kWords = kBf16 ? 1 : 2, kSize = kBf16 ? 2 : 4;  // kWords: 16-byte words in 8 elements
  const int64_t in0 = b * in.stride_b + t * in.stride_s + j, out0 = b * out.stride_b + t * out.stride_s + j;
  for (int64_t h = 0; h < nh; ++h) {
    const int64_t i = in0 + h * in.stride_h, o = out0 + h * out.stride_h;
    if (kCopy) {
      const uint4* s0 = reinterpret_cast<const uint4*>(static_cast<const char*>(in.p) + i * kSize);
      const uint4* s1 = reinterpret_cast<const uint4*>(static_cast<const char*>(in.p) + (i + half) * kSize);
      uint4* d0 = reinterpret_cast<uint4*>(static_cast<char*>(out.p) + o * kSize);
      uint4* d1 = reinterpret_cast<uint4*>(static_cast<char*>(out.p) + (o + half) * kSize);
#pragma unroll
      for (int w = 0; w < kWords; ++w) { d0[w] = s0[w]; d1[w] = s1[w]; }
      continue;
    }
    float a[8], bb[8];
    load8<kBf16>(in.p, i, a);
    load8<kBf16>(in.p, i + half, bb);
#pragma unroll
    for (int e = 0; e < 8; ++e) rope_pair(kBf16, a[e], bb[e], c[e], sn[e], a[e], bb[e]);
    store8<kBf16>(out.p, o, a);
    store8<kBf16>(out.p, o + half, bb);
  }
}

// Packed QKV RoPE: a thread per 8 pairs of a token, for all the token's heads (its cos and sin read once).
template <bool kBf16>
__global__ void __launch_bounds__(256) qkv_rope_kernel(const QkvRopeIO io) {
  const int64_t half = io.head_dim / 2, per_token = half / 8, n = io.batch * io.seq * per_token;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t bt = i / per_token, j = (i % per_token) * 8, t = bt % io.seq, b = bt / io.seq;
    float c[8], sn[8];
    rope_tables8<kBf16>(io.cos, io.sin, half, t, j, io.inverse, c, sn);
    qkv_rope_group<kBf16, false>(io.in[0], io.out[0], io.heads, b, t, j, half, c, sn);
    qkv_rope_group<kBf16, false>(io.in[1], io.out[1], io.kv_heads, b, t, j, half, c, sn);
    qkv_rope_group<kBf16, true>(io.in[2], io.out[2], io.kv_heads, b, t, j, half, c, sn);
  }
}

unsigned elementwise_blocks(int64_t vectors) {
  const int64_t b = (vectors + 255) / 256;
  return static_cast<unsigned>(b < 132 * 32 ? (b > 0 ? b : 1) : 132 * 32);  // grid-stride beyond ~32 blocks an SM
}

void check_shape(int64_t last, const char* what) {
  if (last <= 0 || last % 8 != 0) throw Error(std::string(what) + ": the last dimension (" + std::to_string(last) + ") must be a positive multiple of 8");
}

// The backward with kRows rows in flight (BF16, d <= 1024), for the timing probe.
template <int kRows>
void launch_rms_backward_rows(const RmsNormIO& io, unsigned blocks, cudaStream_t stream) {
  switch ((io.d / 8 + 31) / 32) {
    case 1: rms_norm_backward_kernel<true, 1, kRows><<<blocks, 32 * kRmsBackwardWarps, 0, stream>>>(io); break;
    case 2: rms_norm_backward_kernel<true, 2, kRows><<<blocks, 32 * kRmsBackwardWarps, 0, stream>>>(io); break;
    case 3: rms_norm_backward_kernel<true, 3, kRows><<<blocks, 32 * kRmsBackwardWarps, 0, stream>>>(io); break;
    default: rms_norm_backward_kernel<true, 4, kRows><<<blocks, 32 * kRmsBackwardWarps, 0, stream>>>(io); break;
  }
}

template <bool kBf16>
void launch_rms_backward(const RmsNormIO& io, unsigned blocks, cudaStream_t stream) {
  constexpr int kThreads = 32 * kRmsBackwardWarps;
  switch ((io.d / 8 + 31) / 32) {
    case 1: rms_norm_backward_kernel<kBf16, 1, rms_backward_rows(kBf16, 1)><<<blocks, kThreads, 0, stream>>>(io); break;
    case 2: rms_norm_backward_kernel<kBf16, 2, rms_backward_rows(kBf16, 2)><<<blocks, kThreads, 0, stream>>>(io); break;
    case 3: rms_norm_backward_kernel<kBf16, 3, rms_backward_rows(kBf16, 3)><<<blocks, kThreads, 0, stream>>>(io); break;
    case 4: rms_norm_backward_kernel<kBf16, 4, rms_backward_rows(kBf16, 4)><<<blocks, kThreads, 0, stream>>>(io); break;
    case 5: case 6: rms_norm_backward_kernel<kBf16, 6, rms_backward_rows(kBf16, 6)><<<blocks, kThreads, 0, stream>>>(io); break;
    case 7: case 8: rms_norm_backward_kernel<kBf16, 8, rms_backward_rows(kBf16, 8)><<<blocks, kThreads, 0, stream>>>(io); break;
    default: throw Error("rms_norm: d = " + std::to_string(io.d) + " exceeds the CUDA kernel's 2048");
  }
}

}  // namespace

void cuda_rms_norm_forward(const RmsNormIO& io, cudaStream_t stream) {
  check_shape(io.d, "rms_norm");
  if (io.rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((io.rows + kRowsPerBlock - 1) / kRowsPerBlock);
  const int64_t per_lane = (io.d / 8 + 31) / 32;  // vectors a lane
  if (io.dtype != DType::kBF16) rms_norm_forward_kernel<false><<<blocks, 256, 0, stream>>>(io);
  else if (per_lane == 1) rms_norm_forward_kept_kernel<1><<<blocks, 256, 0, stream>>>(io);
  else if (per_lane == 2) rms_norm_forward_kept_kernel<2><<<blocks, 256, 0, stream>>>(io);
  else if (per_lane == 3) rms_norm_forward_kept_kernel<3><<<blocks, 256, 0, stream>>>(io);
  else if (per_lane == 4) rms_norm_forward_kept_kernel<4><<<blocks, 256, 0, stream>>>(io);
  else rms_norm_forward_kernel<true><<<blocks, 256, 0, stream>>>(io);
  check_launch("rms_norm forward kernel launch");
}

void cuda_rms_norm_backward(const RmsNormIO& io, cudaStream_t stream) { cuda_rms_norm_backward_rows(io, 0, stream); }

void cuda_rms_norm_backward_rows(const RmsNormIO& io, int rows_in_flight, cudaStream_t stream) {
  check_shape(io.d, "rms_norm");
  if (rows_in_flight && (io.dtype != DType::kBF16 || io.d > 1024 || (rows_in_flight != 1 && rows_in_flight != 2 && rows_in_flight != 4)))
    throw Error("rms_norm backward: rows in flight 1, 2 or 4 (0: the production choice) take BF16 rows of d <= 1024; got " +
                std::to_string(rows_in_flight) + " rows in flight, d = " + std::to_string(io.d) + (io.dtype == DType::kBF16 ? ", BF16" : ", FP32"));
  if (io.rows == 0) {
    cudaMemsetAsync(io.dw, 0, static_cast<size_t>(io.d) * sizeof(float), stream);
    return;
  }
  const int64_t groups = (io.rows + kRmsGroupRows - 1) / kRmsGroupRows;
  const unsigned blocks = static_cast<unsigned>((groups + kRmsBackwardWarps - 1) / kRmsBackwardWarps);
  if (rows_in_flight == 1) launch_rms_backward_rows<1>(io, blocks, stream);
  else if (rows_in_flight == 2) launch_rms_backward_rows<2>(io, blocks, stream);
  else if (rows_in_flight == 4) launch_rms_backward_rows<4>(io, blocks, stream);
  else if (io.dtype == DType::kBF16) launch_rms_backward<true>(io, blocks, stream);
  else launch_rms_backward<false>(io, blocks, stream);
  check_launch("rms_norm backward kernel launch");
  rms_norm_weight_grad_kernel<<<static_cast<unsigned>((io.d + 31) / 32), 1024, 0, stream>>>(io.partials, groups, io.d, io.dw);
  check_launch("rms_norm weight-gradient kernel launch");
}

void cuda_cross_entropy_forward(const CrossEntropyIO& io, cudaStream_t stream) {
  check_shape(io.vocab, "cross_entropy");
  if (io.rows == 0) return;
  if (io.rows > 0x7fffffff) throw Error("cross_entropy: too many rows for one launch");
  if (io.dtype == DType::kBF16) cross_entropy_forward_kernel<true><<<static_cast<unsigned>(io.rows), kCeThreads, 0, stream>>>(io);
  else cross_entropy_forward_kernel<false><<<static_cast<unsigned>(io.rows), kCeThreads, 0, stream>>>(io);
  check_launch("cross_entropy forward kernel launch");
}

void cuda_cross_entropy_backward(const CrossEntropyIO& io, cudaStream_t stream) {
  check_shape(io.vocab, "cross_entropy");
  if (io.rows == 0) return;
  if (io.rows > 0x7fffffff) throw Error("cross_entropy: too many rows for one launch");
  if (io.dtype == DType::kBF16) cross_entropy_backward_kernel<true><<<static_cast<unsigned>(io.rows), kCeThreads, 0, stream>>>(io);
  else cross_entropy_backward_kernel<false><<<static_cast<unsigned>(io.rows), kCeThreads, 0, stream>>>(io);
  check_launch("cross_entropy backward kernel launch");
}

void cuda_swiglu_forward(const SwiGluIO& io, cudaStream_t stream) {
  check_shape(io.hidden, "swiglu");
  if (io.rows == 0) return;
  const unsigned blocks = elementwise_blocks(io.rows * io.hidden / 8);
  if (io.dtype == DType::kBF16) swiglu_forward_kernel<true><<<blocks, 256, 0, stream>>>(io);
  else swiglu_forward_kernel<false><<<blocks, 256, 0, stream>>>(io);
  check_launch("swiglu forward kernel launch");
}

void cuda_swiglu_backward(const SwiGluIO& io, cudaStream_t stream) {
  check_shape(io.hidden, "swiglu");
  if (io.rows == 0) return;
  const unsigned blocks = elementwise_blocks(io.rows * io.hidden / 8);
  if (io.dtype == DType::kBF16) swiglu_backward_kernel<true><<<blocks, 256, 0, stream>>>(io);
  else swiglu_backward_kernel<false><<<blocks, 256, 0, stream>>>(io);
  check_launch("swiglu backward kernel launch");
}

void cuda_rope(const RopeIO& io, cudaStream_t stream) {
  if (!rope_cuda_applies(io)) throw Error("rope: head_dim must be a multiple of 16, x's strides multiples of 16 bytes, x and y 16-byte aligned");
  if (io.batch * io.heads * io.seq == 0) return;
  const unsigned blocks = elementwise_blocks(io.batch * io.heads * io.seq * io.head_dim / 16);
  if (io.dtype == DType::kBF16) rope_kernel<true><<<blocks, 256, 0, stream>>>(io);
  else rope_kernel<false><<<blocks, 256, 0, stream>>>(io);
  check_launch("rope kernel launch");
}

void cuda_qkv_rope(const QkvRopeIO& io, cudaStream_t stream) {
  if (!qkv_rope_cuda_applies(io)) throw Error("qkv rope: head_dim must be a multiple of 16, every view's strides multiples of 16 bytes and 16-byte aligned");
  if (io.batch * io.seq == 0) return;
  const unsigned blocks = elementwise_blocks(io.batch * io.seq * io.head_dim / 16);
  if (io.dtype == DType::kBF16) qkv_rope_kernel<true><<<blocks, 256, 0, stream>>>(io);
  else qkv_rope_kernel<false><<<blocks, 256, 0, stream>>>(io);
  check_launch("qkv rope kernel launch");
}

}  // namespace ufp4
