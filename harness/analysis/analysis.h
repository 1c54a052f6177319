// The paper's shrinkage-bias measurements (§3, §5.2; Eq. 1-7) as library calls:
//  - bias theory: expected rounding error of a grid under 1xB block max scaling for a magnitude
//    density, by numerical integration and by Monte Carlo through the real quantizer;
//  - tensor metrics: NMSE, SQNR, alpha (Eq. 3), effective bucket ratio (Eq. 6) with and without RHT;
//  - GEMM output SQNR with both operands quantized (FPROP, DGRAD, WGRAD);
//  - signal attenuation through stacked quantized GEMMs (Eq. 5).
// Everything is in "grid units": a block's values divided by its scale s = amax / g_max.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/quantize/quant_spec.h"
#include "models/quant_ops.h"

namespace ufp4 {

// A symmetric density of x, described through its magnitude |x|.
class Density {
 public:
  // uniform (on [-1, 1]), gaussian, laplace, student-t (nu > 2 for a finite variance; any nu > 0 works).
  static Density named(const std::string& name, double nu = 3);
  // The empirical distribution of a tensor's values, reduced to `support` evenly spaced order
  // statistics of |x| (both methods use that same finite support, so they must agree exactly).
  static Density empirical(const std::vector<float>& values, int support = 4096);
  static std::vector<std::string> names();  // uniform, gaussian, laplace, student-t

  const std::string& label() const { return label_; }
  bool discrete() const { return !support_.empty(); }
  double pdf(double m) const;       // density of |x|
  double quantile(double p) const;  // of |x|
  const std::vector<double>& support() const { return support_; }
  // n magnitudes (iid) with random signs, from generator state `gen`.
  torch::Tensor sample(int64_t n, torch::Generator gen) const;

