#include "harness/analysis/tensor_tables.h"

#include <algorithm>
#include <cmath>

namespace ufp4 {

namespace {

// Eq. 2 for every bin of one tensor (decompose_bias), flattened into its row of the "bins" table: for
// each grid level, then the block maxima, the six numbers of kBinColumns; a grid of fewer than 8 levels
// is padded with NaN at the end, so every row has 9 bins.
constexpr const char* kBinColumns =
    "9 bins a row (the grid's levels ascending, then the block maxima; NaN padding at the end): level,share,mean_error,eq2,bias_part,alpha_part";
std::vector<double> bin_row(const BiasDecomposition& d) {
  std::vector<double> out;
  for (const auto& b : d.bins)
    for (double v : {b.level, b.share, b.mean_error, b.eq2, b.bias_contribution, b.alpha_contribution}) out.push_back(v);
  out.insert(out.end(), 6 * (9 - std::min<size_t>(9, d.bins.size())), NAN);
  return out;
}

// The scale kinds the scales table compares, in its column order.
constexpr ScaleKind kScales[] = {ScaleKind::kFp32, ScaleKind::kNvfp4, ScaleKind::kMx};
constexpr const char* kScaleColumns =
    "per scale kind (fp32, nvfp4: E4M3 with an FP32 tensor scale, mx: E8M0), b_G, the block maxima's part of b_G, alpha, the block maxima's part of "
    "alpha - 1: bias_fp32,bias_max_fp32,alpha_fp32,alpha_max_fp32,bias_nvfp4,bias_max_nvfp4,alpha_nvfp4,alpha_max_nvfp4,bias_mx,bias_max_mx,"
    "alpha_mx,alpha_max_mx";

// `fp32`: the tensor's decomposition under FP32 scales, made for its bins already; `xf` the tensor as the
// quantizer takes it and `ref` its reference under the transform, shared by the scale kinds.
std::vector<double> scale_row(const BiasDecomposition& fp32, const torch::Tensor& xf, const torch::Tensor& ref, const Grid& g, bool rht) {
  std::vector<double> out;
  for (const ScaleKind k : kScales) {
    const QuantSpec spec = analysis_spec(g, rht, k);
    const BiasDecomposition d = k == ScaleKind::kFp32 ? fp32 : decompose_bias(quantize_with_codes(xf, spec), ref, spec);
    const BinContribution& top = d.bins.back();  // the block maxima
    for (double v : {d.bias, top.bias_contribution, d.alpha, top.alpha_contribution}) out.push_back(v);
  }
  return out;
}

}  // namespace

QuantSpec analysis_spec(const Grid& g, bool rht, ScaleKind scale) {
  QuantSpec s;
  s.grid = g;
  s.block = 16;  // the paper's 1x16 blocks with FP32 single-level scales, RTNE
  s.scale = scale;
  s.rht = rht ? 16 : 0;
  s.rht_seed = 1;
  return s;
}

TensorTables::TensorTables()
    : tensors(4, "nmse,sqnr_db,alpha,bucket_ratio"), bins(9 * 6, kBinColumns), scales(12, kScaleColumns), gemms(1, "sqnr_db") {}

void measure_layer(const std::string& layer, const std::string& family, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy,
                   const std::vector<Grid>& grids, TensorTables& t) {
  torch::NoGradGuard ng;
  // Made once for the layer: each operand as the quantizer takes it, its reference under each transform (the
  // rotation depends on neither grid nor scale kind), and the exact GEMM outputs. Each (grid, transform)
  // then quantizes an operand once for its metrics, its bins and its GEMMs' rowwise operand.
  const std::vector<std::string> names = {"fwd_x", "fwd_w", "bwd_dy"};
  const std::vector<torch::Tensor> inputs = {analysis_input(x), analysis_input(w), analysis_input(dy)};
  std::vector<torch::Tensor> rotated;
  if (!grids.empty())
    for (const torch::Tensor& xf : inputs) rotated.push_back(analysis_reference(xf, analysis_spec(grids.front(), true)));
  const GemmOutputs exact = exact_gemms(x, w, dy);
  for (const Grid& g : grids)
    for (bool rht : {false, true}) {
      const QuantSpec spec = analysis_spec(g, rht);
      const std::string tr = rht ? "H16" : "I";
      std::vector<torch::Tensor> rowwise;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const torch::Tensor& ref = rht ? rotated[i] : inputs[i];
        const QuantizedTensor q = quantize_with_codes(inputs[i], spec);
        const TensorMetrics m = tensor_metrics(q, ref, spec);
        const std::vector<std::string> labels = {layer, family, names[i], g.name(), tr};
        t.tensors.add(labels, {m.nmse, m.sqnr_db, m.alpha, m.bucket_ratio});
        const BiasDecomposition fp32 = decompose_bias(q, ref, spec);
        t.bins.add(labels, bin_row(fp32));
        t.scales.add(labels, scale_row(fp32, inputs[i], ref, g, rht));
        rowwise.push_back(q.dequant);
      }
      const GemmSqnr s = gemm_sqnr(x, w, dy, spec, exact, rowwise[0], rowwise[1], rowwise[2]);
      for (const auto& [name, v] : std::vector<std::pair<std::string, double>>{{"fwd_y", s.fwd_y}, {"bwd_dx", s.bwd_dx}, {"bwd_dw", s.bwd_dw}})
        t.gemms.add({layer, family, name, g.name(), tr}, {v});
    }
}

void write_tensor_tables(H5Writer& w, const TensorTables& t) {
  write_labelled_table(w, "tensors", t.tensors);
  write_labelled_table(w, "bins", t.bins, /*fp64=*/true);
  write_labelled_table(w, "scales", t.scales, /*fp64=*/true);
  write_labelled_table(w, "gemms", t.gemms);
}

std::string layer_family(const std::string& layer) {
  const size_t dot = layer.rfind('.');
  const std::string linear = dot == std::string::npos ? layer : layer.substr(dot + 1);
  if (layer.find(".experts.") != std::string::npos) return "experts." + linear;
  if (layer.find(".shared_expert.") != std::string::npos) return "shared_expert." + linear;
  return linear;
}

}  // namespace ufp4
