// Device helpers shared by the quantizer kernels: loads and stores, the RHT-16 butterflies, and the
// chunk's rounding and stores around quantize_element.h (block scale and element rounding, host and device).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <string>

#include "common/error.h"
#include "kernels/numerics/cuda_check.cuh"
#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/philox.h"
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_element.h"
#include "kernels/numerics/rounding.h"

namespace ufp4 {

template <bool kBf16>
__device__ __forceinline__ float load1(const void* p, int64_t i) {
  if (kBf16) return bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

template <bool kBf16>
__device__ __forceinline__ void load16(const void* p, int64_t i, float* x) {
  if (kBf16) {
    const uint4* v = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i);
    uint4 a = v[0], b = v[1];
    uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      x[2 * k] = bits_f32(w[k] << 16);
      x[2 * k + 1] = bits_f32(w[k] & 0xffff0000u);
    }
  } else {
    const float4* v = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float4 q = v[k];
      x[4 * k] = q.x; x[4 * k + 1] = q.y; x[4 * k + 2] = q.z; x[4 * k + 3] = q.w;
    }
  }
}

// BF16 pair, round to nearest even. `hw`: the hardware conversion, identical for non-NaN values (NaN
// payloads differ: callers pass hw only when no value can be NaN).
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi, bool hw) {
  if (hw) return pack_bf16x2_finite(lo, hi);
  return static_cast<uint32_t>(f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(f32_to_bf16_bits(hi)) << 16);
}

template <bool kBf16>
__device__ __forceinline__ void store16(void* p, int64_t i, const float* y, int nvalid, bool vec) {
  if (kBf16) {
    uint16_t* o = static_cast<uint16_t*>(p) + i;
    if (vec) {
      uint32_t w[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = pack_bf16x2(y[2 * k], y[2 * k + 1], false);  // may hold NaN
      uint4* v = reinterpret_cast<uint4*>(o);
      v[0] = make_uint4(w[0], w[1], w[2], w[3]);
      v[1] = make_uint4(w[4], w[5], w[6], w[7]);
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k)
        if (k < nvalid) o[k] = f32_to_bf16_bits(y[k]);
    }
  } else {
    float* o = static_cast<float*>(p) + i;
    if (vec) {
      float4* v = reinterpret_cast<float4*>(o);
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = make_float4(y[4 * k], y[4 * k + 1], y[4 * k + 2], y[4 * k + 3]);
    } else {
#pragma unroll
      for (int k = 0; k < 16; ++k)
        if (k < nvalid) o[k] = y[k];
    }
  }
}

// The 16-point Walsh-Hadamard butterflies of one chunk (unnormalized), in the reference's order.
__device__ __forceinline__ void butterfly16(float* x) {
#pragma unroll
  for (int h = 1; h < 16; h <<= 1)
#pragma unroll
    for (int i = 0; i < 16; ++i)
      if ((i & h) == 0) {
        float a = x[i], b = x[i + h];
        x[i] = a + b;
        x[i + h] = a - b;
      }
}

// max |x| over a chunk. |x| bit patterns order like the values and NaN patterns lie above +inf,
// so an integer max is nan_max (any NaN gives the canonical NaN).
__device__ __forceinline__ float chunk_amax(const float* x) {
  uint32_t mbits = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) mbits = max(mbits, f32_bits(x[i]) & 0x7fffffffu);
  return mbits > 0x7f800000u ? canonical_nan() : bits_f32(mbits);
}

