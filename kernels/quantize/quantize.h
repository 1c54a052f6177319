// Block-scaled 4-bit quantize-dequantize of a row-major [rows, cols] tensor: the contract shared
// by the CPU reference (the oracle) and the CUDA kernels, which must agree bit for bit.
//
// Rowwise: blocks run along each row (dim 1); outputs have the input's layout [rows, cols].
// Columnwise: blocks run along dim 0; outputs are written transposed, [cols, rows], the layout
// a GEMM reducing over dim 0 needs. Below, R x L is the output layout.
//
// Per block (after the optional RHT of each length-n segment of an output row):
//   amax = max |x| (NaN propagates as the canonical NaN). A non-finite amax makes the block NaN:
//   scale NaN, every dequantized value NaN, every code the code of 0. nvfp4: a non-finite tensor amax makes every block NaN.
//   fp32 : s = amax / gmax; s == 0 (all zero, or underflow) gives codes = sign bits and +-0;
//          else v = x / s.
//   nvfp4: S_enc = min(448 * gmax / tensor_amax, FLT_MAX) (1 if the amax is 0),
//          e4m3 = E4M3(min(amax * (S_enc * (1/gmax)), FLT_MAX)), rcp = min(1 / (e4m3 * (1/S_enc)), FLT_MAX),
//          v = x * rcp, decode scale = e4m3 * (1/S_enc)   (Transformer Engine's arithmetic).
//   mx   : e = floor(log2 amax) - floor(log2 gmax) clamped to [-127, 127] (-127 for amax 0),
//          s = 2^e (E8M0), v = x / s.
//   unit : s = 1, v = x (no block scaling; for checking the element format itself).
//   RTNE: nearest level, ties to the even code; values beyond the end levels saturate.
//   SR  : between neighbours a <= v < b, p = (v - a) / (b - a) in FP32: up iff rint(256 p) + k >= 256
//         (P(up) = rint(256 p) / 256, ties to even: |bias| <= (b - a) / 512, zero on average over p),
//         k the element's 8-bit draw: byte i % 16 of Philox(seed, offset) at counter i / 16, i the
//         element's index in the output layout (8 bits an element, as the FP4 hardware SR
//         instruction cvt.rs takes; one Philox call serves 16 elements).
//   dequantized = level * scale (sign applied for sign-magnitude grids), then the output dtype.
#pragma once
#include <cstdint>

#include "kernels/quantize/quant_spec.h"

namespace ufp4 {

struct QuantizeIO {
  const void* in = nullptr;
  DType in_dtype = DType::kF32;
  int64_t rows = 0, cols = 0;     // input [rows, cols], row-major, contiguous
  bool columnwise = false;
  void* dequant = nullptr;        // [R, L] in out_dtype, optional
  DType out_dtype = DType::kF32;
  uint8_t* codes = nullptr;       // [R, ceil(L/2)], element j in byte j/2 (low nibble if j even), optional
  float* scales = nullptr;        // [R, ceil(L/B)] decode scale per block, optional
  float* amax = nullptr;          // [R, ceil(L/B)] block amax, optional
  uint8_t* scale_bits = nullptr;  // [R, ceil(L/B)] E4M3 (nvfp4) or E8M0 (mx) code, optional
  float* tensor_amax = nullptr;   // [1] tensor amax after RHT; required for nvfp4, written if given
  float* workspace = nullptr;     // quantize_workspace_floats() floats (device memory for CUDA)
};

inline int64_t out_rows(const QuantizeIO& io) { return io.columnwise ? io.cols : io.rows; }
inline int64_t out_cols(const QuantizeIO& io) { return io.columnwise ? io.rows : io.cols; }
inline int64_t num_blocks(const KernelSpec& s, int64_t L) { return (L + s.block - 1) / s.block; }
// 2D tiles need the tile amax array: ceil(rows/16) * ceil(cols/16) floats.
int64_t quantize_workspace_floats(const KernelSpec& s, int64_t rows, int64_t cols);

// Throws ufp4::Error when the shape cannot be quantized with this spec (e.g. RHT size not
// dividing the quantized dimension).
void check_quantize_shape(const KernelSpec& s, const QuantizeIO& io);

// The oracle: plain loops on host memory.
void reference_quantize(const KernelSpec& s, const QuantizeIO& io);

// The CPU path of training and the CLI (quantize_cpu.cpp): the oracle's results bit for bit, with the
// kernels' rounding arithmetic (several times faster).
void cpu_quantize(const KernelSpec& s, const QuantizeIO& io);

// RHT of each length-n segment of each row of a row-major [rows, cols] FP32 array, in place
// (the butterfly order defines the rounding; the kernels use the same order). inverse=true applies
// the transpose (H then signs).
void reference_rht_rows(float* data, int64_t rows, int64_t cols, const KernelSpec& s, bool inverse = false);

}  // namespace ufp4
