#include "harness/analysis/fit.h"

#include <Eigen/Dense>
#include <unsupported/Eigen/NonLinearOptimization>
#include <unsupported/Eigen/NumericalDiff>
#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "common/error.h"

namespace ufp4 {

FitForm parse_fit_form(const std::string& s) {
  if (s == "power") return FitForm::kPower;
  if (s == "chinchilla") return FitForm::kChinchilla;
  throw Error("--form: '" + s + "' is not allowed (allowed: power, chinchilla)");
}

std::vector<std::string> fit_param_names(FitForm f) {
  if (f == FitForm::kPower) return {"E", "logA", "alpha"};
  return {"E", "logA", "a", "logB", "b"};
}

double FitResult::predict_with(const std::vector<double>& p, double compute, double n, double d) const {
  if (form == FitForm::kPower) return p[0] + std::exp(p[1]) * std::pow(compute / c0, -p[2]);
  return p[0] + std::exp(p[1]) * std::pow(n / n0, -p[2]) + std::exp(p[3]) * std::pow(d / d0, -p[4]);
}

double FitResult::predict(double compute, double n, double d) const { return predict_with(params, compute, n, d); }

namespace {

struct Residuals {
  using Scalar = double;
  enum { InputsAtCompileTime = Eigen::Dynamic, ValuesAtCompileTime = Eigen::Dynamic };
  using InputType = Eigen::VectorXd;
  using ValueType = Eigen::VectorXd;
  using JacobianType = Eigen::MatrixXd;
  const std::vector<FitPoint>* pts;
  const FitResult* model;
  std::vector<double> weight;  // sqrt of the Huber IRLS weights
  bool positive_e = true;      // x[0] is log E
  int inputs() const { return static_cast<int>(fit_param_names(model->form).size()); }
  int values() const { return static_cast<int>(pts->size()); }
  std::vector<double> params(const Eigen::VectorXd& x) const {
    std::vector<double> p(x.data(), x.data() + x.size());
    if (positive_e) p[0] = std::exp(p[0]);
    return p;
  }
  int operator()(const Eigen::VectorXd& x, Eigen::VectorXd& f) const {
    const std::vector<double> p = params(x);
    for (size_t i = 0; i < pts->size(); ++i) {
      const FitPoint& q = (*pts)[i];
      f[static_cast<Eigen::Index>(i)] = weight[i] * (model->predict_with(p, q.compute, q.params, q.tokens) - q.loss);
    }
    return 0;
  }
};

double geomean(const std::vector<FitPoint>& pts, double FitPoint::*field) {
  double s = 0;
  for (const auto& p : pts) s += std::log(p.*field);
  return std::exp(s / static_cast<double>(pts.size()));
}

// Starting point: for a grid of E below the smallest loss (above zero where E must be positive), a
// log-linear regression of L - E.
std::vector<double> initial(const std::vector<FitPoint>& pts, const FitResult& m, bool positive_e) {
  double lmin = INFINITY;
  for (const auto& p : pts) lmin = std::min(lmin, p.loss);
  std::vector<double> best;
  double best_sse = INFINITY;
  for (int g = 0; g < 40; ++g) {
    const double e = lmin * (positive_e ? (g + 0.01) / 40.01 : g / 40.0);
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    const double n = static_cast<double>(pts.size());
    for (const auto& p : pts) {
      const double x = std::log(m.form == FitForm::kPower ? p.compute / m.c0 : p.params / m.n0), y = std::log(p.loss - e);
      sx += x, sy += y, sxx += x * x, sxy += x * y;
    }
    const double den = n * sxx - sx * sx;
    const double slope = den > 0 ? (n * sxy - sx * sy) / den : 0, icpt = (sy - slope * sx) / n;
    std::vector<double> p = m.form == FitForm::kPower ? std::vector<double>{e, icpt, -slope}
                                                      : std::vector<double>{e, icpt - std::log(2.0), -slope, icpt - std::log(2.0), -slope};
    double sse = 0;
    for (const auto& q : pts) sse += std::pow(m.predict_with(p, q.compute, q.params, q.tokens) - q.loss, 2);
    if (std::isfinite(sse) && sse < best_sse) best_sse = sse, best = p;
  }
  return best;
}

// Least squares (Huber by reweighting) from the parameters p0; returns parameters (E itself, not its log).
std::vector<double> solve(const std::vector<FitPoint>& pts, const FitResult& m, std::vector<double> x0, double huber, bool positive_e) {
  Residuals r{&pts, &m, std::vector<double>(pts.size(), 1.0), positive_e};
  if (positive_e) x0[0] = std::log(std::max(x0[0], 1e-12));
  Eigen::VectorXd x = Eigen::Map<Eigen::VectorXd>(x0.data(), static_cast<Eigen::Index>(x0.size()));
  for (int iter = 0; iter < (huber > 0 ? 20 : 1); ++iter) {
    Eigen::NumericalDiff<Residuals> nd(r);
    Eigen::LevenbergMarquardt<Eigen::NumericalDiff<Residuals>> lm(nd);
    lm.parameters.maxfev = 4000;
    lm.parameters.xtol = 1e-12;
    lm.parameters.ftol = 1e-14;
    lm.minimize(x);
    if (huber <= 0) break;
    // Huber: weight 1 inside the threshold, delta / |r| beyond it (IRLS).
    const std::vector<double> p = r.params(x);
    for (size_t i = 0; i < pts.size(); ++i) {
      const double res = std::fabs(m.predict_with(p, pts[i].compute, pts[i].params, pts[i].tokens) - pts[i].loss);
      r.weight[i] = res <= huber ? 1.0 : std::sqrt(huber / res);
    }
  }
  return r.params(x);
}

void check(const std::vector<FitPoint>& pts, FitForm form) {
  const size_t np = fit_param_names(form).size();
  if (pts.size() < np + 1)
    throw Error("fit: " + std::to_string(pts.size()) + " points for " + std::to_string(np) + " parameters (allowed: at least " + std::to_string(np + 1) + ")");
  std::set<double> cs, ns, ds;
  for (const auto& p : pts) {
    if (!std::isfinite(p.loss) || !std::isfinite(p.compute) || !std::isfinite(p.params) || !std::isfinite(p.tokens))
      throw Error("fit: a non-finite loss or compute in the data (a diverged run?)");
    if (p.compute <= 0 || p.params <= 0 || p.tokens <= 0) throw Error("fit: compute, parameters and tokens must be positive");
    cs.insert(p.compute), ns.insert(p.params), ds.insert(p.tokens);
  }
  if (cs.size() < 2) throw Error("fit: every point has the same compute; a scaling law needs at least two compute values");
  if (form == FitForm::kChinchilla && (ns.size() < 2 || ds.size() < 2))
    throw Error("fit: the chinchilla form needs at least two model sizes and two token counts");
}

}  // namespace

FitResult fit_scaling_law(const std::vector<FitPoint>& pts_in, FitForm form, const FitOptions& opt) {
  check(pts_in, form);
  // A canonical order (size, then seed): the fit and its resamples do not depend on the input's order.
  std::vector<FitPoint> pts = pts_in;
  std::stable_sort(pts.begin(), pts.end(), [](const FitPoint& a, const FitPoint& b) {
    return a.params != b.params ? a.params < b.params : a.tokens != b.tokens ? a.tokens < b.tokens : a.seed < b.seed;
  });
  FitResult m;
  m.form = form;
  m.c0 = geomean(pts, &FitPoint::compute);
  m.n0 = geomean(pts, &FitPoint::params);
  m.d0 = geomean(pts, &FitPoint::tokens);
  m.params = solve(pts, m, initial(pts, m, opt.positive_e), opt.huber_delta, opt.positive_e);
  double sse = 0;
  for (const auto& q : pts) sse += std::pow(m.predict(q.compute, q.params, q.tokens) - q.loss, 2);
  m.rmse = std::sqrt(sse / static_cast<double>(pts.size()));
  m.lo = m.hi = m.params;
  if (opt.bootstrap <= 0) return m;
  // Sizes: the points of one (params, tokens), seeds ascending within a size.
  std::vector<std::vector<size_t>> sizes;
  {
    std::map<std::pair<double, double>, size_t> at;
    for (size_t i = 0; i < pts.size(); ++i) {
      auto [it, fresh] = at.emplace(std::make_pair(pts[i].params, pts[i].tokens), sizes.size());
      if (fresh) sizes.emplace_back();
      sizes[it->second].push_back(i);
    }
  }
  std::mt19937_64 rng(opt.seed);
  std::uniform_int_distribution<size_t> pick(0, sizes.size() - 1);
  const size_t np = m.params.size();
  for (int b = 0; b < opt.bootstrap; ++b) {
    std::vector<FitPoint> s;
    std::set<size_t> distinct;  // sizes drawn: seeds of one size do not pin down another parameter
    for (size_t i = 0; i < sizes.size(); ++i) {
      const size_t at = pick(rng);
      const std::vector<size_t>& g = sizes[at];
      distinct.insert(at);
      for (size_t j = 0; j < g.size(); ++j) {
        // One seed: no draw, so single-seed ladders resample exactly as the case bootstrap over runs.
        const size_t k = g.size() == 1 ? g[0] : g[std::uniform_int_distribution<size_t>(0, g.size() - 1)(rng)];
        s.push_back(pts[k]);
      }
    }
    bool ok = distinct.size() >= np + 1;
    if (ok) try {
        check(s, form);
      } catch (const Error&) {
        ok = false;
      }
    if (!ok) {
      ++m.bootstrap_skipped;
      m.samples.push_back({});  // keeps sample i aligned across fits drawn with the same seed
      continue;
    }
    std::vector<double> p = solve(s, m, m.params, opt.huber_delta, opt.positive_e);
    bool finite = true;
    for (double v : p) finite = finite && std::isfinite(v);
    if (!finite) {
      ++m.bootstrap_skipped;
      m.samples.push_back({});
      continue;
    }
    m.samples.push_back(p);
    ++m.bootstrap_used;
  }
  const double tail = (1 - opt.coverage) / 2;
  for (size_t j = 0; j < np; ++j) {
    std::vector<double> v;
    for (const auto& s : m.samples)
      if (!s.empty()) v.push_back(s[j]);
    if (v.empty()) continue;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))]; };
    m.lo[j] = at(tail);
    m.hi[j] = at(1 - tail);
  }
  return m;
}

}  // namespace ufp4
