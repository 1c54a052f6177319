// The hot quantizer kernel (arithmetic in kernels/quantize_hot.h). A thread owns two 16-element
// chunks and issues their loads before it computes. Rowwise: two consecutive chunks of the flattened
// tensor (16 divides a row, so no chunk straddles two rows). Columnwise: one row block of 16 input rows
// x 2 adjacent input columns of a 64 x 64 tile (RTNE through shared memory, SR straight from global
// memory); each column is one output chunk.
#include <type_traits>

#include "kernels/quantize_cuda.h"
#include "kernels/quantize_device.cuh"
#include "kernels/quantize_hot.h"

namespace ufp4 {

namespace {

// Compile-time knobs for tuning the columnwise SR kernel on another GPU (tools/tune-hot.sh sets them
// through the CMake variable UFP4_HOT_TUNE); the defaults are what H200 measured best. TILES, RELOAD:
// see hot_col_tiles_sr (DIRECT 0) and round_col_words; DIRECT, PREFETCH: hot_col_direct_sr; L2_LINE: load_word.
#ifndef UFP4_HOT_COL_SR_BLOCKS
#define UFP4_HOT_COL_SR_BLOCKS 7
#endif
#ifndef UFP4_HOT_COL_SR_TILES
#define UFP4_HOT_COL_SR_TILES 2
#endif
#ifndef UFP4_HOT_COL_SR_EARLY_DRAWS
#define UFP4_HOT_COL_SR_EARLY_DRAWS 1
#endif
#ifndef UFP4_HOT_COL_SR_RELOAD
#define UFP4_HOT_COL_SR_RELOAD 0
#endif
#ifndef UFP4_HOT_COL_SR_DIRECT
#define UFP4_HOT_COL_SR_DIRECT 1
#endif
#ifndef UFP4_HOT_COL_SR_PREFETCH
#define UFP4_HOT_COL_SR_PREFETCH 0
#endif
#ifndef UFP4_HOT_COL_SR_L2_LINE
#define UFP4_HOT_COL_SR_L2_LINE 1
#endif

constexpr int kHotThreads = 128;
constexpr int kColTile = 64;          // columnwise: input rows and columns of one tile
constexpr int kColTiles = UFP4_HOT_COL_SR_TILES;  // columnwise SR: row tiles a thread block walks

// Per variant, as measured on H200 (exploratory runs): whether rowwise blocks stage their loads and
// stores through shared memory, and how many thread blocks an SM must hold (caps registers: 6 = 80,
// 8 = 64, 10 = 48, 12 = 40). Staging pays where the kernel waits on memory (RTNE, and SR on uniform
// grids, with more warps); E2M1 SR ran fastest unstaged at 8. Columnwise RTNE hides its tile barrier
// with 12 blocks. Columnwise SR: the shared-memory tile kernel (DIRECT 0) ran fastest at 6 (80
// registers); the direct loads at 7 (72), ahead of 6 and 8 (results/bench/logs/tune-hot.log).
template <bool kCol, int kClass, bool kSR>
constexpr bool kHotStage = !kCol && (!kSR || kClass == kGridUniform);
template <bool kCol, int kClass, bool kSR>
constexpr int kHotMinBlocks = kCol ? (kSR ? UFP4_HOT_COL_SR_BLOCKS : 12) : (kSR && kClass == kGridUniform ? 10 : 8);

// 16-byte asynchronous global-to-shared copy (zero-filled when !valid), and its group fences.
__device__ __forceinline__ void cp_async16_shared(unsigned dst, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory"); }

// Chunks the hot arithmetic declines take the general path, reloading their input: out of line,
// so the rare case costs the hot loop no registers.
__device__ __noinline__ void general_chunk(const KernelSpec& s, const QuantizeIO& io, const float* sh_level, const uint8_t* sh_code,
                                           int64_t out_index) {
  const int64_t L = io.columnwise ? io.rows : io.cols, r = out_index / L, j0 = out_index % L;
  const uint16_t* in = static_cast<const uint16_t*>(io.in);
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = bf16_bits_to_f32(io.columnwise ? in[(j0 + i) * io.cols + r] : in[r * L + j0 + i]);
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

// Slot of 16-byte unit j (lane j / 4's part j % 4) in a warp's staging area, swizzled so that both the
// lane-contiguous and the lane-owned access patterns touch eight distinct bank groups a quarter warp.
__device__ __forceinline__ int stage_slot(int j) { return (j & ~3) | ((j ^ (j >> 3)) & 3); }

// Columnwise: 64 x 64 tiles through shared memory. Coalesced 16-byte copies of whole 128-byte rows;
// then each thread takes one row block (b) of one column pair (cp). The 16-byte units of a row are
// swizzled by the row block so a warp's column reads hit 32 distinct banks.
using ColTile = uint4[kColTile][kColTile / 8];
__device__ __forceinline__ int col_slot(int row, int unit) { return unit ^ ((row / 16) << 1); }

// Thread (b, cp)'s raw words of a tile: row 16 b + i, columns 2 cp (low half) and 2 cp + 1 (high half).
// kAgain: a second read of the same words (volatile, so the compiler cannot keep the first read's registers).
template <bool kAgain = false>
__device__ __forceinline__ void col_pair_words(const ColTile& tile, int b, int cp, uint32_t (&raw)[16]) {
  using Word = std::conditional_t<kAgain, const volatile uint32_t, const uint32_t>;
#pragma unroll
  for (int i = 0; i < 16; ++i) raw[i] = reinterpret_cast<Word*>(&tile[16 * b + i][col_slot(16 * b, cp / 4)])[cp % 4];
}

// Column k (0: low halves, 1: high halves) of those words, widened: one chunk's values.
template <bool kRht>
__device__ __forceinline__ void col_chunk_values(const HotParams& h, const uint32_t (&raw)[16], int k, float (&x)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = hot_widen<kRht>(h, raw[i], k == 1, i);
}

// Thread (b, cp) rounds its two column chunks from its 16 words (row 16 b + i: column 2 cp in the low,
// 2 cp + 1 in the high half) and stores the finished ones; returns a bit per declined chunk (chunk k:
// output element oi0 + k rows). reload(raw): RELOAD's second read of the words; refill(raw): called once
// the words are widened, free to start loading the next ones into raw.
template <int kClass, bool kSR, bool kRht, typename Reload, typename Refill>
__device__ __forceinline__ uint32_t round_col_words(const HotParams& h, const QuantizeIO& io, uint32_t (&raw)[16], int64_t oi0,
                                                    Reload&& reload, Refill&& refill) {
  // SR: both chunks' draws first, so two independent Philox chains overlap chunk 0's transform and
  // amax (8 more registers live).
  constexpr bool kEarly = kSR && UFP4_HOT_COL_SR_EARLY_DRAWS;
  U32x4 rnd[2] = {};
  if (kEarly)
#pragma unroll
    for (int k = 0; k < 2; ++k) rnd[k] = hot_draws(h, static_cast<uint64_t>(oi0 + k * io.rows));
  uint32_t declined = 0;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    uint32_t o[8];
    float x[16];
    // SR with RELOAD: the second chunk reads its words again instead of keeping 16 registers live
    // through the first chunk.
    if (kSR && UFP4_HOT_COL_SR_RELOAD && k == 1) reload(raw);
    col_chunk_values<kRht>(h, raw, k, x);
    if (k == 1) refill(raw);
    const int64_t oi = oi0 + k * io.rows;
    if (kSR && !kEarly) rnd[k] = hot_draws(h, static_cast<uint64_t>(oi));
    if (!hot_chunk_values<kClass, kSR, kRht>(h, x, rnd[k], o)) {
      declined |= 1u << k;
      continue;
    }
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(io.dequant) + oi);
    dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
    dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
  return declined;
}

// The same out of a shared-memory tile (16 more shared loads a pair with RELOAD).
template <int kClass, bool kSR, bool kRht>
__device__ __forceinline__ uint32_t round_col_pair(const HotParams& h, const QuantizeIO& io, const ColTile& tile, int b, int cp,
                                                   int64_t oi0) {
  uint32_t raw[16];
  col_pair_words(tile, b, cp, raw);
  return round_col_words<kClass, kSR, kRht>(h, io, raw, oi0, [&](uint32_t (&w)[16]) { col_pair_words<true>(tile, b, cp, w); },
                                            [](uint32_t (&)[16]) {});
}

// A read-only 4-byte load; with L2_LINE, L2 fetches the whole 128-byte line (a warp reads 32 bytes of each of
// four lines, the block's other warps the rest soon after).
__device__ __forceinline__ uint32_t load_word(const uint32_t* p) {
  if (UFP4_HOT_COL_SR_L2_LINE) {
    uint32_t v;
    asm("ld.global.nc.L2::128B.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
  }
  return __ldg(p);
}

// SR without shared memory (DIRECT): thread (b, cp) of each 64 x 64 tile loads its 16 words straight
// from global memory. A warp's load reads 32 bytes of each of 4 rows, so every sector is still read
// once, and no barrier holds a block. A tile's Philox draws run while its loads are in flight; with
// PREFETCH, the next tile's loads go out into the same registers once the second chunk is widened.
template <int kClass, bool kRht>
__device__ __forceinline__ void hot_col_direct_sr(const KernelSpec& s, const QuantizeIO& io, const HotParams& h, const float* sh_level,
                                                  const uint8_t* sh_code) {
  __syncthreads();  // sh_level / sh_code, for general_chunk
  const int b = threadIdx.x % 4, cp = threadIdx.x / 4;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColTile + 2 * cp, r0 = static_cast<int64_t>(blockIdx.y) * kColTiles * kColTile + 16 * b;
  if (c >= io.cols) return;
  const uint32_t stride = static_cast<uint32_t>(io.cols) * 2u;  // bytes from one row to the next
  const char* src = static_cast<const char*>(io.in) + (r0 * io.cols + c) * 2;
  auto load = [&](uint32_t (&w)[16], int t) {
    const char* p = src + static_cast<int64_t>(t) * kColTile * stride;
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = load_word(reinterpret_cast<const uint32_t*>(p + static_cast<uint64_t>(stride) * i));
  };
  const int64_t out0 = c * io.rows + r0;  // chunk k of tile t: out0 + k rows + 64 t
  uint32_t declined = 0, raw[16];
#pragma unroll 1
  for (int t = 0; t < kColTiles; ++t) {
    if (r0 + t * kColTile >= io.rows) break;
    if (!UFP4_HOT_COL_SR_PREFETCH || t == 0) load(raw, t);
    const bool next = t + 1 < kColTiles && r0 + (t + 1) * kColTile < io.rows;
    declined |= round_col_words<kClass, true, kRht>(h, io, raw, out0 + t * kColTile, [&](uint32_t (&w)[16]) { load(w, t); },
                                                    [&](uint32_t (&w)[16]) {
                                                      if (UFP4_HOT_COL_SR_PREFETCH && next) load(w, t + 1);
                                                    })
                << (2 * t);
  }
  general_col_chunks(s, io, sh_level, sh_code, out0, declined);
}

// SR: kColTiles consecutive row tiles a thread block, the next tile's asynchronous copy in flight while
// one is rounded (the longer SR arithmetic otherwise leaves a block with nothing in flight). No buffer is
// refilled before the barrier that follows its last reader (up to three buffers).
template <int kClass, bool kRht>
__device__ __forceinline__ void hot_col_tiles_sr(const KernelSpec& s, const QuantizeIO& io, const HotParams& h, const float* sh_level,
                                                 const uint8_t* sh_code) {
  constexpr int kTiles = kColTiles, kBufs = kTiles < 3 ? kTiles : 3;
  __shared__ ColTile tile[kBufs];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColTile, ty0 = static_cast<int64_t>(blockIdx.y) * kTiles;
  const int64_t row_tiles = (io.rows + kColTile - 1) / kColTile;
  const int nt = static_cast<int>(row_tiles - ty0 < kTiles ? row_tiles - ty0 : kTiles);
  // Copies: thread i moves 16-byte unit i % 8 of tile rows i / 8 + 16 p, p < 4.
  static_assert(kColTile * kColTile / 8 == 4 * kHotThreads, "four 16-byte units a thread a tile");
  const int64_t units = io.cols / 8;
  const int crow = threadIdx.x / 8, cu = threadIdx.x % 8;
  const int rows_left = static_cast<int>(io.rows - ty0 * kColTile - crow);  // < 2^24 (65535 launch rows of tile groups)
  const bool col_ok = c0 + 8 * cu < io.cols;
  const uint4* src = reinterpret_cast<const uint4*>(io.in);
  // Addresses advance by running pointers and compile-time shared offsets (recomputing them from
  // (t, p) took 64-bit multiplies for every copy).
  const uint4* ld = src + (ty0 * kColTile + crow) * units + c0 / 8 + cu;  // the next tile's row crow
  const int64_t rows16 = 16 * units;
  const unsigned sh0 = static_cast<unsigned>(__cvta_generic_to_shared(&tile[0][crow][0]));
  auto issue = [&](int t) {
    const unsigned sh = sh0 + static_cast<unsigned>(t % kBufs) * sizeof(ColTile);
    const int left = rows_left - t * kColTile;
    const uint4* g = ld;
#pragma unroll
    for (int p = 0; p < 4; ++p, g += rows16) {
      const bool ok = col_ok && 16 * p < left;
      cp_async16_shared(sh + (16 * p * (kColTile / 8) + col_slot(16 * p, cu)) * 16, ok ? g : src, ok);
    }
    ld += 4 * rows16;
    cp_async_commit();
  };
  const int b = threadIdx.x % 4, cp = threadIdx.x / 4;
  const bool pair_ok = c0 + 2 * cp < io.cols;
  const int rows_b = static_cast<int>(io.rows - ty0 * kColTile - 16 * b);
  const int64_t out0 = (c0 + 2 * cp) * io.rows + ty0 * kColTile + 16 * b;  // chunk k of tile t: out0 + k rows + 64 t
  uint32_t declined = 0;  // bit 2t + k: chunk k of tile t, rounded by the general code after the loop
  issue(0);
#pragma unroll 1
  for (int t = 0; t < kTiles; ++t) {
    if (t >= nt) break;
    if (t + 1 < nt) {
      issue(t + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (pair_ok && t * kColTile < rows_b) declined |= round_col_pair<kClass, true, kRht>(h, io, tile[t % kBufs], b, cp, out0 + t * kColTile) << (2 * t);
  }
  general_col_chunks(s, io, sh_level, sh_code, out0, declined);
}

template <bool kCol, int kClass, bool kSR, bool kRht>
__global__ void __launch_bounds__(kHotThreads, kHotMinBlocks<kCol, kClass, kSR>) quantize_hot_kernel(const __grid_constant__ KernelSpec s, const __grid_constant__ QuantizeIO io,
                                                                   const __grid_constant__ HotParams h) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  if (threadIdx.x < 16) { sh_level[threadIdx.x] = s.grid.level[threadIdx.x]; sh_code[threadIdx.x] = s.grid.code[threadIdx.x]; }
  if constexpr (kCol && kSR) {  // each path syncs the block before any general_chunk call
    if (UFP4_HOT_COL_SR_DIRECT) hot_col_direct_sr<kClass, kRht>(s, io, h, sh_level, sh_code);
    else hot_col_tiles_sr<kClass, kRht>(s, io, h, sh_level, sh_code);
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
    const int64_t row_tiles = (io.rows + kColTile - 1) / kColTile, tiles = kSR ? kColTiles : 1, col_tiles = (io.cols + kColTile - 1) / kColTile;
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
