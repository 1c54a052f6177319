// CUDA kernels of the segmented quantizer (kernels/quantize_segments.h). The general kernel's scheme
// (kernels/quantize_cuda.cu: one thread owns one 16-element chunk of an output row; the chunks of one
// RHT segment or one scaling block exchange values through shared memory), with each chunk's operand
// found from the segment ends on the device: its keys, its tensor amax, its SR indices and where its
// values land. No host synchronisation: the launch sizes depend on the tensor's shape only.
#include "kernels/quantize_cuda.h"
#include "kernels/quantize_device.cuh"
#include "kernels/quantize_segments.h"

namespace ufp4 {

namespace {

constexpr int kTR = 32;  // output rows per thread block
constexpr int kTC = 8;   // 16-element chunks per thread block (128 elements: the largest group)
constexpr int kThreads = kTR * kTC;

// The segment holding row t: the first g with ends[g] > t (G when none does).
__device__ __forceinline__ int segment_of(const int32_t* ends, int G, int64_t t) {
  int lo = 0, hi = G;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (ends[mid] > t) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// Rounds the chunk's first nvalid elements (SR index of element i: sr0 + i) and stores nstore values,
// element i at out[o0 + i * ostride]; elements past nvalid are layout padding (+0).
template <int kClass, bool kOutBf16>
__device__ __forceinline__ void round_store(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const ChunkScale& cs,
                                            const float* x, uint64_t seed, uint64_t sr0, int nvalid, int nstore, void* out, int64_t o0,
                                            int64_t ostride, bool vec) {
  const bool sr = s.rounding == 1;
  const bool one_call = sr && (sr0 & 15) == 0;  // the chunk's draws from one Philox call (philox.h)
  const U32x4 rnd = one_call ? sr_bytes16(seed, s.offset, sr0 >> 4) : U32x4{{0, 0, 0, 0}};
  const bool hw = cs.state != 2;
  // Four elements at a time, the loop not unrolled: one copy of the rounding code (quantize_device.cuh says why).
#pragma unroll 1
  for (int q = 0; q < 4; ++q) {
    float xq[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) xq[e] = q == 0 ? x[e] : q == 1 ? x[4 + e] : q == 2 ? x[8 + e] : x[12 + e];
    const uint32_t wq = q == 0 ? rnd.v[0] : q == 1 ? rnd.v[1] : q == 2 ? rnd.v[2] : rnd.v[3];
    float y[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = 4 * q + e;
      uint32_t k = 0, code = 0;
      if (one_call) k = (wq >> (8 * e)) & 0xffu;
      else if (sr && i < nvalid) k = sr_draw(seed, s.offset, sr0 + i);
      y[e] = i < nvalid ? round_element<kClass>(s, sh_level, sh_code, cs, sr, false, xq[e], k, code) : 0.0f;
    }
    if (kOutBf16) {
      uint16_t* o = static_cast<uint16_t*>(out) + o0 + 4 * q * ostride;
      const uint32_t w0 = pack_bf16x2(y[0], y[1], hw), w1 = pack_bf16x2(y[2], y[3], hw);
      if (vec) {
        *reinterpret_cast<uint2*>(o) = make_uint2(w0, w1);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (4 * q + e < nstore) o[e * ostride] = static_cast<uint16_t>((e < 2 ? w0 : w1) >> (16 * (e & 1)));
      }
    } else {
      float* o = static_cast<float*>(out) + o0 + 4 * q * ostride;
      if (vec) {
        *reinterpret_cast<float4*>(o) = make_float4(y[0], y[1], y[2], y[3]);
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (4 * q + e < nstore) o[e * ostride] = y[e];
      }
    }
  }
}

// kAmax: accumulate each operand's tensor amax (after RHT) into io.tensor_amax; else quantize.
template <bool kInBf16, bool kOutBf16, bool kCol, bool kGroup, bool kAmax>
__global__ void __launch_bounds__(kThreads) quantize_segments_kernel(const KernelSpec s, const SegmentedQuantizeIO io) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  __shared__ float sh_x[kGroup ? kThreads * 17 : 1];
  __shared__ float sh_m[kGroup ? kThreads : 1];

  const int tid = threadIdx.x;
  if (tid < 16) { sh_level[tid] = s.grid.level[tid]; sh_code[tid] = s.grid.code[tid]; }

  // Output rows R, each quantized along L: rowwise the input's rows, columnwise its columns.
  const int64_t R = kCol ? io.cols : io.rows, L = kCol ? io.rows : io.cols;
  const int tr = kCol ? tid % kTR : tid / kTC;
  const int tc = kCol ? tid / kTR : tid % kTC;
  const int chunk_stride = kCol ? kTR : 1;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kTR + tr;
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kTC + tc;
  const int64_t j0 = c * 16;
  const int G = static_cast<int>(io.segments);
  int nstore = 0;  // elements of the chunk in the output
  if (r < R && j0 < L) nstore = L - j0 >= 16 ? 16 : static_cast<int>(L - j0);

  // The chunk's operand: the segment of its (first) token row, and its position in the operand.
  const int64_t token = kCol ? j0 : r;
  int g = G;
  int64_t pos = 0;   // rowwise: operand row; columnwise: operand position of element 0
  int nvalid = 0;    // elements of the chunk inside the operand
  if (nstore > 0) {
    g = segment_of(io.ends, G, token);
    if (g < G) {
      const int64_t begin = g ? io.ends[g - 1] : 0, len = io.lens ? io.lens[g] : io.ends[g] - begin;
      pos = token - begin;
      if (pos < len) nvalid = kCol ? (len - pos >= 16 ? 16 : static_cast<int>(len - pos)) : nstore;
    }
  }

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
    if (nvalid > 0) {
      const uint32_t* signs = io.rht_signs + 4 * g;
      const int64_t p0 = kCol ? pos : j0;  // position along the quantized dimension of the operand
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const int p = static_cast<int>((p0 + i) & (s.rht - 1));
        if ((signs[p >> 5] >> (p & 31)) & 1u) x[i] = -x[i];
      }
    }
    butterfly16(x);
    if (kGroup) {
      for (int h = 1; h * 16 < s.rht; h <<= 1) {  // h counts chunks; segments start on whole groups
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

  float m = chunk_amax(x);

  if (kAmax) {
    // Lanes that share an operand: the 8 chunks of one row (rowwise), the whole warp (columnwise: one
    // chunk position, 32 columns).
#pragma unroll
    for (int o = kCol ? 16 : kTC / 2; o > 0; o >>= 1) m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
    const bool leader = kCol ? (tid & 31) == 0 : tc == 0;
    // Non-negative floats (and the canonical NaN above +inf) order like their bit patterns.
    if (leader && g < G && nstore > 0) atomicMax(reinterpret_cast<unsigned int*>(io.tensor_amax + g), f32_bits(m));
    return;
  }

  if (s.block_2d) {
    const int64_t ntc = (io.cols + 15) / 16;
    m = nstore > 0 ? io.workspace[kCol ? c * ntc + r / 16 : (r / 16) * ntc + c] : 0.0f;
  } else if (kGroup && s.block > 16) {
    const int B = s.block / 16;
    sh_m[tid] = m;
    __syncthreads();
    const int first = tid - (tc % B) * chunk_stride;
    for (int k = 0; k < B; ++k) m = nan_max(m, sh_m[first + k * chunk_stride]);
  }
  __syncthreads();  // sh_level ready
  if (nstore == 0) return;

  ChunkScale cs;
  uint64_t seed = 0, sr0 = 0;
  if (nvalid > 0) {
    uint8_t bits = 0;
    cs = chunk_scale(s, m, s.scale_kind == 1 ? io.tensor_amax[g] : 0.0f, bits);
    seed = io.seeds[g];
    // The element's index in quantize.h's output of the operand alone: [len, cols] rowwise, [cols, len] columnwise.
    if (kCol) {
      const int64_t begin = g ? io.ends[g - 1] : 0, len = io.lens ? io.lens[g] : io.ends[g] - begin;
      sr0 = static_cast<uint64_t>(r * len + pos);
    } else {
      sr0 = static_cast<uint64_t>(pos * io.cols + j0);
    }
  }
  const int64_t o0 = kCol ? j0 * io.cols + r : r * io.cols + j0;
  const int64_t ostride = kCol ? io.cols : 1;
  const bool vec = !kCol && nstore == 16 && (io.cols % 8) == 0;
  if (s.fast.kind == kGridUniform)
    round_store<kGridUniform, kOutBf16>(s, sh_level, sh_code, cs, x, seed, sr0, nvalid, nstore, io.dequant, o0, ostride, vec);
  else if (s.fast.kind == kGridE2M1)
    round_store<kGridE2M1, kOutBf16>(s, sh_level, sh_code, cs, x, seed, sr0, nvalid, nstore, io.dequant, o0, ostride, vec);
  else
    round_store<kGridGeneric, kOutBf16>(s, sh_level, sh_code, cs, x, seed, sr0, nvalid, nstore, io.dequant, o0, ostride, vec);
}

template <bool kInBf16, bool kOutBf16, bool kCol, bool kAmax>
void launch(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  const int64_t R = kCol ? io.cols : io.rows, L = kCol ? io.rows : io.cols;
  const int64_t nchunks = (L + 15) / 16;
  dim3 grid(static_cast<unsigned>((R + kTR - 1) / kTR), static_cast<unsigned>((nchunks + kTC - 1) / kTC));
  if (grid.y > 65535u) throw Error("quantize segments: dimension of " + std::to_string(L) + " elements is too long for one launch");
  const bool group = s.rht > 16 || (s.block > 16 && !s.block_2d && !kAmax);
  if (group) quantize_segments_kernel<kInBf16, kOutBf16, kCol, true, kAmax><<<grid, kThreads, 0, stream>>>(s, io);
  else quantize_segments_kernel<kInBf16, kOutBf16, kCol, false, kAmax><<<grid, kThreads, 0, stream>>>(s, io);
  check_cuda(cudaGetLastError(), "quantize segments kernel launch");
}

template <bool kAmax>
void dispatch(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  const bool ib = io.in_dtype == DType::kBF16, ob = io.out_dtype == DType::kBF16;
#define UFP4_LAUNCH(I, O) (io.columnwise ? launch<I, O, true, kAmax>(s, io, stream) : launch<I, O, false, kAmax>(s, io, stream))
  if (ib) { if (ob) UFP4_LAUNCH(true, true); else UFP4_LAUNCH(true, false); }
  else { if (ob) UFP4_LAUNCH(false, true); else UFP4_LAUNCH(false, false); }
#undef UFP4_LAUNCH
}

}  // namespace

void cuda_quantize_segments(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  check_segments_shape(s, io);
  if (io.segments > (1 << 30)) throw Error("quantize segments: too many segments");
  if (s.block_2d) launch_tile_amax(io.in, io.in_dtype, io.rows, io.cols, io.workspace, stream);
  if (io.tensor_amax) {
    check_cuda(cudaMemsetAsync(io.tensor_amax, 0, sizeof(float) * io.segments, stream), "memset");
    dispatch<true>(s, io, stream);
  }
  dispatch<false>(s, io, stream);
}

}  // namespace ufp4
