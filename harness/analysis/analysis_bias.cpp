// Bias theory: expected rounding error of a grid under 1xB block max scaling, two ways.
//
// Integration. A block holds B iid magnitudes with density g and CDF G; its max M lands exactly on
// g_max (no error); the other B-1, given M = m, are iid g(u)/G(m) on [0, m] and land on t = u g_max / m.
// With v = G(M) (density B v^(B-1)) the mean of h over all B elements is
//   E[h] = h(g_max) / B + int_0^1 (B-1) v^(B-2) I_h(G^-1(v)) dv,   I_h(m) = int_0^m g(u) h(u g_max / m) du,
// and I_h is a sum over the grid's bins (h is smooth inside each), each done by Gauss-Legendre.
// For a discrete support u_1 <= ... <= u_n (the empirical density) the same expectation is a finite
// sum over the index k of the block max (exact):
//   E[h] = (1/n) sum_k [A_k (k/n)^(B-1) - (A_k - h(g_max)) ((k-1)/n)^(B-1)],  A_k = sum_{i<=k} h(u_i g_max / u_k).
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <boost/math/quadrature/gauss.hpp>
#include <boost/math/quadrature/gauss_kronrod.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <random>

#include "common/error.h"
#include "harness/analysis/analysis.h"
#include "models/quant_ops.h"

namespace ufp4 {

// ---- densities ---------------------------------------------------------------------------------

std::vector<std::string> Density::names() { return {"uniform", "gaussian", "laplace", "student-t"}; }

Density Density::named(const std::string& name, double nu) {
  Density d;
  d.kind_ = name;
  d.nu_ = nu;
  if (name == "student-t") {
    if (!(nu > 0)) throw Error("--nu: " + std::to_string(nu) + " is not allowed (allowed: nu > 0)");
    char b[64];
    std::snprintf(b, sizeof b, "student-t(nu=%g)", nu);
    d.label_ = b;
  } else if (name == "uniform" || name == "gaussian" || name == "laplace") {
    d.label_ = name;
  } else {
    throw Error("--density: unknown density '" + name + "' (allowed: uniform, gaussian, laplace, student-t, or a tensor file)");
  }
  return d;
}

Density Density::empirical(const std::vector<float>& values, int support) {
  std::vector<double> mag;
  mag.reserve(values.size());
  for (float v : values)
    if (std::isfinite(v)) mag.push_back(std::fabs(static_cast<double>(v)));
  if (mag.size() < 2) throw Error("empirical density: fewer than two finite values");
  std::sort(mag.begin(), mag.end());
  Density d;
  d.kind_ = "empirical";
  const size_t n = std::min<size_t>(static_cast<size_t>(support), mag.size());
  d.support_.resize(n);
  for (size_t i = 0; i < n; ++i) d.support_[i] = mag[(2 * i + 1) * mag.size() / (2 * n)];  // mid-quantiles
  d.label_ = "empirical(" + std::to_string(mag.size()) + " values, " + std::to_string(n) + "-point support)";
  return d;
}

double Density::pdf(double m) const {
  if (m < 0) return 0;
  if (kind_ == "uniform") return m <= 1 ? 1 : 0;
  if (kind_ == "gaussian") return 2 * boost::math::pdf(boost::math::normal(), m);
  if (kind_ == "laplace") return std::exp(-m);
  if (kind_ == "student-t") return 2 * boost::math::pdf(boost::math::students_t(nu_), m);
  throw Error("Density::pdf: not defined for " + label_);
}

double Density::quantile(double p) const {
  if (kind_ == "uniform") return p;
  if (kind_ == "gaussian") return boost::math::quantile(boost::math::normal(), 0.5 + 0.5 * p);
  if (kind_ == "laplace") return -std::log1p(-p);
  if (kind_ == "student-t") return boost::math::quantile(boost::math::students_t(nu_), 0.5 + 0.5 * p);
  const size_t i = std::min(support_.size() - 1, static_cast<size_t>(p * static_cast<double>(support_.size())));
  return support_[i];
}

torch::Tensor Density::sample(int64_t n, torch::Generator gen) const {
  // Inverse-CDF sampling from one 64-bit seed drawn from the torch generator (reproducible).
  const uint64_t seed = static_cast<uint64_t>(torch::randint(0, INT64_MAX, {1}, gen, torch::kLong).item<int64_t>());
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  torch::Tensor out = torch::empty({n}, torch::kFloat32);
  float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    double m = discrete() ? support_[static_cast<size_t>(rng() % support_.size())] : quantile(u(rng));
    p[i] = static_cast<float>((rng() & 1) ? -m : m);
  }
  return out;
}

