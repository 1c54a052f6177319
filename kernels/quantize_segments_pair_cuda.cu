// The segmented pair kernel (kernels/quantize_segments.h, SegmentedPairIO): a routed activation feeds
// FPROP or DGRAD rowwise, in its own expert-sorted layout, and WGRAD columnwise, in the padded layout
// gathered from it. Quantized one layout at a time it is read twice; here a block copies 16-row x
// 128-column tiles of the padded layout (layout rows read through the row map, zeros for padding) into
// shared memory, two tiles at a time, and the two warps of each tile round its 8 x 16 rowwise chunks
// and 128 columnwise chunks, four chunks a thread, with the hot arithmetic and each operand's own keys.
// A tile's 16 layout rows lie in one operand: columnwise operands start on multiples of 16.
#include "kernels/quantize_cuda.h"
#include "kernels/quantize_segments_hot.cuh"

namespace ufp4 {

namespace {

// A block takes kPairTiles consecutive tiles of one 128-column stripe, two at a time (threads 64 h ..
// 64 h + 63 take tile h of the two), and copies the next two and the row map of the two after them
// into shared memory (cp.async: no registers held) while it rounds these. With one tile a block, the
// block's setup came once a tile and the copies waited for the rounding: waiting on loads was the
// largest stall (Nsight Compute), 41% of the DRAM bandwidth used. With one tile for all 128 threads
// (one rowwise and one columnwise chunk a thread), each tile's addressing and control came once for
// 32 elements a thread, and a column was read and written 16 bits at a time: 1240 instructions a
// thread a tile, of which the chunks' arithmetic is about 700 (Nsight Compute's per-instruction
// counts); four chunks a thread, two columns a 32-bit word, halve both.
constexpr int kPairTiles = 8;
constexpr int kTileThreads = kSegColThreads / 2;  // threads a tile: two warps

// Where tile row j0 lies in the padded layout: segment g (G past the last end), the tile's position
// pos in its operand of len rows, nvalid of its 16 rows inside the operand (none past the block's
// rows [., last)). g0: a segment at or before j0's (a block's tiles are consecutive: the next
// tile's segment is found by stepping, not searching).
struct PairTileSpan {
  int g, nvalid;
  int pos, len;  // layout rows fit in 31 bits (launch_segments_pair checks)
};

__device__ __forceinline__ PairTileSpan pair_tile_span(const int32_t* sh_ends, const SegmentedQuantizeIO& cio, int j0, int last, int g0) {
  const int G = static_cast<int>(cio.segments);
  PairTileSpan t;
  t.g = g0;
  while (t.g < G && sh_ends[t.g] <= j0) ++t.g;
  const int begin = t.g > 0 && t.g < G ? sh_ends[t.g - 1] : 0;
  t.pos = j0 - begin;
  t.len = t.g < G ? (cio.lens ? cio.lens[t.g] : sh_ends[t.g] - begin) : 0;
  t.nvalid = j0 >= last || t.pos >= t.len ? 0 : min(t.len - t.pos, 16);
  return t;
}

// Starts the copy of the row map of layout rows j0 .. j0 + 31 into map (threads 0..31, one entry each).
// Rows past the layout read 0: they lie past every operand (pair_tile_span's nvalid excludes them).
__device__ __forceinline__ void pair_map_load(const SegmentedQuantizeIO& cio, int j0, int tid, int64_t* map) {
  if (tid < 32) {
    const int j = j0 + tid;
    const bool inside = j < cio.rows;
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(map + tid));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(to), "l"(cio.src_rows + (inside ? j : 0)), "r"(inside ? 8 : 0) : "memory");
  }
}

// Starts the copy of one tile (span t, row map map, thread lt of its 64) into buf: zeros for padding
// and columns past the tensor.
__device__ __forceinline__ void pair_tile_load(const SegmentedQuantizeIO& cio, const PairTileSpan& t, const int64_t* map, int c0, int units,
                                               int lt, uint4 (*buf)[kSegColUnits]) {
  const char* in = static_cast<const char*>(cio.in) + c0 * 2;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int i = lt / kSegColUnits + 4 * q, k = lt % kSegColUnits;
    const int64_t row = i < t.nvalid ? map[i] : -1;
    const bool live = k < units && row >= 0;
    const void* from = live ? static_cast<const void*>(reinterpret_cast<const uint4*>(in + row * cio.cols * 2) + k) : cio.in;
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(&buf[i][k]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(live ? 16 : 0) : "memory");
  }
}

