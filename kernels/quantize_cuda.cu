// CUDA kernels of the quantizer. One thread owns one 16-element chunk of an output row; chunks of
// one RHT segment or one scaling block larger than 16 exchange values through shared memory.
// The arithmetic mirrors kernels/quantize.h step for step so the CPU oracle is matched bit for bit
// (build without fast-math: divisions must be IEEE).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <string>

#include "harness/error.h"
#include "kernels/float_bits.h"
#include "kernels/philox.h"
#include "kernels/quantize_cuda.h"
#include "kernels/rounding.h"

namespace ufp4 {

namespace {

constexpr int kTR = 32;  // output rows per thread block
constexpr int kTC = 8;   // 16-element chunks per thread block (128 elements: the largest group)
constexpr int kThreads = kTR * kTC;

enum Mode { kQuantize = 0, kTensorAmax = 1, kRhtOnly = 2 };

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

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
  if (hw) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
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

// One block's scaling, as the chunk's elements need it.
struct ChunkScale {
  int state = 0;         // 0 normal, 1 zero block, 2 NaN block
  bool multiply = false; // nvfp4: v = x * factor; else v = x / factor
  bool fast_div = false; // x / factor through rcp (div_by_scale)
  float factor = 1.0f, rcp = 1.0f, decode = 0.0f;
  int zero_idx = 0;
};

// Rounds one element to its dequantized value and code. kClass picks the arithmetic path of
// rounding.h or the threshold search; all give the reference's levels.
template <int kClass>
__device__ __forceinline__ float round_element(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const ChunkScale& cs,
                                              bool sr, bool want_codes, float x, float u, uint32_t& code_out) {
  const GridParams& g = s.grid;
  const bool neg = (f32_bits(x) >> 31) != 0;
  int idx = cs.zero_idx;
  float dq;
  if (cs.state == 2) {
    dq = canonical_nan();
  } else if (cs.state == 1) {
    dq = 0.0f;
  } else {
    float v;
    if (cs.multiply) {
      v = x * cs.factor;
    } else if (cs.fast_div) {
      v = div_by_scale(x, cs.factor, cs.rcp);
    } else {
      v = rare_div(x, cs.factor);
    }
    const float a = g.symmetric ? fabsf(v) : v;
    float level;
    if (kClass == kGridUniform) {
      const float t = sr ? stochastic_uniform(s.fast, a, u) : nearest_uniform(s.fast, a);
      level = t * s.fast.step;
      idx = static_cast<int>(t);
    } else if (kClass == kGridE2M1) {
      level = sr ? stochastic_e2m1(s.fast, a, u) : nearest_e2m1(s.fast, a);
      if (want_codes) idx = e2m1_index(level);
    } else {
      idx = sr ? round_stochastic(g, sh_level, a, u) : round_nearest(g, a);
      level = sh_level[idx];
    }
    dq = level * cs.decode;
  }
  if (g.symmetric && neg && cs.state != 2) dq = -dq;
  if (want_codes) {
    const uint32_t c = kClass == kGridGeneric || cs.state != 0 ? sh_code[idx] : static_cast<uint32_t>(idx);
    code_out = g.symmetric && cs.state != 2 ? (c | (neg ? 8u : 0u)) : c;
  }
  return dq;
}

// Rounds a chunk four elements at a time (one Philox call each) and stores as it goes. The loop
// over the four groups is not unrolled: one copy of the rounding code per grid class keeps the
// kernel small enough for the instruction cache (fully unrolled it ran at a quarter of the speed).
template <int kClass, bool kOutBf16>
__device__ __forceinline__ void round_and_store(const KernelSpec& s, const QuantizeIO& io, const float* sh_level, const uint8_t* sh_code,
                                                const ChunkScale& cs, const float* x, int64_t r, int64_t L, int64_t j0, int nvalid) {
  const bool sr = s.rounding == 1, want_codes = io.codes != nullptr;
  const int64_t oi0 = r * L + j0;
  const bool vec = nvalid == 16 && (L % 8) == 0;
  const bool hw = cs.state != 2;  // no NaN among the values: the hardware BF16 conversion is exact
  uint32_t code_lo = 0, code_hi = 0;
#pragma unroll 1
  for (int q = 0; q < 4; ++q) {
    // The group's inputs, selected from registers (a run-time index into x would go to local memory).
    float xq[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) xq[e] = q == 0 ? x[e] : q == 1 ? x[4 + e] : q == 2 ? x[8 + e] : x[12 + e];
    float u[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (sr) {
      if ((L & 3) == 0) {  // four elements per Philox call
        const uint64_t grp = static_cast<uint64_t>(oi0 >> 2) + q;
        const U32x4 rnd = philox4x32_10(static_cast<uint32_t>(grp), static_cast<uint32_t>(grp >> 32), static_cast<uint32_t>(s.offset),
                                        static_cast<uint32_t>(s.offset >> 32), static_cast<uint32_t>(s.seed),
                                        static_cast<uint32_t>(s.seed >> 32));
#pragma unroll
        for (int e = 0; e < 4; ++e) u[e] = bits_to_unit(rnd.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) u[e] = bits_to_unit(philox_bits(s.seed, s.offset, static_cast<uint64_t>(oi0 + 4 * q + e)));
      }
    }
    float y[4];
    uint32_t codes4 = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      uint32_t c = 0;
      y[e] = round_element<kClass>(s, sh_level, sh_code, cs, sr, want_codes, xq[e], u[e], c);
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
  const GridParams& g = s.grid;
  // Block scale (see kernels/quantize.h).
  ChunkScale cs;
  const float gmax = g.gmax;
  float bm = m;
  if (s.scale_kind == 1) {
    const float ta = *io.tensor_amax;
    if (!is_finite(ta)) bm = canonical_nan();
  }
  uint8_t bits = 0;
  if (!is_finite(bm)) {
    cs.state = 2; cs.decode = canonical_nan(); bits = s.scale_kind == 2 ? 0xff : 0x7f;
  } else if (s.scale_kind == 0) {
    float sc = bm / gmax;
    if (sc == 0.0f) cs.state = 1;
    cs.factor = sc; cs.decode = sc;
  } else if (s.scale_kind == 1) {
    const float ta = *io.tensor_amax;
    float s_enc = fminf(448.0f * gmax / ta, FLT_MAX);
    if (ta == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
    float e4m3 = round_to_e4m3(fminf(bm * (s_enc * (1.0f / gmax)), FLT_MAX));
    float s_dec = 1.0f / s_enc;
    cs.multiply = true;
    cs.factor = fminf(1.0f / (e4m3 * s_dec), FLT_MAX);
    cs.decode = e4m3 * s_dec;
    bits = e4m3_code(e4m3);
  } else if (s.scale_kind == 3) {
    cs.factor = 1.0f; cs.decode = 1.0f;
  } else {
    int e = bm == 0.0f ? -127 : floor_log2(bm) - floor_log2(gmax);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    cs.factor = exp2_int(e); cs.decode = cs.factor; bits = e8m0_code(e);
  }
  if (cs.state == 0 && !cs.multiply && cs.factor >= 0x1p-100f && cs.factor <= 0x1p100f) {
    cs.fast_div = true;
    cs.rcp = 1.0f / cs.factor;
  }

  const int64_t nblk = (L + s.block - 1) / s.block;
  if (j0 % s.block == 0) {
    const int64_t bi = r * nblk + j0 / s.block;
    if (io.scales) io.scales[bi] = cs.state == 1 ? 0.0f : cs.decode;
    if (io.amax) io.amax[bi] = m;
    if (io.scale_bits) io.scale_bits[bi] = bits;
  }

  cs.zero_idx = g.symmetric ? 0 : round_nearest(g, 0.0f);
  if (s.fast.kind == kGridUniform) round_and_store<kGridUniform, kOutBf16>(s, io, sh_level, sh_code, cs, x, r, L, j0, nvalid);
  else if (s.fast.kind == kGridE2M1) round_and_store<kGridE2M1, kOutBf16>(s, io, sh_level, sh_code, cs, x, r, L, j0, nvalid);
  else round_and_store<kGridGeneric, kOutBf16>(s, io, sh_level, sh_code, cs, x, r, L, j0, nvalid);
}

template <bool kInBf16, bool kOutBf16, bool kCol, bool kGroup, int kMode>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const KernelSpec s, const QuantizeIO io, void* rht_out) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  __shared__ float sh_x[kGroup ? kThreads * 17 : 1];
  __shared__ float sh_m[kGroup ? kThreads : 1];

  const GridParams& g = s.grid;
  const int tid = threadIdx.x;
  if (tid < 16) { sh_level[tid] = g.level[tid]; sh_code[tid] = g.code[tid]; }

  const int64_t R = kCol ? io.cols : io.rows, L = kCol ? io.rows : io.cols;
  const int tr = kCol ? tid % kTR : tid / kTC;
  const int tc = kCol ? tid / kTR : tid % kTC;
  const int chunk_stride = kCol ? kTR : 1;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kTR + tr;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kTC + tc;
  const int64_t j0 = c * 16;
  const bool row_ok = r < R;
  int nvalid = 0;
  if (row_ok && j0 < L) nvalid = L - j0 >= 16 ? 16 : static_cast<int>(L - j0);

  float x[16];
  if (!kCol) {
    const int64_t base = r * io.cols + j0;
    if (nvalid == 16 && (io.cols % 8) == 0) {
      load16<kInBf16>(io.in, base, x);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) x[i] = i < nvalid ? load1<kInBf16>(io.in, base + i) : 0.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = i < nvalid ? load1<kInBf16>(io.in, (j0 + i) * io.cols + r) : 0.0f;
  }

  if (s.rht) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      int p = static_cast<int>((j0 + i) & (s.rht - 1));
      if ((s.rht_signs[p >> 5] >> (p & 31)) & 1u) x[i] = -x[i];
    }
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
          float other = sh_x[partner * 17 + i];
          x[i] = lower ? x[i] + other : other - x[i];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] *= s.rht_scale;
  }

