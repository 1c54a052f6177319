// The measurements of one layer's captured operands, as the tables of a tensors file: for each grid,
// without and with RHT-16 (the paper's analysis setting: 1x16 blocks, FP32 single-level max scaling,
// RTNE), each operand's NMSE, SQNR, alpha and bucket ratio (tensors), Eq. 2 for every bin (bins), the
// bias and alpha under each scale kind (scales: FP32, E4M3 with an FP32 tensor scale, E8M0, which
// separates the scale's own bias from the grid's), and the output SQNR of the layer's three GEMMs
// (gemms). Rows are labelled layer, family, operand or GEMM, grid, transform (I or H16). Used by
// `ufp4 analyze tensors` (from a capture file) and `ufp4 analyze capture` (as a run trains).
#pragma once
#include <torch/torch.h>

#include <string>
#include <vector>

#include "harness/analysis/analysis.h"
#include "harness/io/array_io.h"
#include "harness/io/labelled_table.h"
#include "kernels/quantize/grid.h"

namespace ufp4 {

// The paper's analysis quantizer: 1x16 blocks, `scale` (FP32 single-level by default), RTNE, RHT-16 or none.
QuantSpec analysis_spec(const Grid& g, bool rht, ScaleKind scale = ScaleKind::kFp32);

struct TensorTables {
  TensorTables();
  LabelledTable tensors, bins, scales, gemms;
};

// Adds one layer's rows: x [tokens, K], w [N, K] and dy [tokens, N], unrotated, on any device.
void measure_layer(const std::string& layer, const std::string& family, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy,
                   const std::vector<Grid>& grids, TensorTables& t);

// The tables as the datasets tensors, bins (FP64), scales and gemms.
void write_tensor_tables(H5Writer& w, const TensorTables& t);

// The linear family of a layer name: the part after its last dot (layers.3.mlp.linear_fc1 -> linear_fc1),
// prefixed for a MoE layer's routed and shared experts (layers.3.mlp.experts.5.linear_fc1 -> experts.linear_fc1).
std::string layer_family(const std::string& layer);

}  // namespace ufp4
