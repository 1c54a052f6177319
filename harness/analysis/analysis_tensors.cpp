// Tensor and GEMM measurements of the shrinkage-bias analysis: Eq. 3 (alpha), Eq. 5 (attenuation
// chain), Eq. 6 (effective bucket ratio), Eq. 7 (NMSE / SQNR in the rotated domain).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "harness/analysis/analysis.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

torch::Tensor f64(const torch::Tensor& t) { return t.to(torch::kFloat64); }

// 1 / RMS of x, in double precision.
double inverse_rms(const torch::Tensor& x) { return 1.0 / std::sqrt(f64(x).pow(2).mean().item<double>()); }

// ||a - ref||^2 / ||ref||^2 and <a, ref> / ||ref||^2, in float64.
std::pair<double, double> nmse_alpha(const torch::Tensor& a, const torch::Tensor& ref) {
  torch::Tensor r = f64(ref), q = f64(a);
  const double rr = (r * r).sum().item<double>();
  if (!(rr > 0)) throw Error("analysis: an all-zero tensor has no SQNR");
  return {((q - r) * (q - r)).sum().item<double>() / rr, (q * r).sum().item<double>() / rr};
}

double sqnr_db(double nmse) { return -10 * std::log10(nmse); }

torch::Tensor dequant(const torch::Tensor& x, const QuantSpec& spec, bool columnwise) {
  QuantizeOptions opt;
  opt.columnwise = columnwise;
  opt.want_codes = false;
  return quantize(x.to(torch::kFloat32).contiguous(), spec, opt).dequant;
}

void check_gemm_shapes(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy) {
  if (x.dim() != 2 || w.dim() != 2 || dy.dim() != 2 || x.size(1) != w.size(1) || dy.size(0) != x.size(0) || dy.size(1) != w.size(0))
    throw Error("gemm_sqnr: shapes must be x [M,K], w [N,K], dy [M,N]");
}

}  // namespace

double bucket_ratio(const torch::Tensor& magnitude_codes, int k) {
  // Counted where the codes are (a captured operand's are tens of millions on the GPU), one reduction a
  // bucket and one copy of the counts: bincount's result, at least k buckets, more where a code is >= k.
  const torch::Tensor c = magnitude_codes.reshape({-1});
  int64_t buckets = k;
  if (c.numel()) {
    const auto [lo, hi] = torch::aminmax(c);
    if (lo.item<int64_t>() < 0) throw Error("bucket_ratio: a negative magnitude code (allowed: 0 and up)");
    buckets = std::max<int64_t>(k, hi.item<int64_t>() + 1);
  }
  std::vector<torch::Tensor> per_bucket;
  for (int64_t b = 0; b < buckets; ++b) per_bucket.push_back((c == b).sum());
  torch::Tensor counts = torch::stack(per_bucket).cpu().to(torch::kFloat64);
  torch::Tensor p = counts / counts.sum();
  const double h = -(p * torch::log(p + 1e-12)).sum().item<double>();
  return std::exp(h) / k;
}

torch::Tensor analysis_input(const torch::Tensor& x) { return x.to(torch::kFloat32).contiguous(); }

QuantizedTensor quantize_with_codes(const torch::Tensor& xf, const QuantSpec& spec) {
  QuantizeOptions opt;
  opt.want_codes = true;
  return quantize(xf, spec, opt);
}

torch::Tensor analysis_reference(const torch::Tensor& xf, const QuantSpec& spec) { return spec.rht ? rht(xf, spec) : xf; }

TensorMetrics tensor_metrics(const torch::Tensor& x, const QuantSpec& spec) {
  const torch::Tensor xf = analysis_input(x);
  return tensor_metrics(quantize_with_codes(xf, spec), analysis_reference(xf, spec), spec);
}

TensorMetrics tensor_metrics(const QuantizedTensor& q, const torch::Tensor& ref, const QuantSpec& spec) {
  if (!q.codes.defined()) throw Error("tensor_metrics: the quantized tensor has no codes (quantize_with_codes makes them)");
  TensorMetrics m;
  auto [nmse, alpha] = nmse_alpha(q.dequant, ref);
  m.nmse = nmse;
  m.sqnr_db = sqnr_db(nmse);
  m.alpha = alpha;
  if (spec.grid.symmetric()) {
    torch::Tensor packed = q.codes.to(torch::kInt32);
    torch::Tensor codes = torch::stack({packed.bitwise_and(15), torch::floor_divide(packed, 16)}, -1).reshape({ref.size(0), -1}).narrow(1, 0, ref.size(1));
    m.bucket_ratio = bucket_ratio(codes & 7, spec.grid.params().n);
  } else {
    m.bucket_ratio = NAN;  // Eq. 6 counts sign-magnitude buckets
  }
  return m;
}