// ---- integration -------------------------------------------------------------------------------

namespace {

constexpr int kMoments = 5;  // t, t^2, q t, (q - t)^2, q - t
using Moments = std::array<double, kMoments>;

struct Rounder {
  std::vector<double> level, mid;  // magnitude levels and decision points between them
  explicit Rounder(const Grid& g) {
    if (!g.symmetric()) throw Error("analyze bias: grid '" + g.name() + "' is not sign-magnitude (allowed: " + Grid::builtin_list(true) + ", custom magnitudes)");
    const GridParams& p = g.params();
    for (int i = 0; i < p.n; ++i) level.push_back(p.level[i]);
    for (int i = 0; i + 1 < p.n; ++i) mid.push_back(p.mid[i]);
  }
  double gmax() const { return level.back(); }
  double round(double t) const {
    size_t i = 0;
    while (i < mid.size() && t > mid[i]) ++i;
    return level[i];
  }
};

Moments h_at(double t, double q) { return {t, t * t, q * t, (q - t) * (q - t), q - t}; }

BiasMoments finish(const Moments& m, const Moments& err, const std::string& method) {
  BiasMoments r;
  r.method = method;
  r.bias = m[4];
  r.bias_err = err[4];
  r.rel_bias = m[4] / m[0];
  r.rel_bias_err = (err[4] + std::fabs(r.rel_bias) * err[0]) / m[0];
  r.alpha = m[2] / m[1];
  r.alpha_err = (err[2] + std::fabs(r.alpha) * err[1]) / m[1];
  r.nmse = m[3] / m[1];
  r.nmse_err = (err[3] + r.nmse * err[1]) / m[1];
  r.sqnr_db = -10 * std::log10(r.nmse);
  return r;
}

// I_h(m) for all moments: sum over bins of Gauss-Legendre on t in [lo, hi] of g(m t / gmax) h(t) (m / gmax).
Moments inner(const Density& p, const Rounder& r, double m) {
  Moments out{};
  const double gmax = r.gmax();
  std::vector<double> edges = {0};
  for (double x : r.mid) edges.push_back(x);
  edges.push_back(gmax);
  for (size_t b = 0; b + 1 < edges.size(); ++b) {
    const double q = r.level[b];
    for (int k = 0; k < kMoments; ++k) {
      auto f = [&](double t) { return p.pdf(m * t / gmax) * h_at(t, q)[static_cast<size_t>(k)]; };
      out[static_cast<size_t>(k)] += boost::math::quadrature::gauss<double, 30>::integrate(f, edges[b], edges[b + 1]) * m / gmax;
    }
  }
  return out;
}

Moments discrete_moments(const std::vector<double>& u, const Rounder& r, int block) {
  const size_t n = u.size();
  const double gmax = r.gmax(), nd = static_cast<double>(n);
  const Moments at_max = h_at(gmax, gmax);
  Moments out{};
  for (size_t k = 1; k <= n; ++k) {
    const double uk = u[k - 1];
    Moments a{};
    if (uk > 0)
      for (size_t i = 0; i < k; ++i) {
        double t = u[i] * gmax / uk;
        Moments h = h_at(t, r.round(t));
        for (int j = 0; j < kMoments; ++j) a[static_cast<size_t>(j)] += h[static_cast<size_t>(j)];
      }
    const double wk = std::pow(static_cast<double>(k) / nd, block - 1), wk1 = std::pow(static_cast<double>(k - 1) / nd, block - 1);
    for (int j = 0; j < kMoments; ++j) {
      const size_t J = static_cast<size_t>(j);
      const double hmax = uk > 0 ? at_max[J] : 0;  // an all-zero block has t = q = 0
      out[J] += (a[J] * wk - (a[J] - hmax) * wk1) / nd;
    }
  }
  return out;
}

}  // namespace

