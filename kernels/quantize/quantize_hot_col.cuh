// Columnwise pieces of the hot quantizer kernel (kernels/quantize/quantize_hot_cuda.cu), shared with the tuning
// variants in dev/cuda/ that are timed against it. A thread takes one row block of 16 input rows x 2
// adjacent input columns of a 64 x 64 tile; each column is one output chunk. Chunks the hot arithmetic
// declines go to the general code.
#pragma once
#include <cstdint>

#include "kernels/quantize/quantize_device.cuh"
#include "kernels/quantize/quantize_hot.h"

namespace ufp4 {
namespace {

constexpr int kHotThreads = 128;
constexpr int kColTile = 64;  // columnwise: input rows and columns of one tile

// Chunks the hot arithmetic declines take the general path, reloading their input (BF16, or FP32 in
// the pair kernel): out of line, so the rare case costs the hot loop no registers.
__device__ __noinline__ void general_chunk(const KernelSpec& s, const QuantizeIO& io, const float* sh_level, const uint8_t* sh_code,
                                           int64_t out_index) {
  const int64_t L = io.columnwise ? io.rows : io.cols, r = out_index / L, j0 = out_index % L;
  const bool bf16 = io.in_dtype == DType::kBF16;  // FP32: the pair kernel's weights
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    const int64_t k = io.columnwise ? (j0 + i) * io.cols + r : r * L + j0 + i;
    x[i] = bf16 ? load1<true>(io.in, k) : load1<false>(io.in, k);
  }
  if (s.rht) rht16(s, x);
  finish_chunk<true>(s, io, sh_level, sh_code, x, chunk_amax(x), r, L, j0, 16);
}

// Columnwise SR: the chunks a thread's loop declined (bit 2t + k: chunk k of its tile t, output element
// out0 + k rows + 64 t), after the loop, so nothing of it is live across the out-of-line call.
__device__ __forceinline__ void general_col_chunks(const KernelSpec& s, const QuantizeIO& io, const float* sh_level, const uint8_t* sh_code,
                                                   int64_t out0, uint32_t declined) {
  for (; declined; declined &= declined - 1) {
    const int bit = __ffs(declined) - 1;
    general_chunk(s, io, sh_level, sh_code, out0 + (bit % 2) * io.rows + (bit / 2) * kColTile);
  }
}

// A 64 x 64 tile in shared memory: coalesced 16-byte copies of whole 128-byte rows; each thread then
// takes one row block (b) of one column pair (cp). The 16-byte units of a row are swizzled by the row
// block so a warp's column reads hit 32 distinct banks.
using ColTile = uint4[kColTile][kColTile / 8];
__device__ __forceinline__ int col_slot(int row, int unit) { return unit ^ ((row / 16) << 1); }

// Thread (b, cp)'s raw words of a tile: row 16 b + i, columns 2 cp (low half) and 2 cp + 1 (high half).
__device__ __forceinline__ void col_pair_words(const ColTile& tile, int b, int cp, uint32_t (&raw)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) raw[i] = reinterpret_cast<const uint32_t*>(&tile[16 * b + i][col_slot(16 * b, cp / 4)])[cp % 4];
}

// Column k (0: low halves, 1: high halves) of those words, widened: one chunk's values.
template <bool kRht>
__device__ __forceinline__ void col_chunk_values(const HotParams& h, const uint32_t (&raw)[16], int k, float (&x)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = hot_widen<kRht>(h, raw[i], k == 1, i);
}

// SR: thread (b, cp) rounds its two column chunks from its 16 words and stores the finished ones;
// returns a bit per declined chunk (chunk k: output element oi0 + k rows). Both chunks' draws come
// first, so two independent Philox chains overlap chunk 0's transform and amax (8 more registers live).
template <int kClass, bool kRht>
__device__ __forceinline__ uint32_t round_col_words_sr(const HotParams& h, const QuantizeIO& io, const uint32_t (&raw)[16], int64_t oi0) {
  U32x4 rnd[2];
#pragma unroll
  for (int k = 0; k < 2; ++k) rnd[k] = hot_draws(h, static_cast<uint64_t>(oi0 + k * io.rows));
  uint32_t declined = 0;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t o[8];
    float x[16];
    col_chunk_values<kRht>(h, raw, k, x);
    if (!hot_chunk_values<kClass, true, kRht>(h, x, rnd[k], o)) {
      declined |= 1u << k;
      continue;
    }
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(io.dequant) + oi0 + k * io.rows);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
  return declined;
}

// A read-only 4-byte load; with kL2Line, L2 fetches the whole 128-byte line (a warp reads 32 bytes of
// each of four lines, the block's other warps the rest soon after).
template <bool kL2Line>
__device__ __forceinline__ uint32_t load_word(const uint32_t* p) {
  if (kL2Line) {
    uint32_t v;
    asm("ld.global.nc.L2::128B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
  }
  return __ldg(p);
}

// Columnwise SR without shared memory: thread (b, cp) of each of kTiles consecutive 64 x 64 row tiles
// loads its 16 words straight from global memory. A warp's load reads 32 bytes of each of 4 rows, so
// every sector is still read once, and no barrier holds a block. A tile's Philox draws run while its
// loads are in flight.
template <int kTiles, bool kL2Line, int kClass, bool kRht>
__device__ __forceinline__ void hot_col_direct_sr(const KernelSpec& s, const QuantizeIO& io, const HotParams& h, const float* sh_level,
                                                  const uint8_t* sh_code) {
  __syncthreads();  // sh_level / sh_code, for general_chunk
  const int b = threadIdx.x % 4, cp = threadIdx.x / 4;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + 2 * cp, r0 = static_cast<int64_t>(blockIdx.y) * kTiles * kColTile + 16 * b;
  if (c >= io.cols) return;
  const uint32_t stride = static_cast<uint32_t>(io.cols) * 2u;  // bytes from one row to the next
  const char* src = static_cast<const char*>(io.in) + (r0 * io.cols + c) * 2;
  const int64_t out0 = c * io.rows + r0;  // chunk k of tile t: out0 + k rows + 64 t
  uint32_t declined = 0, raw[16];
#pragma unroll 1
  for (int t = 0; t < kTiles; ++t) {
    if (r0 + t * kColTile >= io.rows) break;
    const char* p = src + static_cast<int64_t>(t) * kColTile * stride;
#pragma unroll
    for (int i = 0; i < 16; ++i) raw[i] = load_word<kL2Line>(reinterpret_cast<const uint32_t*>(p + static_cast<uint64_t>(stride) * i));
    declined |= round_col_words_sr<kClass, kRht>(h, io, raw, out0 + t * kColTile) << (2 * t);
  }
  general_col_chunks(s, io, sh_level, sh_code, out0, declined);
}

}  // namespace
}  // namespace ufp4
