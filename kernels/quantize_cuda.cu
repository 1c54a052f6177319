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
__device__ __forceinline__ void store16(void* p, int64_t i, const float* y, int nvalid, bool vec, bool hw = false) {
  if (kBf16) {
    uint16_t* o = static_cast<uint16_t*>(p) + i;
    if (vec) {
      uint32_t w[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = pack_bf16x2(y[2 * k], y[2 * k + 1], hw);
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

// One block's scaling, as the chunk's elements need it.
struct ChunkScale {
  int state = 0;         // 0 normal, 1 zero block, 2 NaN block
  bool multiply = false; // nvfp4: v = x * factor; else v = x / factor
  bool fast_div = false; // x / factor through rcp (div_by_scale)
  float factor = 1.0f, rcp = 1.0f, decode = 0.0f;
  int zero_idx = 0;
};

// Rounds one 16-element chunk to dequantized values y and codes (when wanted). kClass picks the
// arithmetic path of rounding.h or the threshold search; all give the reference's levels.
template <int kClass>
__device__ __forceinline__ void round_chunk(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const ChunkScale& cs,
                                            bool sr, bool want_codes, const float* x, const float* u, float* y, uint8_t* codes) {
  const GridParams& g = s.grid;
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const bool neg = (f32_bits(x[i]) >> 31) != 0;
    int idx = cs.zero_idx;
    float dq;
    if (cs.state == 2) {
      dq = canonical_nan();
    } else if (cs.state == 1) {
      dq = 0.0f;
    } else {
      const float v = cs.multiply ? x[i] * cs.factor : (cs.fast_div ? div_by_scale(x[i], cs.factor, cs.rcp) : x[i] / cs.factor);
      const float a = g.symmetric ? fabsf(v) : v;
      float level;
      if (kClass == kGridUniform) {
        const float t = sr ? stochastic_uniform(s.fast, a, u[i]) : nearest_uniform(s.fast, a);
        level = t * s.fast.step;
        idx = static_cast<int>(t);
      } else if (kClass == kGridE2M1) {
        level = sr ? stochastic_e2m1(s.fast, a, u[i]) : nearest_e2m1(s.fast, a);
        if (want_codes) idx = e2m1_index(level);
      } else {
        idx = sr ? round_stochastic(g, sh_level, a, u[i]) : round_nearest(g, a);
        level = sh_level[idx];
      }
      dq = level * cs.decode;
    }
    if (g.symmetric && neg && cs.state != 2) dq = -dq;
    y[i] = dq;
    if (want_codes) {
      const uint8_t c = kClass == kGridGeneric || cs.state != 0 ? sh_code[idx] : static_cast<uint8_t>(idx);
      codes[i] = g.symmetric && cs.state != 2 ? static_cast<uint8_t>(c | (neg ? 8 : 0)) : c;
    }
  }
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
#pragma unroll
    for (int h = 1; h < 16; h <<= 1)
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if ((i & h) == 0) {
          float a = x[i], b = x[i + h];
          x[i] = a + b;
          x[i + h] = a - b;
        }
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

  // |x| bit patterns order like the values, and NaN patterns lie above +inf: an integer max is nan_max.
  uint32_t mbits = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) mbits = max(mbits, f32_bits(x[i]) & 0x7fffffffu);
  float m = mbits > 0x7f800000u ? canonical_nan() : bits_f32(mbits);

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
  const int64_t oi0 = r * L + j0;
  const bool sr = s.rounding == 1;
  float u[16];
  if (sr) {
    if ((L & 3) == 0) {  // four elements per Philox call
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        uint64_t grp = static_cast<uint64_t>(oi0 >> 2) + q;
        U32x4 rnd = philox4x32_10(static_cast<uint32_t>(grp), static_cast<uint32_t>(grp >> 32), static_cast<uint32_t>(s.offset),
                                  static_cast<uint32_t>(s.offset >> 32), static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32));
#pragma unroll
        for (int k = 0; k < 4; ++k) u[4 * q + k] = bits_to_unit(rnd.v[k]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) u[i] = bits_to_unit(philox_bits(s.seed, s.offset, static_cast<uint64_t>(oi0 + i)));
    }
  }

  float y[16];
  uint8_t codes[16];
  const bool want_codes = io.codes != nullptr;
  if (s.fast.kind == kGridUniform) round_chunk<kGridUniform>(s, sh_level, sh_code, cs, sr, want_codes, x, u, y, codes);
  else if (s.fast.kind == kGridE2M1) round_chunk<kGridE2M1>(s, sh_level, sh_code, cs, sr, want_codes, x, u, y, codes);
  else round_chunk<kGridGeneric>(s, sh_level, sh_code, cs, sr, want_codes, x, u, y, codes);

  if (io.dequant) store16<kOutBf16>(io.dequant, oi0, y, nvalid, nvalid == 16 && (L % 8) == 0, cs.state != 2);
  if (io.codes) {
    const int64_t cb = r * ((L + 1) / 2) + j0 / 2;
    if (nvalid == 16 && (L % 16) == 0) {
      uint32_t lo = 0, hi = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        lo |= static_cast<uint32_t>(codes[2 * k] | (codes[2 * k + 1] << 4)) << (8 * k);
        hi |= static_cast<uint32_t>(codes[8 + 2 * k] | (codes[8 + 2 * k + 1] << 4)) << (8 * k);
      }
      *reinterpret_cast<uint2*>(io.codes + cb) = make_uint2(lo, hi);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (2 * k >= nvalid) break;
        uint8_t hiq = 2 * k + 1 < nvalid ? codes[2 * k + 1] : 0;
        io.codes[cb + k] = static_cast<uint8_t>(codes[2 * k] | (hiq << 4));
      }
    }
  }
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
