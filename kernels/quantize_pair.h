// Both layouts of one operand from one read: a linear's input X feeds FPROP rowwise and WGRAD
// columnwise, its output gradient dY feeds DGRAD rowwise and WGRAD columnwise, its weight W feeds
// FPROP rowwise and DGRAD columnwise. Quantized one layout at a time, each of these tensors is read
// twice; the pair kernel (quantize_pair_cuda.cu) reads it once and writes both dequantized outputs, with
// the hot kernel's arithmetic (kernels/quantize_hot.h). Its outputs are, bit for bit, those of two
// quantizations (the reference's, or the hot kernel's): each output keeps its own spec, keys and SR
// stream. The CPU has no pair path: two quantizations are the reference.
#pragma once
#include <cstdint>

#include "kernels/quantize.h"
#include "kernels/quantize_hot.h"

namespace ufp4 {

// Where the tile comes from. kInput: `in`. The SwiGLU sources compute a BF16 input as they read it,
// with the fused SwiGLU kernel's arithmetic (kernels/fused_ops.h), from gu [rows, 2 hidden] (gate half
// first), so the SwiGLU's output never goes to memory: kSwigluForward quantizes silu(gate) * up
// [rows, hidden] (a linear's X), kSwigluBackward the gradient of gu [rows, 2 hidden] given dout
// [rows, hidden] (a linear's dY). Each output equals, bit for bit, the SwiGLU op followed by the pair.
enum class PairSource : int { kInput = 0, kSwigluForward = 1, kSwigluBackward = 2 };

struct PairIO {
  const void* in = nullptr;  // [rows, cols], row-major, contiguous, BF16 or FP32 (kInput)
  DType in_dtype = DType::kBF16;
  int64_t rows = 0, cols = 0;
  void* row_out = nullptr;  // BF16 [rows, cols]: blocks of 16 along dim 1
  void* col_out = nullptr;  // BF16 [cols, rows]: blocks of 16 along dim 0, written transposed
  PairSource source = PairSource::kInput;
  const void* gu = nullptr;    // SwiGLU sources: BF16 [rows, 2 hidden], contiguous
  const void* dout = nullptr;  // kSwigluBackward: BF16 [rows, hidden], contiguous
  int64_t hidden = 0;
};

// The source's buffers and shape: the input, or a SwiGLU's (BF16, halves a multiple of 8 wide, cols
// its output's width).
inline bool pair_source_applies(const PairIO& io) {
  if (io.source == PairSource::kInput) return aligned16(io.in);
  const bool bwd = io.source == PairSource::kSwigluBackward;
  return io.in_dtype == DType::kBF16 && io.hidden > 0 && io.hidden % 8 == 0 && io.cols == (bwd ? 2 : 1) * io.hidden && aligned16(io.gu) &&
         (!bwd || aligned16(io.dout));
}

// What one launch covers: both specs on the hot arithmetic with the same grid kind and rounding, the
// columnwise output rotated wherever the rowwise one is (FPROP/DGRAD with the RHT and WGRAD without it
// is no recipe's), FP32 input only with round-to-nearest (the weights), whole 16 x 16 blocks, 16-byte
// aligned buffers.
inline bool pair_path_applies(const KernelSpec& row, const KernelSpec& col, const PairIO& io) {
  const bool f32 = io.in_dtype == DType::kF32;
  return hot_spec_applies(row) && hot_spec_applies(col) && row.fast.kind == col.fast.kind && row.rounding == col.rounding &&
         (col.rht || !row.rht) && (!f32 || (row.rounding == 0 && row.rht == col.rht)) && io.rows > 0 && io.cols > 0 &&
         io.rows % 16 == 0 && io.cols % 16 == 0 && io.row_out && io.col_out && pair_source_applies(io) && aligned16(io.row_out) &&
         aligned16(io.col_out);
}

// The QuantizeIO of each output alone (what two quantizations would be given).
inline QuantizeIO pair_output_io(const PairIO& p, bool columnwise) {
  QuantizeIO io;
  io.in = p.in;
  io.in_dtype = p.in_dtype;
  io.rows = p.rows;
  io.cols = p.cols;
  io.columnwise = columnwise;
  io.dequant = columnwise ? p.col_out : p.row_out;
  io.out_dtype = DType::kBF16;
  return io;
}

}  // namespace ufp4
