// Segmented quantize-dequantize: G operands stacked along dim 0 (tokens, or weight rows) of one
// row-major [rows, cols] tensor, each quantized exactly as kernels/quantize/quantize.h quantizes it alone, with
// its own stochastic-rounding seed, RHT signs and (nvfp4) tensor amax. The grouped expert GEMMs of a
// MoE layer use it: segment g holds expert g's rows, and one launch replaces G quantizer calls.
//
// Layout. Segment g occupies rows [begin_g, end_g) of the input and of the output, begin_0 = 0,
// begin_g = end_{g-1}. Its operand is rows [begin_g, begin_g + len_g) (len_g <= end_g - begin_g);
// the other rows of the segment, and rows past end_{G-1}, are layout padding: written as +0.
// The output has the input's layout [rows, cols] in both directions:
//   rowwise    : operand g is the [len_g, cols] tensor, blocks along cols. Its element (i, j) has
//                quantize.h output index i * cols + j (its SR draw) and lands at (begin_g + i, j).
//   columnwise : operand g is quantized along dim 0 (quantize.h's columnwise, output [cols, len_g]).
//                Its element (j, i), output index j * len_g + i, lands at (begin_g + i, j): the
//                token-major layout a grouped GEMM reducing over rows takes, with the segment ends as
//                offsets. Blocks and RHT segments start at begin_g, so begin_g must be a multiple of
//                max(16, block, rht), and len_g a multiple of rht (zero rows complete the last RHT
//                segment: the caller's, as in the dense WGRAD).
//   block_2d   : the 16x16 tiles of the input; begin_g must be a multiple of 16.
// Gathered input (src_rows): layout row r holds input row src_rows[r], or zeros where src_rows[r] < 0,
// so the caller need not build the padded [rows, cols] copy (the MoE WGRAD operands: each expert's
// tokens moved to whole 16-row groups). Read by the CPU oracle and the hot columnwise kernel only
// (segments_take_src); elsewhere the caller gathers first.
// Alignment and lengths live on the device, so the kernels cannot check them: callers must.
#pragma once
#include <cstdint>

#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_hot.h"

namespace ufp4 {

struct SegmentedQuantizeIO {
  const void* in = nullptr;
  DType in_dtype = DType::kF32;
  int64_t rows = 0, cols = 0;         // input and output [rows, cols], row-major, contiguous
  bool columnwise = false;
  void* dequant = nullptr;            // [rows, cols] in out_dtype
  DType out_dtype = DType::kF32;
  int64_t segments = 0;               // G
  const int32_t* ends = nullptr;      // [G] non-decreasing segment ends, the last <= rows
  const int32_t* lens = nullptr;      // [G] operand rows of each segment; null: the whole segment
  const uint64_t* seeds = nullptr;    // [G] SR key of each operand (KernelSpec::seed)
  const uint32_t* rht_signs = nullptr;  // [G * 4] RHT sign bits of each operand (KernelSpec::rht_signs); null when rht is off
  float* tensor_amax = nullptr;       // [G] each operand's tensor amax after RHT; required for nvfp4, written if given
  float* workspace = nullptr;         // block_2d: quantize_workspace_floats(s, rows, cols) floats
  const int64_t* src_rows = nullptr;  // [rows]: the input row of each layout row, -1 for zeros; null: row r
  int64_t in_rows = 0;                // rows of the input when src_rows is given
  // The pair kernel's columnwise io only: [rows], where each layout row's values are read when the
  // routed rows are themselves a gather of `in` (the MoE's dispatch, not materialised): layout row j
  // holds routed row src_rows[j], whose values are input row read_rows[j] (-1 where src_rows is -1).
  const int64_t* read_rows = nullptr;
};

// The training path's specs (kernels/quantize/quantize_hot.h), BF16 or FP32 in and BF16 out: the hot kernels take them.
constexpr int kHotMaxSegments = 1024;  // the hot kernels hold the segment ends in shared memory
inline bool segments_hot_path_applies(const KernelSpec& s, const SegmentedQuantizeIO& io) {
  return hot_spec_applies(s) && (io.in_dtype == DType::kBF16 || io.in_dtype == DType::kF32) && io.out_dtype == DType::kBF16 &&
         io.segments <= kHotMaxSegments &&
         io.cols % (io.columnwise ? 8 : 16) == 0 && aligned16(io.in) && aligned16(io.dequant);
}

// Whether the CUDA kernels read a gathered input (src_rows) themselves: the hot columnwise kernel.
inline bool segments_take_src(const KernelSpec& s, const SegmentedQuantizeIO& io) { return io.columnwise && segments_hot_path_applies(s, io); }

// Both operands of one routed activation from one read (the pair kernel,
// kernels/moe/quantize_segments_pair_cuda.cu): the rowwise operand in the input's own layout (row: segments
// row.ends, whole segments, no gather) and the columnwise operand in a padded layout gathered from the
// same input (col: col.src_rows, the MoE WGRAD layout of models/grouped_linear.h). Layout segment g
// holds rows of row segment g: layout row j is row src_rows[j] - begin_g of row operand g, and every
// row below row.ends[G - 1] appears in src_rows once; rows from row.ends[G - 1] on are written +0.
// Each output is, bit for bit, the segmented quantization of its own io with its own spec and keys.
// With col.read_rows the routed rows are a gather of the input (row i of the rowwise operand's input is
// input row read_rows[j] for the j with src_rows[j] = i): the bits of the same call on the gathered rows.
struct SegmentedPairIO {
  SegmentedQuantizeIO row, col;
};

// What the pair kernel covers: both specs on the hot arithmetic with the same grid kind and rounding,
// the columnwise operand rotated wherever the rowwise one is, BF16 in and out, 16-column rows.
inline bool segments_pair_applies(const KernelSpec& rs, const KernelSpec& cs, const SegmentedPairIO& p) {
  const SegmentedQuantizeIO &r = p.row, &c = p.col;
  return hot_spec_applies(rs) && hot_spec_applies(cs) && rs.fast.kind == cs.fast.kind && rs.rounding == cs.rounding && (cs.rht || !rs.rht) &&
         r.in_dtype == DType::kBF16 && c.in_dtype == DType::kBF16 && r.out_dtype == DType::kBF16 && c.out_dtype == DType::kBF16 &&
         r.in == c.in && !r.columnwise && c.columnwise && !r.src_rows && !r.lens && !r.read_rows && c.src_rows &&
         (c.read_rows || c.in_rows == r.rows) && c.rows >= r.rows &&
         r.cols == c.cols && r.cols % 16 == 0 && r.segments == c.segments && r.segments <= kHotMaxSegments && !r.tensor_amax &&
         !c.tensor_amax && aligned16(r.in) && aligned16(r.dequant) && aligned16(c.dequant);
}

// Throws ufp4::Error for what can be checked on the host (sizes, pointers, RHT dividing cols when rowwise).
void check_segments_shape(const KernelSpec& s, const SegmentedQuantizeIO& io);

// The oracle, by definition: reference_quantize() of each operand with its own keys, placed in the
// layout above (host memory). s.seed and s.rht_signs are ignored: io.seeds and io.rht_signs hold them.
void reference_quantize_segments(const KernelSpec& s, const SegmentedQuantizeIO& io);

}  // namespace ufp4
