// The hot quantizer kernel (arithmetic in kernels/quantize/quantize_hot.h). A thread owns two 16-element
// chunks and issues their loads before it computes. Rowwise: two consecutive chunks of the flattened
// tensor (16 divides a row, so no chunk straddles two rows). Columnwise (kernels/quantize/quantize_hot_col.cuh):
// one row block of 16 input rows x 2 adjacent input columns of a 64 x 64 tile (RTNE through shared
// memory, SR straight from global memory); each column is one output chunk.
#include "kernels/quantize/quantize_cuda.h"
#include "kernels/quantize/quantize_hot_col.cuh"

namespace ufp4 {

namespace {

// Columnwise SR: row tiles a thread block walks, and whether its loads fetch whole L2 lines. H200
// measured these best among the variants that dev/cuda/hot_col_sr_variants.cu times (shared-memory
// tiles, one to four row tiles, 6 to 8 blocks an SM, with and without the line hint).
constexpr int kColSrTiles = 2;
constexpr bool kColSrL2Line = true;

// Per variant, as measured on H200 (exploratory runs): whether rowwise blocks stage their loads and
// stores through shared memory, and how many thread blocks an SM must hold (caps registers: 6 = 80,
// 7 = 72, 8 = 64, 10 = 48, 12 = 40). Staging pays where the kernel waits on memory (RTNE, and SR on
// uniform grids, with more warps); E2M1 SR ran fastest unstaged at 8. Columnwise RTNE hides its tile
// barrier with 12 blocks; columnwise SR (direct loads) ran fastest at 7, ahead of 6 and 8
// (results/bench/logs/tune-hot.log).
template <bool kCol, int kClass, bool kSR>
constexpr bool kHotStage = !kCol && (!kSR || kClass == kGridUniform);
template <bool kCol, int kClass, bool kSR>
constexpr int kHotMinBlocks = kCol ? (kSR ? 7 : 12) : (kSR && kClass == kGridUniform ? 10 : 8);

// Slot of 16-byte unit j (lane j / 4's part j % 4) in a warp's staging area, swizzled so that both the
// lane-contiguous and the lane-owned access patterns touch eight distinct bank groups a quarter warp.
__device__ __forceinline__ int stage_slot(int j) { return (j & ~3) | ((j ^ (j >> 3)) & 3); }

template <bool kCol, int kClass, bool kSR, bool kRht>
__global__ void __launch_bounds__(kHotThreads, kHotMinBlocks<kCol, kClass, kSR>) quantize_hot_kernel(const __grid_constant__ KernelSpec s, const __grid_constant__ QuantizeIO io,
                                                                   const __grid_constant__ HotParams h) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  if (threadIdx.x < 16) { sh_level[threadIdx.x] = s.grid.level[threadIdx.x]; sh_code[threadIdx.x] = s.grid.code[threadIdx.x]; }
  if constexpr (kCol && kSR) {  // syncs the block before any general_chunk call
    hot_col_direct_sr<kColSrTiles, kColSrL2Line, kClass, kRht>(s, io, h, sh_level, sh_code);
    return;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  uint32_t w[2][8];
  int64_t oi[2];  // first output element of each chunk
  int n = 2;
  // Rowwise staging (whole warps in range): lanes move 512 contiguous bytes an instruction through this
  // warp's 2 KB of shared memory in both directions, instead of 16 bytes at a 64-byte stride.
  constexpr bool kStage = kHotStage<kCol, kClass, kSR>;
  bool staged = false;
  uint4* stage = nullptr;
  if constexpr (!kCol) {
    __shared__ uint4 stage_all[kStage ? kHotThreads * 4 : 1];
    const int64_t chunks = io.rows * io.cols / 16, warp_c0 = 2 * (static_cast<int64_t>(blockIdx.x) * kHotThreads + (threadIdx.x & ~31)),
                  c = warp_c0 + 2 * lane;
    staged = kStage && warp_c0 + 64 <= chunks;
    if (staged) {
      stage = stage_all + (threadIdx.x & ~31) * 4;
      const uint4* src = reinterpret_cast<const uint4*>(io.in) + 2 * warp_c0;
#pragma unroll
      for (int p = 0; p < 4; ++p) stage[stage_slot(32 * p + lane)] = src[32 * p + lane];
      __syncwarp();
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint4 q = stage[stage_slot(4 * lane + k)];
        w[k / 2][4 * (k % 2)] = q.x; w[k / 2][4 * (k % 2) + 1] = q.y; w[k / 2][4 * (k % 2) + 2] = q.z; w[k / 2][4 * (k % 2) + 3] = q.w;
      }
      __syncwarp();  // the slots are reused for the outputs
    } else {
      if (c >= chunks) return;
      if (c + 1 == chunks) n = 1;
      const uint4* src = reinterpret_cast<const uint4*>(io.in) + 2 * c;
#pragma unroll
      for (int k = 0; k < 2; ++k)
        if (k < n)
#pragma unroll
          for (int v = 0; v < 2; ++v) {
            const uint4 q = src[2 * k + v];
            w[k][4 * v] = q.x; w[k][4 * v + 1] = q.y; w[k][4 * v + 2] = q.z; w[k][4 * v + 3] = q.w;
          }
    }
    oi[0] = c * 16;
    oi[1] = oi[0] + 16;
  } else {
    // RTNE: one tile a thread block, loaded through registers (the memory-bound path: many small blocks).
    __shared__ ColTile tile;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kColTile, c0 = static_cast<int64_t>(blockIdx.x) * kColTile;
    const int64_t units = io.cols / 8;
    const uint4* src = reinterpret_cast<const uint4*>(io.in);
#pragma unroll
    for (int p = 0; p < kColTile * kColTile / 8 / kHotThreads; ++p) {
      const int idx = p * kHotThreads + threadIdx.x, row = idx / 8, u = idx % 8;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r0 + row < io.rows && c0 + 8 * u < io.cols) v = src[(r0 + row) * units + c0 / 8 + u];
      tile[row][col_slot(row, u)] = v;
    }
    __syncthreads();
    const int b = threadIdx.x % 4, cp = threadIdx.x / 4;
    if (r0 + 16 * b >= io.rows || c0 + 2 * cp >= io.cols) return;
    uint32_t raw[16];
    col_pair_words(tile, b, cp, raw);
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      w[0][k] = __byte_perm(raw[2 * k], raw[2 * k + 1], 0x5410);  // column 2cp: low halves
      w[1][k] = __byte_perm(raw[2 * k], raw[2 * k + 1], 0x7632);  // column 2cp + 1: high halves
    }
    oi[0] = (c0 + 2 * cp) * io.rows + r0 + 16 * b;
    oi[1] = oi[0] + io.rows;
  }
  bool done[2] = {true, true};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    if (k >= n) break;
    uint32_t o[8];
    done[k] = hot_chunk<kClass, kSR, kRht>(h, w[k], static_cast<uint64_t>(oi[k]), o);
    if (!done[k]) continue;
    if (staged) {
      stage[stage_slot(4 * lane + 2 * k)] = make_uint4(o[0], o[1], o[2], o[3]);
      stage[stage_slot(4 * lane + 2 * k + 1)] = make_uint4(o[4], o[5], o[6], o[7]);
    } else {
      uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(io.dequant) + oi[k]);
      dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
      dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
  if (staged) {
    uint4* dst = reinterpret_cast<uint4*>(io.dequant) + 2 * (oi[0] / 16 - 2 * lane);  // the warp's first unit
    if (__all_sync(0xffffffffu, done[0] && done[1])) {
      __syncwarp();
#pragma unroll
      for (int p = 0; p < 4; ++p) dst[32 * p + lane] = stage[stage_slot(32 * p + lane)];
    } else {  // a declined chunk in the warp: each lane stores its own finished chunks
#pragma unroll
      for (int k = 0; k < 2; ++k)
        if (done[k])
#pragma unroll
          for (int v = 0; v < 2; ++v) dst[4 * lane + 2 * k + v] = stage[stage_slot(4 * lane + 2 * k + v)];
    }
  }
  // After both chunks, so little is live across the call.
