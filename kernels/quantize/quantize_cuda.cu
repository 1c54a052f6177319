// CUDA kernels of the quantizer and their dispatch: the hot kernel (quantize_hot_cuda.cu) for the
// training path, a 1x16 fast path for the rest of the common cases, and the general kernel, where one
// thread owns one 16-element chunk of an output row and chunks of one RHT segment or one scaling
// block larger than 16 exchange values through shared memory.
// The arithmetic mirrors kernels/quantize/quantize.h step for step so the CPU oracle is matched bit for bit
// (build without fast-math: divisions must be IEEE).
#include "kernels/quantize/quantize_cuda.h"
#include "kernels/quantize/quantize_device.cuh"
#include "kernels/quantize/kernel_path.h"
#include "kernels/quantize/quantize_hot.h"

namespace ufp4 {

namespace {

enum Mode { kQuantize = 0, kTensorAmax = 1, kRhtOnly = 2 };

template <bool kInBf16, bool kOutBf16, bool kCol, bool kGroup, int kMode>
__global__ void __launch_bounds__(kThreads) quantize_kernel(const KernelSpec s, const QuantizeIO io, void* rht_out) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  __shared__ float sh_x[kGroup ? kThreads * 17 : 1];
  __shared__ float sh_m[kGroup ? kThreads : 1];

  const GridParams& g = s.grid;
  const int tid = threadIdx.x;
  if (tid < 16) { sh_level[tid] = g.level[tid]; sh_code[tid] = g.code[tid]; }

  const ChunkPosition<kCol> at(io.rows, io.cols, tid);
  const int64_t R = at.R, L = at.L, r = at.r, c = at.c, j0 = at.j0;
  const int tc = at.tc, chunk_stride = at.chunk_stride;
  const bool row_ok = r < R;
  int nvalid = 0;
  if (row_ok && j0 < L) nvalid = L - j0 >= 16 ? 16 : static_cast<int>(L - j0);

  float x[16];
  load_chunk<kInBf16, kCol>(io.in, io.cols, r, j0, nvalid, x);

  if (s.rht) {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      int p = static_cast<int>((j0 + i) & (s.rht - 1));
      if ((s.rht_signs[p >> 5] >> (p & 31)) & 1u) x[i] = -x[i];
    }
    rht_chunk_butterflies<kGroup>(s, sh_x, tid, chunk_stride, c, x);
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

  m = scale_block_amax<kCol, kGroup>(s, io.workspace, io.cols, r, c, row_ok, m, sh_m, tid, tc, chunk_stride);
  __syncthreads();  // sh_level ready
  if (nvalid == 0) return;

  finish_chunk<kOutBf16>(s, io, sh_level, sh_code, x, m, r, L, j0, nvalid);
}

// ---- 1x16 blocks, RHT off or 16, whole chunks, outside the hot kernel's reach -----------------
// (FP32 input or output, codes or scales wanted, NVFP4/MX scales, generic grids.) A thread owns four
// chunks (two for FP32 input) and issues all their loads before it computes. Rowwise: consecutive
// chunks of one row. Columnwise: 16 input rows x 4 adjacent input columns (2 for FP32), 8-byte loads
// coalesced across the warp; each column is one output chunk.
constexpr int kFastThreads = 256;
template <bool kInBf16>
struct FastTile {
  static constexpr int kRowChunks = kInBf16 ? 4 : 2;
  static constexpr int kColCols = kInBf16 ? 4 : 2;
};

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
    launch_tile_amax(io.in, io.in_dtype, io.rows, io.cols, io.workspace, stream);
  }
  if (io.tensor_amax) {
    check_cuda(cudaMemsetAsync(io.tensor_amax, 0, sizeof(float), stream), "memset");
    dispatch<kTensorAmax>(s, io, false, nullptr, stream);
  }
  const KernelPath path = select_path(s, io);  // the one decision (kernels/quantize/kernel_path.h)
  if (path == KernelPath::kHot) {
    cuda_quantize_hot(s, io, stream);
    return;
  }
  if (path == KernelPath::kFast16) {
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
