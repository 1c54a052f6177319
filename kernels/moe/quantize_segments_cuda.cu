// CUDA kernels of the segmented quantizer (kernels/moe/quantize_segments.h). Each chunk's operand is found
// from the segment ends on the device: its keys, its tensor amax, its SR indices and where its values
// land. No host synchronisation: the launch sizes depend on the tensor's shape only.
// - The hot kernels: the training path's specs (kernels/quantize/quantize_hot.h: BF16 or FP32 in, BF16 out,
//   1x16, FP32 scales, RHT off or 16, E2M1 or uniform grids) with the hot path's chunk arithmetic;
//   chunks outside its proven range take the general arithmetic.
// - The general kernel: every other spec, in the general kernel's scheme (kernels/quantize/quantize_cuda.cu: one
//   thread owns one 16-element chunk of an output row; the chunks of one RHT segment or one scaling
//   block exchange values through shared memory).
#include "kernels/quantize/quantize_cuda.h"
#include "kernels/quantize/quantize_device.cuh"
#include "kernels/quantize/quantize_hot.h"
#include "kernels/moe/quantize_segments.h"
#include "kernels/moe/quantize_segments_hot.cuh"

namespace ufp4 {

namespace {

// Rounds the chunk's first nvalid elements (SR index of element i: sr0 + i) and stores nstore values,
// element i at out[o0 + i * ostride]; elements past nvalid are layout padding (+0).
template <int kClass, bool kOutBf16>
__device__ __forceinline__ void round_store(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const ChunkScale& cs,
                                            const float* x, uint64_t seed, uint64_t sr0, int nvalid, int nstore, void* out, int64_t o0,
                                            int64_t ostride, bool vec) {
  const bool sr = s.rounding == 1;
  const bool one_call = sr && (sr0 & 15) == 0;  // the chunk's draws from one Philox call (philox.h)
  const uint64_t offset = sr ? sr_offset(s) : 0;
  const U32x4 rnd = one_call ? sr_bytes16(seed, offset, sr0 >> 4) : U32x4{{0, 0, 0, 0}};
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
      else if (sr && i < nvalid) k = sr_draw(seed, offset, sr0 + i);
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
  const ChunkPosition<kCol> at(io.rows, io.cols, tid);
  const int64_t R = at.R, L = at.L, r = at.r, c = at.c, j0 = at.j0;
  const int tc = at.tc, chunk_stride = at.chunk_stride;
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
  load_chunk<kInBf16, kCol>(io.in, io.cols, r, j0, nvalid, x);

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
    // Operands start on whole RHT segments: the chunks of one segment are one operand's.
    rht_chunk_butterflies<kGroup>(s, sh_x, tid, chunk_stride, c, x);
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

  m = scale_block_amax<kCol, kGroup>(s, io.workspace, io.cols, r, c, nstore > 0, m, sh_m, tid, tc, chunk_stride);
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


// ---- hot kernels ----------------------------------------------------------------------------------
constexpr int kHotSegThreads = 256;

// The segment ends and the grid's levels and codes into shared memory (the whole block calls it).
__device__ __forceinline__ void load_hot_tables(const KernelSpec& s, const SegmentedQuantizeIO& io, int32_t* sh_ends, float* sh_level,
                                                uint8_t* sh_code) {
  for (int i = threadIdx.x; i < io.segments; i += blockDim.x) sh_ends[i] = io.ends[i];
  if (threadIdx.x < 16) { sh_level[threadIdx.x] = s.grid.level[threadIdx.x]; sh_code[threadIdx.x] = s.grid.code[threadIdx.x]; }
  __syncthreads();
}

// Rowwise: a thread owns one 16-element chunk of a row.
template <int kClass, bool kSR, bool kRht, bool kF32>
__global__ void __launch_bounds__(kHotSegThreads) segments_hot_row_kernel(const __grid_constant__ KernelSpec s,
                                                                         const __grid_constant__ SegmentedQuantizeIO io,
                                                                         const __grid_constant__ HotParams h) {
  __shared__ int32_t sh_ends[kHotMaxSegments];
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  const int G = static_cast<int>(io.segments);
  load_hot_tables(s, io, sh_ends, sh_level, sh_code);
  const int64_t per_row = io.cols / 16;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kHotSegThreads + threadIdx.x;
  const int64_t r = t / per_row, j0 = (t % per_row) * 16;
  if (r >= io.rows) return;
  uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(io.dequant) + r * io.cols + j0);
  const int g = segment_of(sh_ends, G, r);
  const int64_t begin = g > 0 && g < G ? sh_ends[g - 1] : 0;
  const int64_t pos = r - begin;
  if (g == G || pos >= (io.lens ? io.lens[g] : sh_ends[g] - begin)) {  // layout padding
    dst[0] = make_uint4(0, 0, 0, 0);
    dst[1] = make_uint4(0, 0, 0, 0);
    return;
  }
  // The chunk's 16 elements as FP32 bits: two 16-byte loads of BF16, or four of FP32.
  uint32_t bits[16];
  if (kF32) {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const float*>(io.in) + r * io.cols + j0);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 a = src[q];
      bits[4 * q] = a.x, bits[4 * q + 1] = a.y, bits[4 * q + 2] = a.z, bits[4 * q + 3] = a.w;
    }
  } else {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(io.in) + r * io.cols + j0);
    const uint4 a = src[0], b = src[1];
    const uint32_t w[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) bits[i] = (i & 1) ? (w[i / 2] & 0xffff0000u) : (w[i / 2] << 16);
  }
  const uint32_t signs = kRht ? io.rht_signs[4 * g] : 0u;
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const uint32_t flip = kRht && ((signs >> i) & 1u) ? 0x80000000u : 0u;
    x[i] = bits_f32(bits[i] ^ flip);
  }
  const uint64_t seed = kSR ? io.seeds[g] : 0, sr0 = static_cast<uint64_t>(pos * io.cols + j0);
  uint32_t out[8];
  if (!hot_chunk_values<kClass, kSR, kRht>(h, x, kSR ? sr_bytes16(seed, sr_offset(s), sr0 >> 4) : U32x4{}, out)) {
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = bits_f32(bits[i]);
    general_chunk<kClass, kSR>(s, sh_level, sh_code, x, signs, seed, sr0, 16, out);
  }
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
}