// Rounds a chunk four elements at a time and stores as it goes. The loop over the four groups is
// not unrolled: one copy of the rounding code per grid class keeps the kernel small enough for the
// instruction cache (fully unrolled it ran at a quarter of the speed).
template <int kClass, bool kOutBf16>
__device__ __forceinline__ void round_and_store(const KernelSpec& s, const QuantizeIO& io, const float* sh_level, const uint8_t* sh_code,
                                                const ChunkScale& cs, const float* x, int64_t r, int64_t L, int64_t j0, int nvalid) {
  const bool sr = s.rounding == 1, want_codes = io.codes != nullptr;
  const int64_t oi0 = r * L + j0;
  const bool vec = nvalid == 16 && (L % 8) == 0;
  const bool hw = cs.state != 2;  // no NaN among the values: the hardware BF16 conversion is exact
  // SR: a chunk starting at a multiple of 16 takes its draws from one Philox call (philox.h).
  const bool one_call = sr && (oi0 & 15) == 0;
  const uint64_t offset = sr ? sr_offset(s) : 0;
  const U32x4 rnd = one_call ? sr_bytes16(s.seed, offset, static_cast<uint64_t>(oi0) >> 4) : U32x4{{0, 0, 0, 0}};
  uint32_t code_lo = 0, code_hi = 0;
#pragma unroll 1
  for (int q = 0; q < 4; ++q) {
    // The group's inputs, selected from registers (a run-time index into x would go to local memory).
    float xq[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) xq[e] = q == 0 ? x[e] : q == 1 ? x[4 + e] : q == 2 ? x[8 + e] : x[12 + e];
    uint32_t k[4] = {0, 0, 0, 0};
    if (one_call) {
      const uint32_t wq = q == 0 ? rnd.v[0] : q == 1 ? rnd.v[1] : q == 2 ? rnd.v[2] : rnd.v[3];
#pragma unroll
      for (int e = 0; e < 4; ++e) k[e] = (wq >> (8 * e)) & 0xffu;
    } else if (sr) {
#pragma unroll
      for (int e = 0; e < 4; ++e) k[e] = sr_draw(s.seed, offset, static_cast<uint64_t>(oi0 + 4 * q + e));
    }
    float y[4];
    uint32_t codes4 = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t c = 0;
      y[e] = round_element<kClass>(s, sh_level, sh_code, cs, sr, want_codes, xq[e], k[e], c);
      codes4 |= c << (4 * e);
    }
    if (q < 2) code_lo |= codes4 << (16 * q);
    else code_hi |= codes4 << (16 * (q - 2));
    if (io.dequant) {
      if (kOutBf16) {
        uint16_t* o = static_cast<uint16_t*>(io.dequant) + oi0 + 4 * q;
        const uint32_t w0 = pack_bf16x2(y[0], y[1], hw), w1 = pack_bf16x2(y[2], y[3], hw);
        if (vec) {
          *reinterpret_cast<uint2*>(o) = make_uint2(w0, w1);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (4 * q + e < nvalid) o[e] = static_cast<uint16_t>((e < 2 ? w0 : w1) >> (16 * (e & 1)));
        }
      } else {
        float* o = static_cast<float*>(io.dequant) + oi0 + 4 * q;
        if (vec) {
          *reinterpret_cast<float4*>(o) = make_float4(y[0], y[1], y[2], y[3]);
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (4 * q + e < nvalid) o[e] = y[e];
        }
      }
    }
  }
  if (want_codes) {
    const int64_t cb = r * ((L + 1) / 2) + j0 / 2;
    if (nvalid == 16 && (L % 16) == 0) {
      *reinterpret_cast<uint2*>(io.codes + cb) = make_uint2(code_lo, code_hi);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (2 * k >= nvalid) break;
        uint32_t byte = ((k < 4 ? code_lo >> (8 * k) : code_hi >> (8 * (k - 4)))) & 0xffu;
        if (2 * k + 1 >= nvalid) byte &= 0x0fu;
        io.codes[cb + k] = static_cast<uint8_t>(byte);
      }
    }
  }
}

// Everything after the block amax m of one chunk x (RHT applied) of output row r at column j0:
// block scale, scale outputs (by the chunk that starts the block), rounding, stores.
template <bool kOutBf16>
__device__ __forceinline__ void finish_chunk(const KernelSpec& s, const QuantizeIO& io, const float* sh_level, const uint8_t* sh_code,
                                             const float* x, float m, int64_t r, int64_t L, int64_t j0, int nvalid) {
  uint8_t bits = 0;
  const ChunkScale cs = chunk_scale(s, m, s.scale_kind == 1 ? *io.tensor_amax : 0.0f, bits);
  const int64_t nblk = (L + s.block - 1) / s.block;
  if (j0 % s.block == 0) {
    const int64_t bi = r * nblk + j0 / s.block;
    if (io.scales) io.scales[bi] = cs.state == 1 ? 0.0f : cs.decode;
    if (io.amax) io.amax[bi] = m;
    if (io.scale_bits) io.scale_bits[bi] = bits;
  }

  if (s.fast.kind == kGridUniform) round_and_store<kGridUniform, kOutBf16>(s, io, sh_level, sh_code, cs, x, r, L, j0, nvalid);
  else if (s.fast.kind == kGridE2M1) round_and_store<kGridE2M1, kOutBf16>(s, io, sh_level, sh_code, cs, x, r, L, j0, nvalid);
  else round_and_store<kGridGeneric, kOutBf16>(s, io, sh_level, sh_code, cs, x, r, L, j0, nvalid);
}

// RHT-16 of one chunk with the sign bits `signs` of positions 0..15: signs, butterflies, 1/4.
__device__ __forceinline__ void rht16_signs(const KernelSpec& s, uint32_t signs, float* x) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if ((signs >> i) & 1u) x[i] = -x[i];
  butterfly16(x);
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] *= s.rht_scale;
}

// RHT-16 of one chunk with the spec's signs (as the general kernel does for n = 16).
__device__ __forceinline__ void rht16(const KernelSpec& s, float* x) { rht16_signs(s, s.rht_signs[0], x); }