BiasMoments bias_by_integration(const Grid& grid, const Density& p0, int block, bool rht) {
  if (block < 2) throw Error("--block: " + std::to_string(block) + " is not allowed (allowed: 2 or more)");
  Rounder r(grid);
  std::string note;
  Density p = p0;
  if (rht && p0.label() != "gaussian") {
    note = "Gaussian limit of the rotated values (exact only for a Gaussian input)";
    p = Density::named("gaussian");
  }
  if (p.discrete()) {
    Moments m = discrete_moments(p.support(), r, block);
    Moments err;
    for (int j = 0; j < kMoments; ++j) err[static_cast<size_t>(j)] = 1e-12 * std::fabs(m[static_cast<size_t>(j)]);
    BiasMoments out = finish(m, err, "exact sum over the support");
    out.note = note;
    return out;
  }
  const double gmax = r.gmax();
  Moments m{}, err{};
  const Moments hmax = h_at(gmax, gmax);
  // The five moments' integrals mostly visit the same nodes: each node's inner integrals once.
  std::map<double, Moments> inner_at;
  for (int j = 0; j < kMoments; ++j) {
    const size_t J = static_cast<size_t>(j);
    auto f = [&](double v) {
      if (v <= 0 || v >= 1) return 0.0;
      auto it = inner_at.find(v);
      if (it == inner_at.end()) it = inner_at.emplace(v, inner(p, r, p.quantile(v))).first;
      return (block - 1) * std::pow(v, block - 2) * it->second[J];
    };
    double e = 0;
    m[J] = hmax[J] / block + boost::math::quadrature::gauss_kronrod<double, 31>::integrate(f, 0.0, 1.0, 12, 1e-11, &e);
    err[J] = e;
  }
  BiasMoments out = finish(m, err, "Gauss-Kronrod (31) over the block max, Gauss-Legendre (30) per bin");
  out.note = note;
  return out;
}

// ---- Monte Carlo -------------------------------------------------------------------------------

BiasMoments bias_by_monte_carlo(const Grid& grid, const Density& p, int block, bool rht, int64_t blocks, uint64_t seed) {
  constexpr int kBatches = 64;
  if (blocks < kBatches) throw Error("--samples: " + std::to_string(blocks) + " blocks is too few (allowed: 64 or more)");
  Rounder check(grid);  // same error as integration for an asymmetric grid
  (void)check;
  QuantSpec spec;
  spec.grid = grid;
  spec.block = block;
  spec.rht = rht ? 16 : 0;
  spec.rht_seed = seed ^ 0x5bd1e995u;
  if (rht && block % 16 != 0) throw Error("--block: " + std::to_string(block) + " with RHT-16 is not allowed (allowed: a multiple of 16)");
  spec.validate();
  torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(seed);
  const int64_t per = blocks / kBatches;
  std::vector<Moments> batch(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    torch::Tensor x = p.sample(per * block, gen).reshape({per, block});
    QuantizedTensor q = quantize(x, spec);  // with codes: the scales come with them
    torch::Tensor ref = rht ? ufp4::rht(x, spec) : x;
    torch::Tensor s = q.scales.to(torch::kFloat64);  // [per, 1]
    torch::Tensor keep = (s > 0).to(torch::kFloat64);
    torch::Tensor sd = torch::where(s > 0, s, torch::ones_like(s));
    torch::Tensor t = ref.to(torch::kFloat64).abs() / sd * keep;
    torch::Tensor qs = (q.dequant.to(torch::kFloat64) * ref.sign().to(torch::kFloat64)) / sd * keep;  // signed toward x
    const double n = static_cast<double>(per * block);
    Moments m = {(t.sum() / n).item<double>(), ((t * t).sum() / n).item<double>(), ((qs * t).sum() / n).item<double>(),
                 (((qs - t) * (qs - t)).sum() / n).item<double>(), ((qs - t).sum() / n).item<double>()};
    batch[static_cast<size_t>(b)] = m;
  }
  // Estimates from the pooled moments; standard errors from the spread of the batch estimates.
  Moments mean{};
  for (const auto& m : batch)
    for (int j = 0; j < kMoments; ++j) mean[static_cast<size_t>(j)] += m[static_cast<size_t>(j)] / kBatches;
  BiasMoments pooled = finish(mean, Moments{}, "");
  std::array<double, 4> ss{};
  for (const auto& m : batch) {
    BiasMoments r = finish(m, Moments{}, "");
    ss[0] += (r.bias - pooled.bias) * (r.bias - pooled.bias);
    ss[1] += (r.rel_bias - pooled.rel_bias) * (r.rel_bias - pooled.rel_bias);
    ss[2] += (r.alpha - pooled.alpha) * (r.alpha - pooled.alpha);
    ss[3] += (r.nmse - pooled.nmse) * (r.nmse - pooled.nmse);
  }
  auto se = [&](double s) { return std::sqrt(s / (kBatches - 1) / kBatches); };
  pooled.bias_err = se(ss[0]);
  pooled.rel_bias_err = se(ss[1]);
  pooled.alpha_err = se(ss[2]);
  pooled.nmse_err = se(ss[3]);
  pooled.method = "Monte Carlo, " + std::to_string(per * kBatches) + " blocks through the reference quantizer" + (rht ? " with RHT-16" : "");
  return pooled;
}

}  // namespace ufp4