// One rowwise chunk: tile row ri, columns 16 rc .. 16 rc + 15 of the tile; false when the hot
// arithmetic declines it. Units 2 rc and 2 rc + 1, odd rows taking them in the other order: the eight
// lanes of a 16-byte load phase (two rows, four chunks) hit eight distinct bank groups.
template <int kClass, bool kSR, bool kRht>
__device__ __forceinline__ bool pair_row_chunk(const KernelSpec& rs, const HotParams& rh, const SegmentedQuantizeIO& rio, const uint4 (*tile)[kSegColUnits],
                                               int ri, int rc, int64_t row_src, int64_t row_begin, uint32_t row_signs, uint64_t row_seed,
                                               uint64_t offset, int c0) {
  const int par = ri & 1, ua = 2 * rc + par, ub = 2 * rc + 1 - par;
  const uint4 a = tile[ri][ua], bb = tile[ri][ub];
  const uint4 lo = par ? bb : a, hi = par ? a : bb;
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  float x[16];
  if (kRht && row_signs == rs.rht_signs[0]) {  // the spec's own signs: the flips from the parameters
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = hot_widen<kRht>(rh, w[i / 2], (i & 1) != 0, i);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t flip = kRht && ((row_signs >> i) & 1u) ? 0x80000000u : 0u;
      x[i] = bits_f32(((i & 1) ? (w[i / 2] & 0xffff0000u) : (w[i / 2] << 16)) ^ flip);
    }
  }
  const int64_t cols = rio.cols;
  const uint64_t sr0 = static_cast<uint64_t>((row_src - row_begin) * cols + c0 + 16 * rc);  // element (row, column) of the [len, cols] operand
  uint32_t out[8];
  if (!hot_chunk_values<kClass, kSR, kRht>(rh, x, kSR ? sr_bytes16(row_seed, offset, sr0 >> 4) : U32x4{}, out)) return false;
  uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + row_src * cols + c0 + 16 * rc);
  dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
  dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
  return true;
}