// One chunk's input: 16 values of output row r from position j0 along the quantized dimension
// (nvalid of them; the rest 0). Rowwise they run along input row r, columnwise down input column r.
template <bool kInBf16, bool kCol>
__device__ __forceinline__ void load_chunk(const void* in, int64_t cols, int64_t r, int64_t j0, int nvalid, float* x) {
  if (!kCol) {
    const int64_t base = r * cols + j0;
    if (nvalid == 16 && (cols % 8) == 0) {
      load16<kInBf16>(in, base, x);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[i] = i < nvalid ? load1<kInBf16>(in, base + i) : 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = i < nvalid ? load1<kInBf16>(in, (j0 + i) * cols + r) : 0.0f;
  }
}

// The generic kernels' tiling (quantize_cuda.cu, quantize_segments_cuda.cu): kTR output rows x kTC chunks a block.
constexpr int kTR = 32;  // output rows per thread block
constexpr int kTC = 8;   // 16-element chunks per thread block (128 elements: the largest group)
constexpr int kThreads = kTR * kTC;

// A thread's chunk in the generic kernels' tiling of an input of `rows` x `cols`: output row r of R
// (rowwise the input's rows, columnwise its columns), each quantized along L; chunk c of it, elements j0
// to j0 + 15. Rowwise a row's kTC chunks sit on consecutive threads, columnwise a chunk position's kTR
// rows do: the chunks of one row are `chunk_stride` threads apart.
template <bool kCol>
struct ChunkPosition {
  int64_t R, L, r, c, j0;
  int tc, chunk_stride;
  __device__ __forceinline__ ChunkPosition(int64_t rows, int64_t cols, int tid)
      : R(kCol ? cols : rows), L(kCol ? rows : cols), tc(kCol ? tid / kTR : tid % kTC), chunk_stride(kCol ? kTR : 1) {
    r = static_cast<int64_t>(blockIdx.x) * kTR + (kCol ? tid % kTR : tid / kTC);
    c = static_cast<int64_t>(blockIdx.y) * kTC + tc;
    j0 = c * 16;
  }
};

// The RHT of one chunk after its signs: the 16-point butterflies, the butterflies across the chunks of
// an RHT segment longer than 16 (kGroup; through sh_x, 17 floats a thread; every thread of the block
// must call it), then the 1/sqrt(n) scaling. c: the chunk's index along the quantized dimension;
// partners are chunk_stride threads apart per chunk.
template <bool kGroup>
__device__ __forceinline__ void rht_chunk_butterflies(const KernelSpec& s, float* sh_x, int tid, int chunk_stride, int64_t c, float* x) {
  butterfly16(x);
  if (kGroup) {
    for (int h = 1; h * 16 < s.rht; h <<= 1) {  // h counts chunks
      __syncthreads();
#pragma unroll
      for (int i = 0; i < 16; ++i) sh_x[tid * 17 + i] = x[i];
      __syncthreads();
      const int partner = tid ^ (h * chunk_stride);
      const bool lower = (c & h) == 0;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float other = sh_x[partner * 17 + i];
        x[i] = lower ? x[i] + other : other - x[i];
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] *= s.rht_scale;
}

// The amax a chunk's scale comes from: its 16x16 tile's with 2D blocks (the workspace's, in input
// coordinates; 0 where the thread holds no row), its scale block's with blocks longer than 16 (kGroup:
// the block's chunks are `chunk_stride` threads apart, met through sh_m; every thread of the block must
// call it), else the chunk's own `m`.
template <bool kCol, bool kGroup>
__device__ __forceinline__ float scale_block_amax(const KernelSpec& s, const float* workspace, int64_t cols, int64_t r, int64_t c, bool has_row, float m,
                                                  float* sh_m, int tid, int tc, int chunk_stride) {
  if (s.block_2d) {
    const int64_t ntc = (cols + 15) / 16;
    return has_row ? workspace[kCol ? c * ntc + r / 16 : (r / 16) * ntc + c] : 0.0f;
  }
  if (kGroup && s.block > 16) {
    const int chunks = s.block / 16;
    sh_m[tid] = m;
    __syncthreads();
    const int first = tid - (tc % chunks) * chunk_stride;
    for (int k = 0; k < chunks; ++k) m = nan_max(m, sh_m[first + k * chunk_stride]);
  }
  return m;
}

// Amax of each 16x16 tile of the input, in input coordinates (2D weight blocks).
template <bool kInBf16>
__global__ void tile_amax_kernel(const void* in, int64_t rows, int64_t cols, float* out) {
  const int64_t ntr = (rows + 15) / 16, ntc = (cols + 15) / 16;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= ntr * ntc) return;
  const int64_t ti = t / ntc, tj = t % ntc;
  float m = 0.0f;
  for (int64_t i = ti * 16; i < rows && i < ti * 16 + 16; ++i)
    for (int64_t j = tj * 16; j < cols && j < tj * 16 + 16; ++j) m = nan_max(m, fabsf(load1<kInBf16>(in, i * cols + j)));
  out[t] = m;
}

inline void launch_tile_amax(const void* in, DType in_dtype, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  const int64_t tiles = ((rows + 15) / 16) * ((cols + 15) / 16);
  const unsigned blocks = static_cast<unsigned>((tiles + 255) / 256);
  if (in_dtype == DType::kBF16) tile_amax_kernel<true><<<blocks, 256, 0, stream>>>(in, rows, cols, out);
  else tile_amax_kernel<false><<<blocks, 256, 0, stream>>>(in, rows, cols, out);
  check_cuda(cudaGetLastError(), "tile amax kernel launch");
}

}  // namespace ufp4