// Columnwise: a block copies its tile to shared memory in coalesced 16-byte units (layout row j0 + i
// read from input row src_rows[j0 + i] when the layout is gathered, zeros for -1 and past the
// operand), each thread rounds one column chunk in place, and the block stores the tile in 16-byte
// units. Two columns a thread straight from global memory (4-byte accesses, 16 a thread in flight, the
// SR code for both chunks live) ran at about half the rowwise kernel's speed. BF16 input: the results
// overwrite the thread's own column; FP32 input (twice the tile) gets a BF16 output tile of its own.
template <int kClass, bool kSR, bool kRht, bool kF32>
__global__ void __launch_bounds__(kSegColThreads) segments_hot_col_kernel(const __grid_constant__ KernelSpec s,
                                                                         const __grid_constant__ SegmentedQuantizeIO io,
                                                                         const __grid_constant__ HotParams h) {
  constexpr int kInUnits = kF32 ? 2 * kSegColUnits : kSegColUnits;  // 16-byte units of an input tile row
  __shared__ int32_t sh_ends[kHotMaxSegments];
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  __shared__ uint4 tile[16][kInUnits];
  __shared__ uint4 out_tile[kF32 ? 16 : 1][kSegColUnits];
  const int G = static_cast<int>(io.segments);
  load_hot_tables(s, io, sh_ends, sh_level, sh_code);
  const int tid = threadIdx.x;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * 16, c0 = static_cast<int64_t>(blockIdx.y) * kSegColThreads;
  const int nstore = io.rows - j0 >= 16 ? 16 : static_cast<int>(io.rows - j0);
  const int units = io.cols - c0 >= kSegColThreads ? kSegColUnits : static_cast<int>(io.cols - c0) / 8;  // output units; cols % 8 == 0
  const int in_units = kF32 ? 2 * units : units;
  const int g = segment_of(sh_ends, G, j0);
  const int64_t begin = g > 0 && g < G ? sh_ends[g - 1] : 0;
  const int64_t pos = j0 - begin;
  const int64_t len = g < G ? (io.lens ? io.lens[g] : sh_ends[g] - begin) : 0;
  const int nvalid = pos >= len ? 0 : (len - pos >= 16 ? 16 : static_cast<int>(len - pos));
  // Thread t moves units t, t + 128, ...: row u / kInUnits, unit u % kInUnits.
  const char* in = static_cast<const char*>(io.in) + c0 * (kF32 ? 4 : 2);
  const int64_t in_row_bytes = io.cols * (kF32 ? 4 : 2);
#pragma unroll
  for (int q = 0; q < kInUnits / 8; ++q) {
    const int u = tid + q * kSegColThreads, i = u / kInUnits, k = u % kInUnits;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (k < in_units && i < nvalid) {
      const int64_t row = io.src_rows ? io.src_rows[j0 + i] : j0 + i;
      if (row >= 0) v = __ldg(reinterpret_cast<const uint4*>(in + row * in_row_bytes) + k);
    }
    tile[i][k] = v;
  }
  __syncthreads();
  // The thread's column: element i of the input at col[i * 128], of the output at ocol[i * 128].
  const void* col = kF32 ? static_cast<const void*>(reinterpret_cast<const uint32_t*>(&tile[0][0]) + tid)
                         : static_cast<const void*>(reinterpret_cast<const uint16_t*>(&tile[0][0]) + tid);
  uint16_t* ocol = reinterpret_cast<uint16_t*>(kF32 ? &out_tile[0][0] : &tile[0][0]) + tid;
  if (nvalid > 0 && tid < 8 * units) {
    uint32_t out[8];
    round_col_chunk<kClass, kSR, kRht, kF32>(s, h, io, sh_level, sh_code, col, g, c0 + tid, len, pos, nvalid, kSR ? sr_offset(s) : 0, out);
    // A thread's column only: no other thread reads these halves.
#pragma unroll
    for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = i < nvalid ? static_cast<uint16_t>(out[i / 2] >> (16 * (i & 1))) : 0;
  } else if (kF32) {
#pragma unroll
    for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = 0;  // layout padding, or columns past the tensor (not stored)
  }
  __syncthreads();
  const uint4(*otile)[kSegColUnits] = kF32 ? out_tile : reinterpret_cast<const uint4(*)[kSegColUnits]>(&tile[0][0]);
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int u = tid + q * kSegColThreads, i = u / kSegColUnits, k = u % kSegColUnits;
    if (k < units && i < nstore) reinterpret_cast<uint4*>(static_cast<uint16_t*>(io.dequant) + (j0 + i) * io.cols + c0)[k] = otile[i][k];
  }
}

