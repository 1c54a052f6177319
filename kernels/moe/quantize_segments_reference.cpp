// The segmented quantizer's oracle: one reference_quantize() per operand, placed in the segmented layout.
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/numerics/float_bits.h"
#include "kernels/moe/quantize_segments.h"

namespace ufp4 {

void check_segments_shape(const KernelSpec& s, const SegmentedQuantizeIO& io) {
  if (io.rows <= 0 || io.cols <= 0)
    throw Error("quantize segments: empty tensor (" + std::to_string(io.rows) + "x" + std::to_string(io.cols) + ")");
  if (io.segments <= 0 || !io.ends || !io.seeds) throw Error("quantize segments: segment ends and seeds are required");
  if (s.rht && !io.rht_signs) throw Error("quantize segments: rht needs each operand's sign bits");
  if (!io.columnwise && s.rht && io.cols % s.rht != 0)
    throw Error("rht: size " + std::to_string(s.rht) + " must divide the quantized dimension (" + std::to_string(io.cols) + ")");
  if (s.scale_kind == 1 && !io.tensor_amax) throw Error("quantize segments: nvfp4 scales need a tensor_amax buffer per segment");
  if (s.block_2d && !io.workspace) throw Error("quantize segments: block_2d needs a workspace");
  if (io.src_rows && io.in_rows <= 0) throw Error("quantize segments: a gathered input needs its row count");
}

void reference_quantize_segments(const KernelSpec& s, const SegmentedQuantizeIO& io) {
  check_segments_shape(s, io);
  const size_t in_size = io.in_dtype == DType::kF32 ? 4 : 2, out_size = io.out_dtype == DType::kF32 ? 4 : 2;
  if (io.src_rows) {  // the gathered input, then the layout as given
    const size_t row_bytes = static_cast<size_t>(io.cols) * in_size;
    std::vector<char> gathered(static_cast<size_t>(io.rows) * row_bytes, 0);
    for (int64_t r = 0; r < io.rows; ++r) {
      const int64_t from = io.src_rows[r];
      if (from >= io.in_rows) throw Error("quantize segments: row " + std::to_string(r) + " gathers input row " + std::to_string(from) +
                                          " of " + std::to_string(io.in_rows));
      if (from >= 0) std::memcpy(gathered.data() + r * row_bytes, static_cast<const char*>(io.in) + from * row_bytes, row_bytes);
    }
    SegmentedQuantizeIO laid = io;
    laid.in = gathered.data();
    laid.src_rows = nullptr;
    reference_quantize_segments(s, laid);
    return;
  }
  std::memset(io.dequant, 0, static_cast<size_t>(io.rows * io.cols) * out_size);  // padding: +0
  const int64_t C = io.cols;
  int64_t begin = 0;
  for (int64_t g = 0; g < io.segments; begin = io.ends[g++]) {
    const int64_t end = io.ends[g], len = io.lens ? io.lens[g] : end - begin;
    if (begin < 0 || end < begin || end > io.rows || len < 0 || len > end - begin)
      throw Error("quantize segments: segment " + std::to_string(g) + " [" + std::to_string(begin) + ", " + std::to_string(end) +
                  ") with " + std::to_string(len) + " operand rows does not fit " + std::to_string(io.rows) + " rows");
    if (len == 0) continue;
    KernelSpec k = s;
    k.seed = io.seeds[g];
    if (s.rht) std::memcpy(k.rht_signs, io.rht_signs + 4 * g, sizeof(k.rht_signs));
    std::vector<float> out(static_cast<size_t>(len * C));
    QuantizeIO one;
    one.in = static_cast<const char*>(io.in) + static_cast<size_t>(begin * C) * in_size;
    one.in_dtype = io.in_dtype;
    one.rows = len;
    one.cols = C;
    one.columnwise = io.columnwise;
    one.dequant = out.data();
    one.out_dtype = DType::kF32;
    float tensor_amax = 0.0f;
    if (s.scale_kind == 1 || io.tensor_amax) one.tensor_amax = &tensor_amax;
    std::vector<float> ws(static_cast<size_t>(quantize_workspace_floats(k, len, C)));
    one.workspace = ws.data();
    reference_quantize(k, one);
    if (io.tensor_amax) io.tensor_amax[g] = tensor_amax;
    // Operand element (i, j) of the rowwise output, or (j, i) of the transposed columnwise output.
    for (int64_t i = 0; i < len; ++i)
      for (int64_t j = 0; j < C; ++j) {
        const float v = io.columnwise ? out[j * len + i] : out[i * C + j];
        const int64_t at = (begin + i) * C + j;
        if (io.out_dtype == DType::kF32) static_cast<float*>(io.dequant)[at] = v;
        else static_cast<uint16_t*>(io.dequant)[at] = f32_to_bf16_bits(v);
      }
  }
}

}  // namespace ufp4
