// Both layouts of one operand from one read: a linear's input X feeds FPROP rowwise and WGRAD
// columnwise, its output gradient dY feeds DGRAD rowwise and WGRAD columnwise, its weight W feeds
// FPROP rowwise and DGRAD columnwise. Quantized one layout at a time, each of these tensors is read
// twice; the pair kernel (quantize_pair_cuda.cu) reads it once and writes both dequantized outputs, with
// the hot kernel's arithmetic (kernels/quantize/quantize_hot.h). Its outputs are, bit for bit, those of two
// quantizations (the reference's, or the hot kernel's): each output keeps its own spec, keys and SR
// stream. The CPU has no pair path: two quantizations are the reference.
#pragma once
#include <cstdint>

#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_hot.h"

namespace ufp4 {

struct PairIO {
  const void* in = nullptr;  // [rows, cols], row-major, contiguous, BF16 or FP32
  DType in_dtype = DType::kBF16;
  int64_t rows = 0, cols = 0;
  void* row_out = nullptr;  // BF16 [rows, cols]: blocks of 16 along dim 1
  void* col_out = nullptr;  // BF16 [cols, rows]: blocks of 16 along dim 0, written transposed
};

// What one launch covers: both specs on the hot arithmetic with the same grid kind and rounding, the
// columnwise output rotated wherever the rowwise one is (FPROP/DGRAD with the RHT and WGRAD without it
// is no recipe's), FP32 input only with round-to-nearest (the weights), whole 16 x 16 blocks, 16-byte
// aligned buffers.
inline bool pair_path_applies(const KernelSpec& row, const KernelSpec& col, const PairIO& io) {
  const bool f32 = io.in_dtype == DType::kF32;
  return hot_spec_applies(row) && hot_spec_applies(col) && row.fast.kind == col.fast.kind && row.rounding == col.rounding &&
         (col.rht || !row.rht) && (!f32 || (row.rounding == 0 && row.rht == col.rht)) && io.rows > 0 && io.cols > 0 &&
         io.rows % 16 == 0 && io.cols % 16 == 0 && io.row_out && io.col_out && aligned16(io.in) && aligned16(io.row_out) &&
         aligned16(io.col_out);
}

// Many FP32 weights' pairs in one launch (the step's weight operands, models/weight_operands.h): each
// task is `batch` matrices of [rows, cols] at a stride of rows * cols elements, in the input and in both
// outputs (BF16 [rows, cols] rowwise, BF16 [cols, rows] columnwise, as PairIO's), all on one pair of
// specs. Each output equals cuda_quantize_pair's on that matrix alone, bit for bit.
struct PairTask {
  const void* in = nullptr;  // FP32
  void* row_out = nullptr;
  void* col_out = nullptr;
  int32_t rows = 0, cols = 0, batch = 1;
  int32_t first_tile = 0;  // set by the launcher: the launch's 64 x 64 tiles before this task's
};
constexpr int kPairBatchTasks = 48;  // tasks a launch (its kernel parameters); more take more launches

// What the batched launch covers: each task's matrices as pair_path_applies() takes an FP32 call.
inline bool pair_batch_applies(const KernelSpec& row, const KernelSpec& col, const PairTask& t) {
  PairIO io;
  io.in = t.in;
  io.in_dtype = DType::kF32;
  io.rows = t.rows;
  io.cols = t.cols;
  io.row_out = t.row_out;
  io.col_out = t.col_out;
  // 16 | rows and 16 | cols keep every matrix of a batch 16-byte aligned when the first one is.
  return t.batch >= 1 && pair_path_applies(row, col, io);
}

// The QuantizeIO of each output alone (what two quantizations would be given).
UFP4_HD QuantizeIO pair_output_io(const PairIO& p, bool columnwise) {
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