  if (kMode == kRhtOnly) {
    if (nvalid > 0) store16<kOutBf16>(rht_out, r * L + j0, x, nvalid, nvalid == 16 && (L % 8) == 0);
    return;
  }

  float m = chunk_amax(x);

  if (kMode == kTensorAmax) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
    // Non-negative floats (and the canonical NaN above +inf) order like their bit patterns.
    if ((tid & 31) == 0) atomicMax(reinterpret_cast<unsigned int*>(io.tensor_amax), f32_bits(m));
    return;
  }

  if (s.block_2d) {
    const int64_t ntc = (io.cols + 15) / 16;
    m = row_ok ? io.workspace[kCol ? c * ntc + r / 16 : (r / 16) * ntc + c] : 0.0f;
  } else if (kGroup && s.block > 16) {
    const int G = s.block / 16;
    sh_m[tid] = m;
    __syncthreads();
    const int first = tid - (tc % G) * chunk_stride;
    for (int k = 0; k < G; ++k) m = nan_max(m, sh_m[first + k * chunk_stride]);
  }
  __syncthreads();  // sh_level ready
  if (nvalid == 0) return;

  finish_chunk<kOutBf16>(s, io, sh_level, sh_code, x, m, r, L, j0, nvalid);
}

// ---- The training path's common case near memory bandwidth ----------------------------------
// 1x16 blocks, RHT off or 16, whole chunks. A thread owns four chunks (two for FP32 input) and
// issues all their loads before it computes, so enough bytes are in flight to hide memory latency
// (with one chunk a thread the kernel above is latency-bound near 1 TB/s). Rowwise: consecutive
// chunks of one row. Columnwise: 16 input rows x 4 adjacent input columns (2 for FP32), 8-byte
// loads coalesced across the warp; each column is one output chunk.
constexpr int kFastThreads = 256;
template <bool kInBf16>
struct FastTile {
  static constexpr int kRowChunks = kInBf16 ? 4 : 2;
  static constexpr int kColCols = kInBf16 ? 4 : 2;
};