// Blocks an SM holds: 6 with SR's draws (80 registers), 8 without (64); ptxas spills 56 to 120 bytes
// a thread at either (the two chunks' loop state).
template <int kClass, bool kSR, bool kRowRht, bool kColRht>
__global__ void __launch_bounds__(kSegColThreads, kSR ? 6 : 8) segments_pair_kernel(const __grid_constant__ KernelSpec rs, const __grid_constant__ KernelSpec cs,
                                                                      const __grid_constant__ SegmentedPairIO p,
                                                                      const __grid_constant__ HotParams rh, const __grid_constant__ HotParams ch) {
  __shared__ int32_t sh_ends[kHotMaxSegments];  // the padded layout's segment ends
  __shared__ float sh_level[2][16];
  __shared__ uint8_t sh_code[2][16];
  __shared__ uint4 tile[2][32][kSegColUnits];     // tiles n and n + 1 (rows 16 h ..) in buffer (n / 2) % 2, the next two arriving in the other
  __shared__ uint4 out_tile[32][kSegColUnits];    // the columnwise output (the declined columnwise chunks still read the tile)
  __shared__ int64_t sh_map[3][32];              // the row maps of the two tiles now, next and after (buffer: pair index % 3)
  const SegmentedQuantizeIO &rio = p.row, &cio = p.col;
  const int G = static_cast<int>(cio.segments), tid = threadIdx.x;
  const int h = tid / kTileThreads, lt = tid % kTileThreads;  // the thread's tile of the two, its lane there
  for (int i = tid; i < G; i += kSegColThreads) sh_ends[i] = cio.ends[i];
  if (tid < 16) {
    sh_level[0][tid] = rs.grid.level[tid];
    sh_code[0][tid] = rs.grid.code[tid];
    sh_level[1][tid] = cs.grid.level[tid];
    sh_code[1][tid] = cs.grid.code[tid];
  }
  const int64_t cols = cio.cols;
  const int c0 = blockIdx.y * kSegColThreads;
  const int units = cols - c0 >= kSegColThreads ? kSegColUnits : static_cast<int>(cols - c0) / 8;  // cols % 16 == 0
  const int rows = static_cast<int>(cio.rows), first = blockIdx.x * kPairTiles * 16;
  const int last = min(rows, first + kPairTiles * 16);  // the block's layout rows [first, last)
  pair_map_load(cio, first, tid, sh_map[0]);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  PairTileSpan cur = pair_tile_span(sh_ends, cio, first + 16 * h, last, segment_of(sh_ends, G, first + 16 * h));
  pair_tile_load(cio, cur, sh_map[0] + 16 * h, c0, units, lt, tile[0] + 16 * h);
  if (first + 32 < last) pair_map_load(cio, first + 32, tid, sh_map[1]);
  asm volatile("cp.async.commit_group;\n" ::: "memory");

  uint32_t declined = 0;  // bit 2 n + k: this thread's rowwise chunk k of tile pair n, for the general arithmetic
  for (int n = 0; first + 32 * n < last; ++n) {
    const int j0 = first + 32 * n, jt = j0 + 16 * h;  // the pair's first layout row, the thread's tile's
    const int b = n & 1, m = n % 3;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();  // tiles in tile[b], the next row map in sh_map; every thread done with the last pair and out_tile
    PairTileSpan next{};
    if (j0 + 32 < last) {
      next = pair_tile_span(sh_ends, cio, jt + 32, last, cur.g);
      pair_tile_load(cio, next, sh_map[(n + 1) % 3] + 16 * h, c0, units, lt, tile[b ^ 1] + 16 * h);
      if (j0 + 64 < last) pair_map_load(cio, j0 + 64, tid, sh_map[(n + 2) % 3]);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    const int g = cur.g, nvalid = cur.nvalid;
    const uint4(*tl)[kSegColUnits] = tile[b] + 16 * h;

    // Rowwise: tile row ri, chunks rc and rc + 4; the operand row of a layout row holding an input row.
    {
      const int ri = lt >> 2, rc = lt & 3;
      const int64_t row_src = ri < nvalid ? sh_map[m][16 * h + ri] : -1;
      if (row_src >= 0) {
        const int64_t row_begin = g > 0 ? rio.ends[g - 1] : 0;
        const uint32_t row_signs = kRowRht ? rio.rht_signs[4 * g] : 0u;
        const uint64_t row_seed = kSR ? rio.seeds[g] : 0;
#pragma unroll 1
        for (int k = 0; k < 2; ++k) {
          // The seed made opaque each pass: hoisted out of the loop, its ten round keys stayed live
          // across it (spilled at this kernel's register budget).
          uint64_t seed = row_seed;
          asm volatile("" : "+l"(seed));
          if (16 * (rc + 4 * k) < 8 * units &&
              !pair_row_chunk<kClass, kSR, kRowRht>(rs, rh, rio, tl, ri, rc + 4 * k, row_src, row_begin, row_signs, seed, sr_offset(rs), c0))
            declined |= 1u << (2 * n + k);
        }
      }
    }

    // Columnwise: columns c0 + 2 lt + k, as the columnwise hot kernel rounds them, one at a time (two
    // at once, interleaved by the compiler, needed 125 registers); the results leave through out_tile.
    uint16_t* ocol = reinterpret_cast<uint16_t*>(&out_tile[16 * h][0]) + 2 * lt;
    if (nvalid > 0 && 2 * lt < 8 * units) {  // cols % 16 == 0: both columns are in
#pragma unroll 1
      for (int k = 0; k < 2; ++k) {
        int gk = g;  // opaque each pass, as the rowwise seed above
        asm volatile("" : "+r"(gk));
        uint32_t out[8];
        round_col_chunk<kClass, kSR, kColRht, false>(cs, ch, cio, sh_level[1], sh_code[1], reinterpret_cast<const uint16_t*>(&tl[0][0]) + 2 * lt + k, gk,
                                                     c0 + 2 * lt + k, cur.len, cur.pos, nvalid, out);
#pragma unroll
        for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads + k] = i < nvalid ? static_cast<uint16_t>(out[i / 2] >> (16 * (i & 1))) : 0;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) reinterpret_cast<uint32_t*>(ocol)[i * kSegColThreads / 2] = 0;  // layout padding, or columns past the tensor (not stored)
    }

    // Rowwise rows no layout row holds (past the last segment end: dropped assignments) are +0; the
    // padded layout has at least as many rows as the input, so the tiles' rows cover them.
    __syncthreads();
    const int nstore = min(last - jt, 16), row_end = rio.ends[G - 1];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int u = lt + q * kTileThreads, i = u / kSegColUnits, k = u % kSegColUnits;
      if (k >= units) continue;
      if (i < nstore) reinterpret_cast<uint4*>(static_cast<uint16_t*>(cio.dequant) + (jt + i) * cols + c0)[k] = out_tile[16 * h + i][k];
      if (jt + i >= row_end && jt + i < rio.rows) reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + (jt + i) * cols + c0)[k] = make_uint4(0, 0, 0, 0);
    }
    cur = next;
  }

  // The rowwise chunks the hot arithmetic declined, after the loop: an out-of-line call inside it made
  // every tile's state live across the call (40 more registers). Their input is read again from memory.
  while (declined) {
    const int bit = __ffs(declined) - 1;
    declined &= declined - 1;
    const int k = bit % 2;
    const int jt = first + 32 * (bit / 2) + 16 * h;
    const int ri = lt >> 2, rc = (lt & 3) + 4 * k;
    const int g = segment_of(sh_ends, G, jt);
    const int64_t row_src = cio.src_rows[jt + ri], row_begin = g > 0 ? rio.ends[g - 1] : 0;
    const uint64_t row_sr0 = static_cast<uint64_t>((row_src - row_begin) * cols + c0 + 16 * rc);
    uint32_t out[8];
    general_strided_chunk<kClass, kSR, false>(rs, sh_level[0], sh_code[0], static_cast<const uint16_t*>(cio.in) + row_src * cols + c0 + 16 * rc, 1,
                                              kRowRht ? rio.rht_signs[4 * g] : 0u, kSR ? rio.seeds[g] : 0, row_sr0, 16, out);
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + row_src * cols + c0 + 16 * rc);
    dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
    dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
}