template <bool kCol, int kClass, bool kSR, bool kRht, bool kF32>
void launch_hot_segments(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  const HotParams h = make_hot_params(s);
  if (kCol) {
    const dim3 grid(static_cast<unsigned>((io.rows + 15) / 16), static_cast<unsigned>((io.cols + kSegColThreads - 1) / kSegColThreads));
    if ((io.rows + 15) / 16 > 0x7fffffff || grid.y > 65535u) throw Error("quantize segments: tensor too large for one launch");
    if (grid.x == 0 || grid.y == 0) return;
    segments_hot_col_kernel<kClass, kSR, kRht, kF32><<<grid, kSegColThreads, 0, stream>>>(s, io, h);
  } else {
    const int64_t blocks = (io.rows * (io.cols / 16) + kHotSegThreads - 1) / kHotSegThreads;
    if (blocks > 0x7fffffff) throw Error("quantize segments: tensor too large for one launch");
    if (blocks == 0) return;
    segments_hot_row_kernel<kClass, kSR, kRht, kF32><<<static_cast<unsigned>(blocks), kHotSegThreads, 0, stream>>>(s, io, h);
  }
  check_cuda(cudaGetLastError(), "quantize segments hot kernel launch");
}

template <bool kCol, int kClass, bool kF32>
void launch_hot_segments_rounding(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  if (s.rounding == 1) {
    if (s.rht) launch_hot_segments<kCol, kClass, true, true, kF32>(s, io, stream);
    else launch_hot_segments<kCol, kClass, true, false, kF32>(s, io, stream);
  } else {
    if (s.rht) launch_hot_segments<kCol, kClass, false, true, kF32>(s, io, stream);
    else launch_hot_segments<kCol, kClass, false, false, kF32>(s, io, stream);
  }
}

template <bool kCol, bool kF32>
void launch_hot_segments_grid(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  if (s.fast.kind == kGridE2M1) launch_hot_segments_rounding<kCol, kGridE2M1, kF32>(s, io, stream);
  else launch_hot_segments_rounding<kCol, kGridUniform, kF32>(s, io, stream);
}

void dispatch_hot(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  const bool f32 = io.in_dtype == DType::kF32;  // the experts' FP32 master weights
  if (io.columnwise) {
    if (f32) launch_hot_segments_grid<true, true>(s, io, stream);
    else launch_hot_segments_grid<true, false>(s, io, stream);
  } else {
    if (f32) launch_hot_segments_grid<false, true>(s, io, stream);
    else launch_hot_segments_grid<false, false>(s, io, stream);
  }
}

}  // namespace

void cuda_quantize_segments(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream) {
  check_segments_shape(s, io);
  if (io.segments > (1 << 30)) throw Error("quantize segments: too many segments");
  if (io.src_rows && !segments_take_src(s, io)) throw Error("quantize segments: only the hot columnwise kernel reads a gathered input");
  if (segments_hot_path_applies(s, io)) {
    dispatch_hot(s, io, stream);
    return;
  }
  if (s.block_2d) launch_tile_amax(io.in, io.in_dtype, io.rows, io.cols, io.workspace, stream);
  if (io.tensor_amax) {
    check_cuda(cudaMemsetAsync(io.tensor_amax, 0, sizeof(float) * io.segments, stream), "memset");
    dispatch<true>(s, io, stream);
  }
  dispatch<false>(s, io, stream);
}

}  // namespace ufp4
