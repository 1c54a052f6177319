// The segmented pair kernel (kernels/moe/quantize_segments.h, SegmentedPairIO): a routed activation feeds
// FPROP or DGRAD rowwise, in its own expert-sorted layout, and WGRAD columnwise, in the padded layout
// gathered from it. Quantized one layout at a time it is read twice; here a block copies 16-row x
// 128-column tiles of the padded layout (the columnwise hot kernel's tile: layout rows read through the
// row map, zeros for padding), and for each tile each thread rounds one rowwise chunk (tile row t / 8,
// columns 16 (t % 8)..) and one columnwise chunk (column t), both with the hot arithmetic and each
// operand's own keys. A tile's 16 layout rows lie in one operand: columnwise operands start on
// multiples of 16.
#include "kernels/quantize/quantize_cuda.h"
#include "kernels/moe/quantize_segments_hot.cuh"

namespace ufp4 {

namespace {

// A block takes kPairTiles consecutive tiles of one 128-column stripe and copies tile t + 1 and the row
// map of tile t + 2 into shared memory (cp.async: no registers held) while it rounds tile t. With one
// tile a block, the block's setup came once a tile and the copies waited for the rounding: waiting on
// loads was the largest stall (Nsight Compute), 41% of the DRAM bandwidth used.
constexpr int kPairTiles = 8;

// Where tile row j0 lies in the padded layout: segment g (G past the last end), the tile's position
// pos in its operand of len rows, nvalid of its 16 rows inside the operand. g0: a segment at or before
// j0's (a block's tiles are consecutive: the next tile's segment is found by stepping, not searching).
struct PairTileSpan {
  int g, nvalid;
  int64_t pos, len;
};

__device__ __forceinline__ PairTileSpan pair_tile_span(const int32_t* sh_ends, const SegmentedQuantizeIO& cio, int64_t j0, int g0) {
  const int G = static_cast<int>(cio.segments);
  PairTileSpan t;
  t.g = g0;
  while (t.g < G && sh_ends[t.g] <= j0) ++t.g;
  const int64_t begin = t.g > 0 && t.g < G ? sh_ends[t.g - 1] : 0;
  t.pos = j0 - begin;
  t.len = t.g < G ? (cio.lens ? cio.lens[t.g] : sh_ends[t.g] - begin) : 0;
  t.nvalid = t.pos >= t.len ? 0 : (t.len - t.pos >= 16 ? 16 : static_cast<int>(t.len - t.pos));
  return t;
}

// Starts the copy of the row map of layout rows j0 .. j0 + 15 into map (threads 0..15, one entry each)
// and, for a gathered input, of their read rows into read (threads 16..31). Rows past the layout read 0:
// they lie past every operand (pair_tile_span's nvalid excludes them).
__device__ __forceinline__ void pair_map_load(const SegmentedQuantizeIO& cio, int64_t j0, int tid, int64_t* map, int64_t* read) {
  if (tid < 16 || (tid < 32 && cio.read_rows)) {
    const int64_t j = j0 + (tid & 15);
    const bool inside = j < cio.rows;
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared((tid < 16 ? map : read) + (tid & 15)));
    const int64_t* from = (tid < 16 ? cio.src_rows : cio.read_rows) + (inside ? j : 0);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(to), "l"(from), "r"(inside ? 8 : 0) : "memory");
  }
}

// Starts the copy of tile j0 (span t, row map map) into buf: zeros for padding and columns past the tensor.
__device__ __forceinline__ void pair_tile_load(const SegmentedQuantizeIO& cio, const PairTileSpan& t, const int64_t* map, int64_t c0, int units,
                                               int tid, uint4 (*buf)[kSegColUnits]) {
  const char* in = static_cast<const char*>(cio.in) + c0 * 2;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int i = tid / kSegColUnits + 8 * q, k = tid % kSegColUnits;
    const int64_t row = i < t.nvalid ? map[i] : -1;
    const bool live = k < units && row >= 0;
    const void* from = live ? static_cast<const void*>(reinterpret_cast<const uint4*>(in + row * cio.cols * 2) + k) : cio.in;
    const unsigned to = static_cast<unsigned>(__cvta_generic_to_shared(&buf[i][k]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(to), "l"(from), "r"(live ? 16 : 0) : "memory");
  }
}