#pragma unroll
  for (int k = 0; k < 2; ++k)
    if (!done[k]) general_chunk(s, io, sh_level, sh_code, oi[k]);
}

template <bool kCol, int kClass, bool kSR, bool kRht>
void launch_hot(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream) {
  dim3 grid;
  if (kCol) {
    const int64_t row_tiles = (io.rows + kColTile - 1) / kColTile, tiles = kSR ? kColSrTiles : 1, col_tiles = (io.cols + kColTile - 1) / kColTile;
    const int64_t row_groups = (row_tiles + tiles - 1) / tiles;
    if (row_groups > 65535) throw Error("quantize: " + std::to_string(io.rows) + " rows are too many for one columnwise launch");
    grid = dim3(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_groups));
  } else {
    const int64_t pairs = (io.rows * io.cols / 16 + 1) / 2, blocks = (pairs + kHotThreads - 1) / kHotThreads;
    if (blocks > 0x7fffffff) throw Error("quantize: tensor too large for one launch");
    grid = dim3(static_cast<unsigned>(blocks));
  }
  quantize_hot_kernel<kCol, kClass, kSR, kRht><<<grid, kHotThreads, 0, stream>>>(s, io, make_hot_params(s));
  check_cuda(cudaGetLastError(), "hot quantize kernel launch");
}

template <bool kCol, int kClass>
void launch_hot_rounding(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream) {
  if (s.rounding == 1) { if (s.rht) launch_hot<kCol, kClass, true, true>(s, io, stream); else launch_hot<kCol, kClass, true, false>(s, io, stream); }
  else { if (s.rht) launch_hot<kCol, kClass, false, true>(s, io, stream); else launch_hot<kCol, kClass, false, false>(s, io, stream); }
}

}  // namespace

void cuda_quantize_hot(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream) {
  if (!hot_path_applies(s, io)) throw Error("quantize: the hot kernel does not cover this call");
  if (io.columnwise) {
    if (s.fast.kind == kGridE2M1) launch_hot_rounding<true, kGridE2M1>(s, io, stream); else launch_hot_rounding<true, kGridUniform>(s, io, stream);
  } else {
    if (s.fast.kind == kGridE2M1) launch_hot_rounding<false, kGridE2M1>(s, io, stream); else launch_hot_rounding<false, kGridUniform>(s, io, stream);
  }
}

}  // namespace ufp4