GemmOutputs exact_gemms(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy) {
  check_gemm_shapes(x, w, dy);
  torch::NoGradGuard ng;
  const torch::Tensor X = x.to(torch::kFloat32), W = w.to(torch::kFloat32), DY = dy.to(torch::kFloat32);
  return {torch::matmul(X, W.t()), torch::matmul(DY, W), torch::matmul(DY.t(), X)};
}

GemmSqnr gemm_sqnr(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy, const QuantSpec& spec) {
  const GemmOutputs exact = exact_gemms(x, w, dy);
  return gemm_sqnr(x, w, dy, spec, exact, dequant(x, spec, false), dequant(w, spec, false), dequant(dy, spec, false));
}

GemmSqnr gemm_sqnr(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy, const QuantSpec& spec, const GemmOutputs& exact,
                   const torch::Tensor& xq, const torch::Tensor& wq, const torch::Tensor& dyq) {
  check_gemm_shapes(x, w, dy);
  if (!xq.sizes().equals(x.sizes()) || !wq.sizes().equals(w.sizes()) || !dyq.sizes().equals(dy.sizes()))
    throw Error("gemm_sqnr: the rowwise dequantized operands must have their operands' shapes");
  torch::NoGradGuard ng;
  GemmSqnr s;
  // FPROP y = X W^T: both along K. DGRAD dX = dY W: along N (W columnwise). WGRAD dW = dY^T X: along M.
  s.fwd_y = sqnr_db(nmse_alpha(torch::matmul(xq, wq.t()), exact.y).first);
  s.bwd_dx = sqnr_db(nmse_alpha(torch::matmul(dyq, dequant(w, spec, true).t()), exact.dx).first);
  s.bwd_dw = sqnr_db(nmse_alpha(torch::matmul(dequant(dy, spec, true), dequant(x, spec, true).t()), exact.dw).first);
  return s;
}

std::vector<ChainPoint> attenuation_chain(const torch::Tensor& x0, const std::vector<torch::Tensor>& weights, const QuantSpec& spec,
                                          double branch_gain) {
  if (!(branch_gain >= 0)) throw Error("attenuation_chain: the branch gain must be 0 (a serial chain) or above, not " + std::to_string(branch_gain));
  torch::NoGradGuard ng;
  torch::Tensor xr = x0.to(torch::kFloat32), xq = xr;
  if (branch_gain > 0) {  // a residual stream starts at RMS 1, as each add leaves it
    const double c0 = inverse_rms(xr);
    xr = xr * c0, xq = xq * c0;
  }
  const double share = branch_gain * branch_gain / (1 + branch_gain * branch_gain);
  std::vector<ChainPoint> out;
  double sum_delta = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    const torch::Tensor W = weights[k].to(torch::kFloat32);
    if (W.dim() != 2 || W.size(1) != xr.size(1) || (branch_gain > 0 && W.size(0) != W.size(1)))
      throw Error("attenuation_chain: weight " + std::to_string(k) + " does not take the previous output" + (branch_gain > 0 ? " (a residual stream needs square weights)" : ""));
    // alpha of each quantized operand against its own (rotated) input, Eq. 3.
    torch::Tensor aq = dequant(xq, spec, false), wq = dequant(W, spec, false);
    const double ax = nmse_alpha(aq, spec.rht ? rht(xq, spec) : xq).second;
    const double aw = nmse_alpha(wq, spec.rht ? rht(W, spec) : W).second;
    torch::Tensor yr = torch::matmul(xr, W.t()), yq = torch::matmul(aq, wq.t());
    const double c = inverse_rms(yr);  // same rescale on both paths
    if (branch_gain > 0) {
      xr = xr + yr * (c * branch_gain);
      xq = xq + yq * (c * branch_gain);
      const double cs = inverse_rms(xr);
      xr = xr * cs, xq = xq * cs;
    } else {
      xr = yr * c;
      xq = yq * c;
    }
    ChainPoint p;
    p.k = static_cast<int>(k + 1);
    p.delta = 1 - ax * aw;
    sum_delta += p.delta;
    p.predicted = std::exp(-sum_delta);
    p.predicted_residual = branch_gain > 0 ? std::exp(-share * sum_delta) : p.predicted;
    p.eta = nmse_alpha(xq, xr).second;
    out.push_back(p);
  }
  return out;
}

}  // namespace ufp4