// RHT-16 of one chunk: signs of positions 0..15, butterflies, 1/4 (as the kernel above for n = 16).
__device__ __forceinline__ void rht16(const KernelSpec& s, float* x) {
  const uint32_t signs = s.rht_signs[0];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    if ((signs >> i) & 1u) x[i] = -x[i];
  butterfly16(x);
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] *= s.rht_scale;
}

template <bool kInBf16, bool kOutBf16, bool kCol>
__global__ void __launch_bounds__(kFastThreads, 2) quantize16_kernel(const KernelSpec s, const QuantizeIO io) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  if (threadIdx.x < 16) { sh_level[threadIdx.x] = s.grid.level[threadIdx.x]; sh_code[threadIdx.x] = s.grid.code[threadIdx.x]; }
  __syncthreads();
  const int64_t R = kCol ? io.cols : io.rows, L = kCol ? io.rows : io.cols;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kFastThreads + threadIdx.x;
  float x[16];
  if (!kCol) {
    constexpr int K = FastTile<kInBf16>::kRowChunks, W = kInBf16 ? 2 : 4;  // 16-byte words a chunk
    const int64_t chunks = L / 16, groups = (chunks + K - 1) / K;
    const int64_t r = t / groups, c0 = (t % groups) * K;
    if (r >= R) return;
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const char*>(io.in) + (r * L + c0 * 16) * (kInBf16 ? 2 : 4));
    uint4 raw[K][W];
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (c0 + k < chunks)
#pragma unroll
        for (int w = 0; w < W; ++w) raw[k][w] = src[k * W + w];
    // Not unrolled (one inlined copy of the rounding code): the chunk's words are selected from registers.
