// The one LibTorch-facing layer of the numerics core: tensor checks, allocation and dispatch to
// the CPU reference or the CUDA kernels (on the current stream). Kernels never see at::Tensor.
#pragma once
#include <torch/torch.h>

#include "kernels/quantize/quant_spec.h"

namespace ufp4 {

struct QuantizedTensor {
  torch::Tensor dequant;      // [R, L] in the requested dtype (R x L: rows x cols, or cols x rows when columnwise)
  torch::Tensor codes;        // uint8 [R, ceil(L/2)], two codes per byte, low nibble first
  torch::Tensor scales;       // float32 [R, ceil(L/B)] decode scale per block
  torch::Tensor amax;         // float32 [R, ceil(L/B)] block amax (after RHT)
  torch::Tensor scale_bits;   // uint8 [R, ceil(L/B)] E4M3 (nvfp4) / E8M0 (mx) code, 0 for fp32
  torch::Tensor tensor_amax;  // float32 [1]
};

struct QuantizeOptions {
  bool columnwise = false;                         // quantize along dim 0, write transposed
  torch::ScalarType out_dtype = torch::kFloat32;   // kFloat32 or kBFloat16
  bool unfused = false;                            // standalone RHT into a temporary, then quantize
  torch::ScalarType unfused_dtype = torch::kBFloat16;  // the temporary's dtype (kFloat32: equals fused)
  bool want_codes = true;                          // false: dequantized values only (training path)
};

// The kernels' dtype of a float32 or bfloat16 tensor; throws naming `what` and the allowed dtypes.
DType dtype_of(const torch::Tensor& t, const char* what);
// Throws unless t is on CPU or on CUDA with this build's kernels.
void check_kernel_device(const torch::Tensor& t, const char* what);

// "auto" (CUDA when this build and the machine have it), "cpu" or "cuda"; throws naming `what` (the
// option or the manifest key that asked) and the allowed values.
torch::Device pick_device(const std::string& d, const std::string& what = "--device");

// x: 2-D float32 or bfloat16 tensor on CPU or CUDA (made contiguous if needed).
QuantizedTensor quantize(const torch::Tensor& x, const QuantSpec& spec, const QuantizeOptions& opt = {});

// Both layouts of x [rows, cols] (float32 or bfloat16) as BF16 dequantized values: rowwise with `row`
// ([rows, cols]) and columnwise with `col` ([cols, rows], blocks along dim 0). The bits of two quantize()
// calls; on CUDA one read of x where the pair kernel covers the call (kernels/quantize/quantize_pair.h).
std::pair<torch::Tensor, torch::Tensor> quantize_pair(const torch::Tensor& x, const QuantSpec& row, const QuantSpec& col);
// Whether quantize_pair reads x once for these specs (CUDA, the pair kernel's cases).
bool quantize_pair_fused(const torch::Tensor& x, const QuantSpec& row, const QuantSpec& col);

// Many FP32 weights' pairs in one launch (kernels/quantize/quantize_pair.h: PairTask): each weight [N, K] or
// [E, N, K] (E matrices), contiguous, on CUDA; for each, its rowwise operand (BF16, the weight's shape)
// and its columnwise one (BF16 [K, N] or [E, K, N]), bit for bit quantize_pair's of each matrix.
// Throws unless quantize_pair_batch_fused() holds for every weight.
std::vector<std::pair<torch::Tensor, torch::Tensor>> quantize_pair_batch(const std::vector<torch::Tensor>& weights, const QuantSpec& row,
                                                                         const QuantSpec& col);
// Whether the batched kernel covers w on these specs.
bool quantize_pair_batch_fused(const torch::Tensor& w, const QuantSpec& row, const QuantSpec& col);

// The keys of each operand of a segmented quantization: its SR seed and RHT sign seed (QuantSpec::seed
// and ::rht_seed of the operand quantized alone).
struct SegmentKeys {
  std::vector<uint64_t> seeds, rht_seeds;
};

// The keys as the segmented kernels read them: int64 [3 G] on `device` (G SR seeds, then the 4 G RHT sign
// words two to an int64); copied without a host synchronisation. Callers may keep it across calls.
torch::Tensor segment_key_table(const SegmentKeys& keys, torch::Device device);

// Segmented quantization (kernels/moe/quantize_segments.h, its layout) of x [rows, cols], float32 or
// bfloat16 on CPU or CUDA: operand g quantized with `spec` and keys g of `key_table` (segment_key_table).
// ends, lens: int32 [G] on x's device (lens undefined: whole segments). Returns the dequantized
// [rows, cols] in out_dtype. CPU runs the oracle (tests); CUDA one launch, no host synchronisation.
// src (int64 [rows] on x's device, optional): the layout is gather_rows(x, src), read in place where
// the kernel can (the columnwise hot kernel), gathered first elsewhere; the result is the same.
torch::Tensor quantize_segments(const torch::Tensor& x, const QuantSpec& spec, const torch::Tensor& key_table, const torch::Tensor& ends,
                                const torch::Tensor& lens, bool columnwise, torch::ScalarType out_dtype,
                                const torch::Tensor& src = torch::Tensor());
// The same with the keys given directly.
torch::Tensor quantize_segments(const torch::Tensor& x, const QuantSpec& spec, const SegmentKeys& keys, const torch::Tensor& ends,
                                const torch::Tensor& lens, bool columnwise, torch::ScalarType out_dtype,
                                const torch::Tensor& src = torch::Tensor());

// Each padded layout row's input row where the layout's rows are a gather of the input: gather[src[p]], -1
// where src[p] is -1 (int64 [rows] each). One kernel on CUDA (kernels/moe/padded_segments.h), LibTorch's
// index_select of a -1-prefixed gather elsewhere: the same integers.
torch::Tensor padded_read_rows(const torch::Tensor& src, const torch::Tensor& gather);

// Both segmented operands of x [rows, cols] (BF16 or FP32; BF16 out) from one read where the pair kernel
// covers the call (CUDA, kernels/moe/quantize_segments.h's SegmentedPairIO): the rowwise operand with `row`
// and row_keys over segments row_ends (whole segments), and the columnwise operand with `col` and col_keys
// in the padded layout (col_ends, col_lens, src) gathered from x. The bits of the two quantize_segments
// calls, which it makes where the kernel does not cover the call. gather (optional, int64 [rows]): the
// rows are x's rows gather[0], gather[1], ... (the MoE's dispatch), read in place by the kernel; the bits
// of the same call on x.index_select(0, gather), which it makes where the kernel does not apply.
std::pair<torch::Tensor, torch::Tensor> quantize_segments_pair(const torch::Tensor& x, const QuantSpec& row, const torch::Tensor& row_keys,
                                                               const torch::Tensor& row_ends, const QuantSpec& col, const torch::Tensor& col_keys,
                                                               const torch::Tensor& col_ends, const torch::Tensor& col_lens, const torch::Tensor& src,
                                                               const torch::Tensor& gather = torch::Tensor());
// Whether quantize_segments_pair reads x once for these specs (CUDA, BF16, the pair kernel's cases).
bool quantize_segments_pair_fused(const torch::Tensor& x, const QuantSpec& row, const QuantSpec& col, int64_t segments);

// Rows of t by index: row i of the result is t[src[i]], zeros where src[i] is -1.
torch::Tensor gather_rows(const torch::Tensor& t, const torch::Tensor& src);

// RHT of each length-n segment along dim 1 (or dim 0 when columnwise, written transposed).
// inverse=true undoes it (CPU only).
torch::Tensor rht(const torch::Tensor& x, const QuantSpec& spec, bool columnwise = false,
                  torch::ScalarType out_dtype = torch::kFloat32, bool inverse = false);

// Decode packed codes with per-block scales (CPU): the packed form's round trip.
torch::Tensor decode_packed(const torch::Tensor& codes, const torch::Tensor& scales, const QuantSpec& spec, int64_t cols);

}  // namespace ufp4
