// Eq. 2 extended to every bin of a sign-magnitude grid, measured on one quantized tensor: the shrinkage
// bias b_G = E[q - t] (grid units) and alpha - 1 = <A_hat - A, A> / ||A||^2 (Eq. 3) split into the
// contributions of the elements that round to each level, with each block's maximum apart (under max
// scaling it lands on g_max exactly). The contributions sum to the tensor's measured b_G and alpha - 1
// (the identity a test checks); each bin's mean error stands beside Eq. 2's locally uniform prediction,
// which for the zero bin is -r/2 and for the endpoint bin (only a left half) +l/2: rounding up, the one
// bin that expands.
#include <cmath>

#include "common/error.h"
#include "harness/analysis/analysis.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

// Eq. 2 under a locally uniform density over level i's magnitude bin, (l_i - r_i) / 2 with a missing
// neighbour's half-width 0: -r/2 at zero, +l/2 at the top level.
double eq2_prediction(const std::vector<float>& levels, size_t i) {
  const double l = i > 0 ? (levels[i] - levels[i - 1]) / 2.0 : 0.0;
  const double r = i + 1 < levels.size() ? (levels[i + 1] - levels[i]) / 2.0 : 0.0;
  return (l - r) / 2;
}

void check_decomposable(const torch::Tensor& x, const QuantSpec& spec) {
  if (!spec.grid.symmetric()) throw Error("decompose_bias: grid " + spec.grid.name() + " is not sign-magnitude (allowed: " + Grid::builtin_list(true) + ")");
  if (spec.block_2d) throw Error("decompose_bias: 2D blocks are not decomposed (allowed: 1xB blocks)");
  if (x.dim() != 2) throw Error("decompose_bias: expects a 2-D tensor (blocks along dim 1)");
}

// Per-element block values ([R, nb] -> [R, L]): each block's entry repeated over its elements.
torch::Tensor per_element(const torch::Tensor& per_block, int block, int64_t cols) {
  return per_block.repeat_interleave(block, 1).narrow(1, 0, cols);
}

}  // namespace

BiasDecomposition decompose_bias(const torch::Tensor& x, const QuantSpec& spec) {
  check_decomposable(x, spec);
  torch::NoGradGuard ng;
  const torch::Tensor xf = analysis_input(x);
  return decompose_bias(quantize_with_codes(xf, spec), analysis_reference(xf, spec), spec);
}

BiasDecomposition decompose_bias(const QuantizedTensor& qt, const torch::Tensor& reference, const QuantSpec& spec) {
  check_decomposable(reference, spec);
  if (!qt.codes.defined()) throw Error("decompose_bias: the quantized tensor has no codes (quantize_with_codes makes them)");
  torch::NoGradGuard ng;
  // On the tensor's device: a captured operand of tens of thousands of tokens stays on the GPU.
  const torch::Tensor ref = reference.to(torch::kFloat64).abs();
  const torch::Tensor deq = qt.dequant.to(torch::kFloat64).abs();
  const int64_t cols = reference.size(1);
  const torch::Tensor s = per_element(qt.scales.to(torch::kFloat64), spec.block, cols);
  const torch::Tensor amax = per_element(qt.amax.to(torch::kFloat64), spec.block, cols);
  const torch::Tensor live = s > 0;  // an all-zero block has no scale and no error
  const torch::Tensor t = torch::where(live, ref / torch::where(live, s, torch::ones_like(s)), torch::zeros_like(s));
  const torch::Tensor q = torch::where(live, deq / torch::where(live, s, torch::ones_like(s)), torch::zeros_like(s));
  const torch::Tensor is_max = live & (ref == amax);
  const std::vector<float> levels = spec.grid.levels();
  // The level each element decoded to: the nearest (decoding multiplies by a rounded scale), found
  // among the midpoints between levels (a tie, which a decoded value never is, goes to the lower one).
  std::vector<double> mid;
  for (size_t i = 0; i + 1 < levels.size(); ++i) mid.push_back((static_cast<double>(levels[i]) + levels[i + 1]) / 2);
  const torch::Tensor level_of = torch::bucketize(q, torch::tensor(mid, torch::kFloat64).to(q.device()));
  // alpha is Eq. 3 on the (rotated) tensor, <A_hat, A> / ||A||^2: in grid units each element weighs s^2.
  const torch::Tensor err = q - t, s2 = s * s, terr = s2 * t * err;
  // Every element's bin: its level, the block maxima apart (bin L), a dead block's elements in none.
  const int64_t L = static_cast<int64_t>(levels.size());
  const torch::Tensor bin = torch::where(is_max, torch::full_like(level_of, L), level_of).masked_fill(~live, L + 1);
  // Per bin: count, sum of errors, sum of alpha's terms; then the totals. One fixed reduction each (the
  // same bits on every rerun, no atomics), and one copy to the host for all of them.
  std::vector<torch::Tensor> sums;
  for (int64_t b = 0; b <= L; ++b) {
    const torch::Tensor in = bin == b;
    sums.push_back(in.sum().to(torch::kFloat64));
    sums.push_back(torch::where(in, err, 0.0).sum());
    sums.push_back(torch::where(in, terr, 0.0).sum());
  }
  sums.push_back(live.sum().to(torch::kFloat64));
  sums.push_back((s2 * t * t).sum());
  sums.push_back(torch::where(live, err, 0.0).sum());
  sums.push_back((s2 * q * t).sum());
  const torch::Tensor host = torch::stack(sums).cpu();
  const double* v = host.data_ptr<double>();
  const size_t totals = static_cast<size_t>(3 * (L + 1));
  const double n = v[totals], t2 = v[totals + 1];
  if (!(n > 0) || !(t2 > 0)) throw Error("decompose_bias: the tensor is all zeros");
  BiasDecomposition d;
  d.grid = spec.grid.name();
  d.elements = static_cast<int64_t>(n);
  d.bias = v[totals + 2] / n;
  d.alpha = v[totals + 3] / t2;
  for (int64_t b = 0; b <= L; ++b) {
    const double count = v[3 * b], err_sum = v[3 * b + 1], terr_sum = v[3 * b + 2];
    BinContribution c;
    c.block_max = b == L;
    c.level = c.block_max ? spec.grid.gmax() : levels[static_cast<size_t>(b)];
    // Under FP32 scales a block's maximum decodes to g_max exactly; a rounded scale (E8M0, E4M3) moves it,
    // which is the scale's own bias, apart from the grid's: no Eq. 2 prediction then.
    c.eq2 = !c.block_max ? eq2_prediction(levels, static_cast<size_t>(b)) : spec.scale == ScaleKind::kFp32 ? 0.0 : NAN;
    c.share = count / n;
    c.mean_error = count > 0 ? err_sum / count : NAN;
    c.bias_contribution = err_sum / n;
    c.alpha_contribution = terr_sum / t2;
    d.bias_sum += c.bias_contribution;
    d.alpha_sum += c.alpha_contribution;
    d.bins.push_back(c);
  }
  return d;
}

}  // namespace ufp4