// Blocks an SM holds: 7 (72 registers) with SR's draws, 8 (64) without; no spills at either.
template <int kClass, bool kSR, bool kRowRht, bool kColRht>
__global__ void __launch_bounds__(kSegColThreads, kSR ? 7 : 8) segments_pair_kernel(const __grid_constant__ KernelSpec rs, const __grid_constant__ KernelSpec cs,
                                                                      const __grid_constant__ SegmentedPairIO p,
                                                                      const __grid_constant__ HotParams rh, const __grid_constant__ HotParams ch) {
  __shared__ int32_t sh_ends[kHotMaxSegments];  // the padded layout's segment ends
  __shared__ float sh_level[2][16];
  __shared__ uint8_t sh_code[2][16];
  __shared__ uint4 tile[2][16][kSegColUnits];   // tile t in buffer t % 2, the next one arriving in the other
  __shared__ uint4 out_tile[16][kSegColUnits];  // the columnwise output (the rowwise chunks still read the tile)
  __shared__ int64_t sh_map[3][16];            // the row maps of tiles t, t + 1, t + 2 (buffer: tile index % 3)
  __shared__ int64_t sh_read[3][16];           // their read rows, for a gathered input (cio.read_rows)
  __shared__ uint64_t sh_offset[2];            // the rowwise and columnwise SR offsets (one read of a device offset a block)
  const SegmentedQuantizeIO &rio = p.row, &cio = p.col;
  const int G = static_cast<int>(cio.segments), tid = threadIdx.x;
  for (int i = tid; i < G; i += kSegColThreads) sh_ends[i] = cio.ends[i];
  if (kSR && tid < 2) sh_offset[tid] = sr_offset(tid ? cs : rs);
  if (tid < 16) {
    sh_level[0][tid] = rs.grid.level[tid];
    sh_code[0][tid] = rs.grid.code[tid];
    sh_level[1][tid] = cs.grid.level[tid];
    sh_code[1][tid] = cs.grid.code[tid];
  }
  const int64_t cols = cio.cols, c0 = static_cast<int64_t>(blockIdx.y) * kSegColThreads;
  const int units = cols - c0 >= kSegColThreads ? kSegColUnits : static_cast<int>(cols - c0) / 8;  // cols % 16 == 0
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kPairTiles * 16;
  const int64_t last = cio.rows - first > kPairTiles * 16 ? first + kPairTiles * 16 : cio.rows;  // the block's layout rows [first, last)
  const int64_t row_end = rio.ends[G - 1];
  // The rows a tile's values come from: the layout's row map, or the gathered input's read rows.
  int64_t(*const in_map)[16] = cio.read_rows ? sh_read : sh_map;
  pair_map_load(cio, first, tid, sh_map[0], sh_read[0]);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
  PairTileSpan cur = pair_tile_span(sh_ends, cio, first, segment_of(sh_ends, G, first));
  pair_tile_load(cio, cur, in_map[0], c0, units, tid, tile[0]);
  if (first + 16 < last) pair_map_load(cio, first + 16, tid, sh_map[1], sh_read[1]);
  asm volatile("cp.async.commit_group;\n" ::: "memory");

  uint32_t declined = 0;  // bit n: this thread's rowwise chunk of tile n, for the general arithmetic
  for (int n = 0; first + 16 * n < last; ++n) {
    const int64_t j0 = first + 16 * n;
    const int b = n & 1, m = n % 3;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    __syncthreads();  // tile n in tile[b], the row map of tile n + 1 in sh_map; every thread done with tile n - 1 and out_tile
    PairTileSpan next{};
    if (j0 + 16 < last) {
      next = pair_tile_span(sh_ends, cio, j0 + 16, cur.g);
      pair_tile_load(cio, next, in_map[(n + 1) % 3], c0, units, tid, tile[b ^ 1]);
      if (j0 + 32 < last) pair_map_load(cio, j0 + 32, tid, sh_map[(n + 2) % 3], sh_read[(n + 2) % 3]);
      asm volatile("cp.async.commit_group;\n" ::: "memory");
    }
    const int g = cur.g, nvalid = cur.nvalid;
    const int nstore = last - j0 >= 16 ? 16 : static_cast<int>(last - j0);

    // Rowwise: tile row ri, columns c0 + 16 rc ... ; the operand row of a layout row holding an input row.
    const int ri = tid >> 3, rc = tid & 7;
    const int64_t row_src = ri < nvalid ? sh_map[m][ri] : -1;
    const bool row_live = row_src >= 0 && 16 * rc < 8 * units;
    if (row_live) {
      const int64_t row_begin = g > 0 ? rio.ends[g - 1] : 0;
      const uint32_t row_signs = kRowRht ? rio.rht_signs[4 * g] : 0u;
      const uint64_t row_seed = kSR ? rio.seeds[g] : 0;
      const uint64_t row_sr0 = static_cast<uint64_t>((row_src - row_begin) * cols + c0 + 16 * rc);  // element (row, column) of the [len, cols] operand
      // Units 2 rc and 2 rc + 1, the upper half of the quarter warp taking them in the other order: no bank conflicts.
      const int ua = 2 * rc + (rc >> 2), ub = 4 * rc + 1 - ua;
      const uint4 a = tile[b][ri][ua], bb = tile[b][ri][ub];
      const uint4 lo = (rc >> 2) ? bb : a, hi = (rc >> 2) ? a : bb;
      const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
      float x[16];
      if (kRowRht && row_signs == rs.rht_signs[0]) {  // the spec's own signs: the flips from the parameters
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = hot_widen<kRowRht>(rh, w[i / 2], (i & 1) != 0, i);
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) {
          const uint32_t flip = kRowRht && ((row_signs >> i) & 1u) ? 0x80000000u : 0u;
          x[i] = bits_f32(((i & 1) ? (w[i / 2] & 0xffff0000u) : (w[i / 2] << 16)) ^ flip);
        }
      }
      uint32_t out[8];
      if (hot_chunk_values<kClass, kSR, kRowRht>(rh, x, kSR ? sr_bytes16(row_seed, sh_offset[0], row_sr0 >> 4) : U32x4{}, out)) {
        uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + row_src * cols + c0 + 16 * rc);
        dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
        dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
      } else {
        declined |= 1u << n;
      }
    }

    // Columnwise: column c0 + tid, as the columnwise hot kernel rounds it.
    const uint16_t* col = reinterpret_cast<const uint16_t*>(&tile[b][0][0]) + tid;
    uint16_t* ocol = reinterpret_cast<uint16_t*>(&out_tile[0][0]) + tid;
    if (nvalid > 0 && tid < 8 * units) {
      uint32_t out[8];
      round_col_chunk<kClass, kSR, kColRht, false>(cs, ch, cio, sh_level[1], sh_code[1], col, g, c0 + tid, cur.len, cur.pos, nvalid,
                                                   kSR ? sh_offset[1] : 0, out);
      if (nvalid == 16) {  // the tile's rows all inside the operand (nearly every tile): no selects
#pragma unroll
        for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = static_cast<uint16_t>(out[i / 2] >> (16 * (i & 1)));
      } else {
#pragma unroll
        for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = i < nvalid ? static_cast<uint16_t>(out[i / 2] >> (16 * (i & 1))) : 0;
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = 0;  // layout padding, or columns past the tensor (not stored)
    }

    // Rowwise rows no layout row holds (past the last segment end: dropped assignments) are +0; the
    // padded layout has at least as many rows as the input, so the tiles' rows cover them.
    __syncthreads();
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      const int u = tid + q * kSegColThreads, i = u / kSegColUnits, k = u % kSegColUnits;
      if (k >= units) continue;
      if (i < nstore) reinterpret_cast<uint4*>(static_cast<uint16_t*>(cio.dequant) + (j0 + i) * cols + c0)[k] = out_tile[i][k];
      if (j0 + i >= row_end && j0 + i < rio.rows) reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + (j0 + i) * cols + c0)[k] = make_uint4(0, 0, 0, 0);
    }
    cur = next;
  }

  // The rowwise chunks the hot arithmetic declined, after the loop: an out-of-line call inside it made
  // every tile's state live across the call (40 more registers). Their input is read again from memory.
  while (declined) {
    const int n = __ffs(declined) - 1;
    declined &= declined - 1;
    const int64_t j0 = first + 16 * n;
    const int ri = tid >> 3, rc = tid & 7;
    const int g = segment_of(sh_ends, G, j0);
    const int64_t row_src = cio.src_rows[j0 + ri], row_begin = g > 0 ? rio.ends[g - 1] : 0;
    const uint64_t row_sr0 = static_cast<uint64_t>((row_src - row_begin) * cols + c0 + 16 * rc);
    uint32_t out[8];
    const int64_t in_row = cio.read_rows ? cio.read_rows[j0 + ri] : row_src;
    general_strided_chunk<kClass, kSR, false>(rs, sh_level[0], sh_code[0], static_cast<const uint16_t*>(cio.in) + in_row * cols + c0 + 16 * rc, 1,
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
  if (blocks > 0x7fffffff || grid.y > 65535u) throw Error("quantize segments pair: tensor too large for one launch");
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
