// The segmented pair kernel (kernels/quantize_segments.h, SegmentedPairIO): a routed activation feeds
// FPROP or DGRAD rowwise, in its own expert-sorted layout, and WGRAD columnwise, in the padded layout
// gathered from it. Quantized one layout at a time it is read twice; here a block copies one 16-row x
// 128-column tile of the padded layout (the columnwise hot kernel's tile: layout rows read through the
// row map, zeros for padding), then each thread rounds one rowwise chunk (tile row t / 8, columns
// 16 (t % 8)..) and one columnwise chunk (column t), both with the hot arithmetic and each operand's own
// keys. A tile's 16 layout rows lie in one operand: columnwise operands start on multiples of 16.
#include "kernels/quantize_cuda.h"
#include "kernels/quantize_segments_hot.cuh"

namespace ufp4 {

namespace {

// A rowwise chunk the hot arithmetic declined, in the general arithmetic (out of line, as
// general_col_chunk). row: the chunk's 16 raw BF16 values in the tile.
template <int kClass, bool kSR>
__device__ __noinline__ void general_row_chunk(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const uint16_t* row,
                                               uint32_t signs, uint64_t seed, uint64_t sr0, uint32_t* out) {
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) x[i] = bits_f32(static_cast<uint32_t>(row[i]) << 16);
  uint32_t o[8];
  general_chunk<kClass, kSR>(s, sh_level, sh_code, x, signs, seed, sr0, 16, o);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = o[k];
}

template <int kClass, bool kSR, bool kRowRht, bool kColRht>
__global__ void __launch_bounds__(kSegColThreads) segments_pair_kernel(const __grid_constant__ KernelSpec rs, const __grid_constant__ KernelSpec cs,
                                                                      const __grid_constant__ SegmentedPairIO p,
                                                                      const __grid_constant__ HotParams rh, const __grid_constant__ HotParams ch) {
  __shared__ int32_t sh_ends[kHotMaxSegments];  // the padded layout's segment ends
  __shared__ float sh_level[2][16];
  __shared__ uint8_t sh_code[2][16];
  __shared__ uint4 tile[16][kSegColUnits];
  __shared__ uint4 out_tile[16][kSegColUnits];  // the columnwise output (the rowwise chunks still read the tile)
  const SegmentedQuantizeIO &rio = p.row, &cio = p.col;
  const int G = static_cast<int>(cio.segments), tid = threadIdx.x;
  for (int i = tid; i < G; i += kSegColThreads) sh_ends[i] = cio.ends[i];
  if (tid < 16) {
    sh_level[0][tid] = rs.grid.level[tid];
    sh_code[0][tid] = rs.grid.code[tid];
    sh_level[1][tid] = cs.grid.level[tid];
    sh_code[1][tid] = cs.grid.code[tid];
  }
  __syncthreads();
  const int64_t cols = cio.cols;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * 16, c0 = static_cast<int64_t>(blockIdx.y) * kSegColThreads;
  const int nstore = cio.rows - j0 >= 16 ? 16 : static_cast<int>(cio.rows - j0);
  const int units = cols - c0 >= kSegColThreads ? kSegColUnits : static_cast<int>(cols - c0) / 8;  // cols % 16 == 0
  const int g = segment_of(sh_ends, G, j0);
  const int64_t begin = g > 0 && g < G ? sh_ends[g - 1] : 0;
  const int64_t pos = j0 - begin;
  const int64_t len = g < G ? (cio.lens ? cio.lens[g] : sh_ends[g] - begin) : 0;
  const int nvalid = pos >= len ? 0 : (len - pos >= 16 ? 16 : static_cast<int>(len - pos));
  const char* in = static_cast<const char*>(cio.in) + c0 * 2;
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int u = tid + q * kSegColThreads, i = u / kSegColUnits, k = u % kSegColUnits;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (k < units && i < nvalid) {
      const int64_t row = cio.src_rows[j0 + i];
      if (row >= 0) v = __ldg(reinterpret_cast<const uint4*>(in + row * cols * 2) + k);
    }
    tile[i][k] = v;
  }
  __syncthreads();