 private:
  std::string kind_, label_;
  double nu_ = 3;
  std::vector<double> support_;
};

// Expectations over all elements of a block, in grid units (t = |x| / s, q = round_G(t)).
struct BiasMoments {
  double bias = 0;      // E[q - t]: the shrinkage bias b_G(P) (negative: toward zero)
  double rel_bias = 0;  // E[q - t] / E[t]
  double alpha = 0;     // E[q t] / E[t^2] (Eq. 3 on grid units)
  double nmse = 0;      // E[(q - t)^2] / E[t^2]
  double sqnr_db = 0;   // -10 log10(nmse)
  // Stated uncertainty of each: quadrature error estimate, or the Monte Carlo standard error.
  double bias_err = 0, rel_bias_err = 0, alpha_err = 0, nmse_err = 0;
  std::string method, note;
};

// Numerical integration (Gauss-Kronrod), exact in the model "B iid draws, max scaling". With
// rht = true the rotated values are used; that has a closed form only for the Gaussian (an
// orthogonal map keeps iid Gaussians iid Gaussian); other densities get the Gaussian limit and
// say so in `note`.
BiasMoments bias_by_integration(const Grid& grid, const Density& p, int block, bool rht);
// Monte Carlo through the CPU reference quantizer: `blocks` blocks of B iid draws (RHT-16 within
// each block when rht), split into 64 batches for the standard errors.
BiasMoments bias_by_monte_carlo(const Grid& grid, const Density& p, int block, bool rht, int64_t blocks, uint64_t seed);

// Metrics of one quantized tensor against its (rotated) original, Eq. 3, 6, 7.
struct TensorMetrics {
  double nmse = 0, sqnr_db = 0, alpha = 0, bucket_ratio = 0;
};
// Quantizes x (2-D, rowwise: blocks along dim 1) with `spec` and measures it.
TensorMetrics tensor_metrics(const torch::Tensor& x, const QuantSpec& spec);
// The same from x already quantized with `spec` (with codes) and its FP32 reference `ref` (rht(x, spec)
// when spec.rht, else x): measure_layer quantizes and rotates each operand once for every measurement.
TensorMetrics tensor_metrics(const QuantizedTensor& q, const torch::Tensor& ref, const QuantSpec& spec);
// x as the quantizer takes it (FP32, contiguous), quantized with its codes, and its reference as above.
torch::Tensor analysis_input(const torch::Tensor& x);
QuantizedTensor quantize_with_codes(const torch::Tensor& xf, const QuantSpec& spec);
torch::Tensor analysis_reference(const torch::Tensor& xf, const QuantSpec& spec);
// Eq. 6 from magnitude codes: exp(H) / K over the K magnitude buckets including zero.
double bucket_ratio(const torch::Tensor& magnitude_codes, int k);

// Eq. 2 extended to every bin, measured on one tensor quantized with `spec` (1xB blocks along dim 1, a
// sign-magnitude grid): per level, the elements that round to it (each block's maximum apart), their
// share, mean rounding error E[q - t | bin] beside Eq. 2's locally uniform prediction (grid units), and
// their contributions to b_G = E[q - t] and to alpha - 1 = <A_hat - A, A> / ||A||^2 (Eq. 3 on the
// rotated tensor). The contributions sum to the measured b_G and alpha - 1.
struct BinContribution {
  double level = 0;               // the grid level (grid units)
  bool block_max = false;         // the row of each block's maximum (any level it decodes to)
  double share = 0;               // fraction of the elements
  double mean_error = 0;          // E[q - t | bin]; NaN for an empty bin
  double eq2 = 0;                 // Eq. 2 under a locally uniform density: (l - r) / 2, -r/2 at zero, +l/2 at the top;
                                  // the block maxima: 0 under FP32 scales, NaN under rounded ones (the scale's own bias)
  double bias_contribution = 0;   // share x mean error: the bin's part of b_G
  double alpha_contribution = 0;  // sum over the bin of a (a_hat - a), over ||A||^2: its part of alpha - 1
};
struct BiasDecomposition {
  std::string grid;
  int64_t elements = 0;              // in blocks with a non-zero scale
  double bias = 0, alpha = 0;        // measured over the whole tensor
  double bias_sum = 0, alpha_sum = 0;  // sums of the contributions (= bias and alpha - 1 up to rounding)
  std::vector<BinContribution> bins;   // levels ascending, then the block maxima
};
BiasDecomposition decompose_bias(const torch::Tensor& x, const QuantSpec& spec);
// The same from x quantized with `spec` (with codes) and its reference (analysis_reference).
BiasDecomposition decompose_bias(const QuantizedTensor& q, const torch::Tensor& ref, const QuantSpec& spec);

// Output SQNR (dB) of the three GEMMs of a linear layer with both operands quantized by `spec`
// along each GEMM's reduction dimension (x [M,K], w [N,K], dy [M,N]; M a multiple of the block and
// RHT size for WGRAD).
struct GemmSqnr {
  double fwd_y = 0, bwd_dx = 0, bwd_dw = 0;
};
GemmSqnr gemm_sqnr(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy, const QuantSpec& spec);
// The exact outputs (FP32) of the three GEMMs, the same for every grid and transform; and gemm_sqnr from
// them and the operands' rowwise dequantized forms (x and w along K, dy along N) where the caller has them.
struct GemmOutputs {
  torch::Tensor y, dx, dw;
};
GemmOutputs exact_gemms(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy);
GemmSqnr gemm_sqnr(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& dy, const QuantSpec& spec, const GemmOutputs& exact,
                   const torch::Tensor& xq, const torch::Tensor& wq, const torch::Tensor& dyq);

// Signal attenuation through K stacked quantized GEMMs x_k = Q(x_{k-1}) Q(W_k)^T, each stage rescaled
// by the exact chain's RMS. eta_k: projection coefficient of the quantized chain's output on the
// exact one; predicted_k = exp(-sum_j delta_j) with delta_j = 1 - alpha_x,j alpha_w,j (Eq. 5).
// branch_gain g > 0 makes it a residual stream instead, as a transformer's: x_k = x_{k-1} + g b_k with the
// branch b_k = Q(x_{k-1}) Q(W_k)^T at the stream's RMS, the stream rescaled to RMS 1 after each add (both
// paths by the exact one's factor). A branch then carries the share w = g^2 / (1 + g^2) of the stream's
// energy, and the stream's alpha falls by (1 - w delta_k) a stage, not (1 - delta_k):
// predicted_residual_k = exp(-w sum_j delta_j), Eq. 5 diluted by the branches' share (= predicted when g = 0).
struct ChainPoint {
  int k = 0;
  double eta = 0, predicted = 0, delta = 0, predicted_residual = 0;
};
std::vector<ChainPoint> attenuation_chain(const torch::Tensor& x0, const std::vector<torch::Tensor>& weights, const QuantSpec& spec,
                                          double branch_gain = 0);

}  // namespace ufp4