#pragma unroll 1
    for (int k = 0; k < K; ++k) {
      if (c0 + k >= chunks) break;
#pragma unroll
      for (int w = 0; w < W; ++w) {
        uint4 q = raw[0][w];
#pragma unroll
        for (int kk = 1; kk < K; ++kk)
          if (k == kk) q = raw[kk][w];
        const uint32_t v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (kInBf16) {
            x[8 * w + 2 * e] = bits_f32(v[e] << 16);
            x[8 * w + 2 * e + 1] = bits_f32(v[e] & 0xffff0000u);
          } else {
            x[4 * w + e] = bits_f32(v[e]);
          }
        }
      }
      if (s.rht) rht16(s, x);
      finish_chunk<kOutBf16>(s, io, sh_level, sh_code, x, chunk_amax(x), r, L, (c0 + k) * 16, 16);
    }
  } else {
    constexpr int C = FastTile<kInBf16>::kColCols;  // input columns a thread: 8 bytes of each row
    const int64_t col_groups = R / C;
    const int64_t g = t % col_groups, b = t / col_groups;  // b: block of 16 input rows = output chunk
    if (b >= L / 16) return;
    uint2 raw[16];
#pragma unroll
    for (int i = 0; i < 16; ++i)
      raw[i] = *reinterpret_cast<const uint2*>(static_cast<const char*>(io.in) + ((b * 16 + i) * io.cols + g * C) * (kInBf16 ? 2 : 4));
#pragma unroll 1
    for (int j = 0; j < C; ++j) {
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const uint32_t w = (kInBf16 ? j / 2 : j) == 0 ? raw[i].x : raw[i].y;
        x[i] = kInBf16 ? bits_f32((j & 1) ? (w & 0xffff0000u) : (w << 16)) : bits_f32(w);
      }
      if (s.rht) rht16(s, x);
      finish_chunk<kOutBf16>(s, io, sh_level, sh_code, x, chunk_amax(x), g * C + j, L, b * 16, 16);
    }
  }
}

// Whether quantize16_kernel covers this call.
bool fast_path(const KernelSpec& s, const QuantizeIO& io) {
  const int64_t L = io.columnwise ? io.rows : io.cols;
  const auto aligned = [](const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; };
  return s.block == 16 && !s.block_2d && (s.rht == 0 || s.rht == 16) && L % 16 == 0 && (!io.columnwise || io.cols % 4 == 0) &&
         aligned(io.in) && aligned(io.dequant) && aligned(io.codes);
}

template <bool kInBf16, bool kOutBf16, bool kCol>
void launch_fast(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream) {
  const int64_t R = kCol ? io.cols : io.rows, L = kCol ? io.rows : io.cols;
  const int64_t threads = kCol ? (R / FastTile<kInBf16>::kColCols) * (L / 16)
                               : R * ((L / 16 + FastTile<kInBf16>::kRowChunks - 1) / FastTile<kInBf16>::kRowChunks);
  const int64_t blocks = (threads + kFastThreads - 1) / kFastThreads;
  if (blocks > 0x7fffffff) throw Error("quantize: tensor too large for one launch");
  if (blocks == 0) return;
  quantize16_kernel<kInBf16, kOutBf16, kCol><<<static_cast<unsigned>(blocks), kFastThreads, 0, stream>>>(s, io);
  check_cuda(cudaGetLastError(), "quantize kernel launch");
}

// Amax of each 16x16 tile of the input, in input coordinates.
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