template <int kClass, bool kSR, bool kRowRht, bool kColRht>
void launch_segments_pair(const KernelSpec& rs, const KernelSpec& cs, const SegmentedPairIO& p, cudaStream_t stream) {
  const int64_t blocks = (p.col.rows + 16 * kPairTiles - 1) / (16 * kPairTiles);
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((p.col.cols + kSegColThreads - 1) / kSegColThreads));
  if (p.col.rows > 0x7fffff00 || grid.y > 65535u) throw Error("quantize segments pair: tensor too large for one launch");
  if (grid.x == 0 || grid.y == 0) return;
  segments_pair_kernel<kClass, kSR, kRowRht, kColRht><<<grid, kSegColThreads, 0, stream>>>(rs, cs, p, make_hot_params(rs), make_hot_params(cs));
  check_cuda(cudaGetLastError(), "quantize segments pair kernel launch");
}

// RHT on both operands, on the columnwise one only (the E2M1 reference recipe's), or on neither.
template <int kClass, bool kSR>
void launch_segments_pair_rht(const KernelSpec& rs, const KernelSpec& cs, const SegmentedPairIO& p, cudaStream_t stream) {
  if (rs.rht) launch_segments_pair<kClass, kSR, true, true>(rs, cs, p, stream);
  else if (cs.rht) launch_segments_pair<kClass, kSR, false, true>(rs, cs, p, stream);
  else launch_segments_pair<kClass, kSR, false, false>(rs, cs, p, stream);
}

template <int kClass>
void launch_segments_pair_rounding(const KernelSpec& rs, const KernelSpec& cs, const SegmentedPairIO& p, cudaStream_t stream) {
  if (rs.rounding == 1) launch_segments_pair_rht<kClass, true>(rs, cs, p, stream);
  else launch_segments_pair_rht<kClass, false>(rs, cs, p, stream);
}

}  // namespace

void cuda_quantize_segments_pair(const KernelSpec& rs, const KernelSpec& cs, const SegmentedPairIO& p, cudaStream_t stream) {
  check_segments_shape(rs, p.row);
  check_segments_shape(cs, p.col);
  if (!segments_pair_applies(rs, cs, p)) throw Error("quantize segments pair: the pair kernel does not cover this call");
  if (rs.fast.kind == kGridE2M1) launch_segments_pair_rounding<kGridE2M1>(rs, cs, p, stream);
  else launch_segments_pair_rounding<kGridUniform>(rs, cs, p, stream);
}

}  // namespace ufp4