  // Rowwise: tile row ri, columns c0 + 16 rc ... ; the operand row of a layout row holding an input row.
  const int ri = tid >> 3, rc = tid & 7;
  const int64_t src = ri < nvalid ? cio.src_rows[j0 + ri] : -1;
  const bool row_live = src >= 0 && 16 * rc < 8 * units;
  uint32_t row_signs = 0;
  uint64_t row_seed = 0, row_sr0 = 0;
  bool row_declined = false;
  if (row_live) {
    const int64_t row_begin = g > 0 ? rio.ends[g - 1] : 0;
    row_signs = kRowRht ? rio.rht_signs[4 * g] : 0u;
    row_seed = kSR ? rio.seeds[g] : 0;
    row_sr0 = static_cast<uint64_t>((src - row_begin) * cols + c0 + 16 * rc);  // element (row, column) of the [len, cols] operand
    // Units 2 rc and 2 rc + 1, the upper half of the quarter warp taking them in the other order: no bank conflicts.
    const int first = 2 * rc + (rc >> 2), second = 4 * rc + 1 - first;
    const uint4 a = tile[ri][first], b = tile[ri][second];
    const uint4 lo = (rc >> 2) ? b : a, hi = (rc >> 2) ? a : b;
    const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    float x[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t flip = kRowRht && ((row_signs >> i) & 1u) ? 0x80000000u : 0u;
      x[i] = bits_f32(((i & 1) ? (w[i / 2] & 0xffff0000u) : (w[i / 2] << 16)) ^ flip);
    }
    uint32_t out[8];
    if (hot_chunk_values<kClass, kSR, kRowRht>(rh, x, kSR ? sr_bytes16(row_seed, sr_offset(rs), row_sr0 >> 4) : U32x4{}, out)) {
      uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + src * cols + c0 + 16 * rc);
      dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
      dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
    } else {
      row_declined = true;
    }
  }

  // Columnwise: column c0 + tid, as the columnwise hot kernel rounds it.
  const uint16_t* col = reinterpret_cast<const uint16_t*>(&tile[0][0]) + tid;
  uint16_t* ocol = reinterpret_cast<uint16_t*>(&out_tile[0][0]) + tid;
  if (nvalid > 0 && tid < 8 * units) {
    uint32_t out[8];
    round_col_chunk<kClass, kSR, kColRht, false>(cs, ch, cio, sh_level[1], sh_code[1], col, g, c0 + tid, len, pos, nvalid, out);
#pragma unroll
    for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = i < nvalid ? static_cast<uint16_t>(out[i / 2] >> (16 * (i & 1))) : 0;
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) ocol[i * kSegColThreads] = 0;  // layout padding, or columns past the tensor (not stored)
  }

  // After both chunks, so that nothing of them is live across the out-of-line call.
  if (row_declined) {
    uint32_t out[8];
    general_row_chunk<kClass, kSR>(rs, sh_level[0], sh_code[0], reinterpret_cast<const uint16_t*>(&tile[ri][2 * rc]), row_signs, row_seed, row_sr0,
                                   out);
    uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + src * cols + c0 + 16 * rc);
    dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
    dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
  // Rowwise rows no layout row holds (past the last segment end: dropped assignments) are +0; the
  // padded layout has at least as many rows as the input, so the tiles' rows cover them.
  const int64_t row_end = rio.ends[G - 1];
  __syncthreads();
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int u = tid + q * kSegColThreads, i = u / kSegColUnits, k = u % kSegColUnits;
    if (k >= units) continue;
    if (i < nstore) reinterpret_cast<uint4*>(static_cast<uint16_t*>(cio.dequant) + (j0 + i) * cols + c0)[k] = out_tile[i][k];
    if (j0 + i >= row_end && j0 + i < rio.rows) reinterpret_cast<uint4*>(static_cast<uint16_t*>(rio.dequant) + (j0 + i) * cols + c0)[k] = make_uint4(0, 0, 0, 0);
  }
}

template <int kClass, bool kSR, bool kRowRht, bool kColRht>
void launch_segments_pair(const KernelSpec& rs, const KernelSpec& cs, const SegmentedPairIO& p, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((p.col.rows + 15) / 16), static_cast<unsigned>((p.col.cols + kSegColThreads - 1) / kSegColThreads));
  if ((p.col.rows + 15) / 16 > 0x7fffffff || grid.y > 65535u) throw Error("quantize segments pair: tensor too large for one launch");
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