template <bool kInBf16, bool kOutBf16, bool kCol, int kMode>
void launch_mode(const KernelSpec& s, const QuantizeIO& io, void* rht_out, cudaStream_t stream) {
  const int64_t R = kCol ? io.cols : io.rows, L = kCol ? io.rows : io.cols;
  const int64_t nchunks = (L + 15) / 16;
  dim3 grid(static_cast<unsigned>((R + kTR - 1) / kTR), static_cast<unsigned>((nchunks + kTC - 1) / kTC));
  if (grid.y > 65535u) throw Error("quantize: dimension of " + std::to_string(L) + " elements is too long for one launch");
  const bool group = s.rht > 16 || (s.block > 16 && !s.block_2d && kMode == kQuantize);
  if (group) quantize_kernel<kInBf16, kOutBf16, kCol, true, kMode><<<grid, kThreads, 0, stream>>>(s, io, rht_out);
  else quantize_kernel<kInBf16, kOutBf16, kCol, false, kMode><<<grid, kThreads, 0, stream>>>(s, io, rht_out);
  check_cuda(cudaGetLastError(), "quantize kernel launch");
}

template <int kMode>
void dispatch(const KernelSpec& s, const QuantizeIO& io, bool out_bf16, void* rht_out, cudaStream_t stream) {
  const bool in_bf16 = io.in_dtype == DType::kBF16;
#define UFP4_LAUNCH(I, O, C) launch_mode<I, O, C, kMode>(s, io, rht_out, stream)
  if (in_bf16) {
    if (out_bf16) { if (io.columnwise) UFP4_LAUNCH(true, true, true); else UFP4_LAUNCH(true, true, false); }
    else { if (io.columnwise) UFP4_LAUNCH(true, false, true); else UFP4_LAUNCH(true, false, false); }
  } else {
    if (out_bf16) { if (io.columnwise) UFP4_LAUNCH(false, true, true); else UFP4_LAUNCH(false, true, false); }
    else { if (io.columnwise) UFP4_LAUNCH(false, false, true); else UFP4_LAUNCH(false, false, false); }
  }
#undef UFP4_LAUNCH
}

}  // namespace

bool cuda_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return false; }
  return n > 0;
}

void cuda_quantize(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream) {
  check_quantize_shape(s, io);
  if (s.block_2d) {
    if (!io.workspace) throw Error("quantize: block_2d needs a workspace");
    const int64_t tiles = ((io.rows + 15) / 16) * ((io.cols + 15) / 16);
    const unsigned blocks = static_cast<unsigned>((tiles + 255) / 256);
    if (io.in_dtype == DType::kBF16) tile_amax_kernel<true><<<blocks, 256, 0, stream>>>(io.in, io.rows, io.cols, io.workspace);
    else tile_amax_kernel<false><<<blocks, 256, 0, stream>>>(io.in, io.rows, io.cols, io.workspace);
    check_cuda(cudaGetLastError(), "tile amax kernel launch");
  }
  if (io.tensor_amax) {
    check_cuda(cudaMemsetAsync(io.tensor_amax, 0, sizeof(float), stream), "memset");
    dispatch<kTensorAmax>(s, io, false, nullptr, stream);
  }
  if (fast_path(s, io)) {
    const bool ib = io.in_dtype == DType::kBF16, ob = io.out_dtype == DType::kBF16;
#define UFP4_FAST(I, O) (io.columnwise ? launch_fast<I, O, true>(s, io, stream) : launch_fast<I, O, false>(s, io, stream))
    if (ib) { if (ob) UFP4_FAST(true, true); else UFP4_FAST(true, false); }
    else { if (ob) UFP4_FAST(false, true); else UFP4_FAST(false, false); }
#undef UFP4_FAST
    return;
  }
  dispatch<kQuantize>(s, io, io.out_dtype == DType::kBF16, nullptr, stream);
}

void cuda_rht(const KernelSpec& s, const void* in, DType in_dtype, void* out, DType out_dtype, int64_t rows, int64_t cols,
              bool columnwise, cudaStream_t stream) {
  QuantizeIO io;
  io.in = in; io.in_dtype = in_dtype; io.rows = rows; io.cols = cols; io.columnwise = columnwise;
  if (!s.rht) throw Error("rht: size must be 16, 32, 64 or 128 for a standalone transform");
  KernelSpec rotation = s;  // only the transform matters: the scale kind's needs do not apply
  rotation.scale_kind = 0;
  rotation.block_2d = 0;
  check_quantize_shape(rotation, io);
  dispatch<kRhtOnly>(rotation, io, out_dtype == DType::kBF16, out, stream);
}

}  // namespace ufp4
