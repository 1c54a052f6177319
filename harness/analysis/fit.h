// Scaling-law fits (paper Figure 9): nonlinear least squares with Eigen's Levenberg-Marquardt,
// optional Huber loss (iteratively reweighted), and bootstrap confidence intervals over sizes and seeds:
// each resample draws sizes (points of one parameter and token count) with replacement, then, where a
// size has several seeds, its seeds with replacement (a two-stage bootstrap; with one seed a size it is
// the case bootstrap over runs).
//   power:      L(C) = E + A (C / C0)^-alpha                      params E, log A, alpha
//   chinchilla: L(N, D) = E + A (N / N0)^-a + B (D / D0)^-b       params E, log A, a, log B, b
// C0, N0, D0 are the geometric means of the data (conditioning only; A and B are reported at them).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ufp4 {

struct FitPoint {
  double compute = 0, params = 0, tokens = 0, loss = 0;  // FLOPs, (active) parameters, tokens, loss
  int64_t seed = 0;  // runs of one size differ by seed; sorted by it, so resamples pair seeds across recipes
};

enum class FitForm { kPower, kChinchilla };
FitForm parse_fit_form(const std::string& s);  // power | chinchilla
std::vector<std::string> fit_param_names(FitForm f);

struct FitOptions {
  double huber_delta = 0;  // 0: plain least squares; else Huber with this threshold (loss units)
  int bootstrap = 1000;    // case resamples (0: none)
  double coverage = 0.95;  // central interval of the bootstrap distribution
  uint64_t seed = 1;
  // E is an irreducible loss: fitted as exp(log E) so that it stays positive (a ladder still far from
  // its asymptote otherwise drives E below zero and every extrapolation with it). false: E free.
  bool positive_e = true;
};

struct FitResult {
  FitForm form = FitForm::kPower;
  std::vector<double> params, lo, hi;  // estimates and bootstrap interval (lo = hi = estimate without bootstrap)
  double c0 = 1, n0 = 1, d0 = 1, rmse = 0;
  int bootstrap_used = 0, bootstrap_skipped = 0;  // resamples refitted / skipped (too few distinct points)
  std::vector<std::vector<double>> samples;       // bootstrap parameter vectors
  double predict(double compute, double params = 0, double tokens = 0) const;
  double predict_with(const std::vector<double>& p, double compute, double params, double tokens) const;
};

// Throws ufp4::Error for degenerate inputs: fewer points than parameters, non-finite values,
// a single compute (or N, D) value, non-positive compute.
FitResult fit_scaling_law(const std::vector<FitPoint>& pts, FitForm form, const FitOptions& opt = {});

}  // namespace ufp4
