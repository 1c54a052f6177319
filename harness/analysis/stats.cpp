// Student-t distribution via the regularized incomplete beta function (continued fraction, modified
// Lentz), quantiles by bisection; intervals, verdicts and detectable differences (see stats.h).
#include "harness/analysis/stats.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "common/error.h"

namespace ufp4 {

namespace {

// Continued fraction of the incomplete beta function I_x(a, b), valid for x < (a + 1) / (a + b + 2).
double beta_fraction(double a, double b, double x) {
  const double tiny = 1e-300, eps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 500; ++m) {
    const double m2 = 2.0 * m;
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));  // even step
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    h *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));  // odd step
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < eps) break;
  }
  return h;
}

double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(a, b, x) / a;
  return 1 - front * beta_fraction(b, a, 1 - x) / b;
}

}  // namespace

double student_t_cdf(double t, double df) {
  if (!(df > 0)) throw Error("student_t_cdf: degrees of freedom must be positive");
  const double x = df / (df + t * t);
  const double tail = 0.5 * incomplete_beta(df / 2, 0.5, x);  // P(T > |t|)
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double p, double df) {
  if (!(p > 0 && p < 1)) throw Error("student_t_quantile: p must lie in (0, 1)");
  if (p < 0.5) return -student_t_quantile(1 - p, df);
  double lo = 0, hi = 1;
  while (student_t_cdf(hi, df) < p) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

Interval mean_interval(const std::vector<double>& x, double level) {
  Interval r;
  r.n = x.size();
  r.level = level;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (x.empty()) {
    r.mean = r.sd = r.lo = r.hi = nan;
    return r;
  }
  double s = 0;
  for (double v : x) s += v;
  r.mean = s / x.size();
  if (x.size() < 2) {
    r.sd = r.lo = r.hi = nan;
    return r;
  }
  double ss = 0;
  for (double v : x) ss += (v - r.mean) * (v - r.mean);
  r.sd = std::sqrt(ss / (x.size() - 1));
  const double half = student_t_quantile(0.5 + level / 2, static_cast<double>(x.size() - 1)) * r.sd / std::sqrt(static_cast<double>(x.size()));
  r.lo = r.mean - half;
  r.hi = r.mean + half;
  return r;
}

Interval paired_difference(const std::vector<double>& a, const std::vector<double>& b, double level) {
  if (a.size() != b.size()) throw Error("paired_difference: " + std::to_string(a.size()) + " vs " + std::to_string(b.size()) + " values");
  std::vector<double> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return mean_interval(d, level);
}

Interval slope_interval(const std::vector<double>& x, const std::vector<double>& y, double level) {
  if (x.size() != y.size()) throw Error("slope_interval: " + std::to_string(x.size()) + " x vs " + std::to_string(y.size()) + " y values");
  Interval r;
  r.n = x.size();
  r.level = level;
  r.sd = r.lo = r.hi = NAN;
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) mx += x[i] / n, my += y[i] / n;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  r.mean = sxx > 0 ? sxy / sxx : NAN;
  if (x.size() < 3 || !(sxx > 0)) {
    r.n = std::min<size_t>(r.n, 1);  // not defined(): no interval
    return r;
  }
  double sse = 0;
  for (size_t i = 0; i < x.size(); ++i) sse += std::pow(y[i] - my - r.mean * (x[i] - mx), 2);
  r.sd = std::sqrt(sse / (n - 2) / sxx);
  const double t = student_t_quantile((1 + level) / 2, n - 2);
  r.lo = r.mean - t * r.sd;
  r.hi = r.mean + t * r.sd;
  return r;
}

double slope_t_p(const Interval& slope) {
  if (!slope.defined() || !(slope.sd >= 0)) return std::numeric_limits<double>::quiet_NaN();
  if (slope.sd == 0) return slope.mean == 0 ? 1.0 : 0.0;
  return 2 * (1 - student_t_cdf(std::fabs(slope.mean) / slope.sd, static_cast<double>(slope.n) - 2));
}

double slope_mdd(const Interval& slope, double alpha, double power) {
  if (!slope.defined() || std::isnan(slope.sd)) return std::numeric_limits<double>::quiet_NaN();
  const double df = static_cast<double>(slope.n) - 2;
  return (student_t_quantile(1 - alpha / 2, df) + student_t_quantile(power, df)) * slope.sd;
}

Verdict verdict(const Interval& d, int direction) {
  if (!d.defined() || std::isnan(d.lo) || std::isnan(d.hi)) return Verdict::kInconclusive;
  if (direction < 0 ? d.hi < 0 : d.lo > 0) return Verdict::kHolds;
  if (direction < 0 ? d.lo > 0 : d.hi < 0) return Verdict::kContradicted;
  return Verdict::kInconclusive;
}

Verdict registered_verdict(const Interval& d, int direction, double p_adjusted, double alpha, double paper_effect) {
  if (!d.defined() || std::isnan(d.lo) || std::isnan(d.hi)) return Verdict::kInconclusive;
  if (p_adjusted < alpha) return (direction < 0 ? d.mean < 0 : d.mean > 0) ? Verdict::kHolds : Verdict::kContradicted;
  if (!std::isnan(paper_effect) && (paper_effect < 0 ? d.lo > paper_effect : d.hi < paper_effect)) return Verdict::kSmallerThanPaper;
  return Verdict::kInconclusive;
}

const char* verdict_name(Verdict v) {
  switch (v) {
    case Verdict::kHolds: return "holds";
    case Verdict::kContradicted: return "contradicted";
    case Verdict::kSmallerThanPaper: return "smaller than the paper";
    default: return "inconclusive";
  }
}

double paired_t_p(const Interval& d) {
  if (!d.defined() || std::isnan(d.sd)) return std::numeric_limits<double>::quiet_NaN();
  if (d.sd == 0) return d.mean == 0 ? 1.0 : 0.0;
  const double t = std::fabs(d.mean) / (d.sd / std::sqrt(static_cast<double>(d.n)));
  return 2 * (1 - student_t_cdf(t, static_cast<double>(d.n - 1)));
}

std::vector<double> holm_adjust(const std::vector<double>& p) {
  std::vector<size_t> order;
  for (size_t i = 0; i < p.size(); ++i)
    if (!std::isnan(p[i])) order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return p[a] < p[b]; });
  std::vector<double> out(p.size(), std::numeric_limits<double>::quiet_NaN());
  double running = 0;
  const size_t m = order.size();
  for (size_t k = 0; k < m; ++k) {
    running = std::max(running, std::min(1.0, static_cast<double>(m - k) * p[order[k]]));  // monotone step-down
    out[order[k]] = running;
  }
  return out;
}

double minimal_detectable_difference(double sd, size_t n, double alpha, double power) {
  if (n < 2 || std::isnan(sd)) return std::numeric_limits<double>::quiet_NaN();
  const double df = static_cast<double>(n - 1);
  return (student_t_quantile(1 - alpha / 2, df) + student_t_quantile(power, df)) * sd / std::sqrt(static_cast<double>(n));
}

int64_t seeds_for_power(double sd, double effect, double alpha, double power, int64_t limit) {
  if (!(sd >= 0) || !(std::fabs(effect) > 0)) throw Error("seeds_for_power: needs a standard deviation and a non-zero effect");
  // The detectable difference falls as n grows: the first n that reaches |effect|, by doubling then bisection.
  auto reaches = [&](int64_t n) { return minimal_detectable_difference(sd, static_cast<size_t>(n), alpha, power) <= std::fabs(effect); };
  int64_t lo = 1, hi = 2;
  while (hi <= limit && !reaches(hi)) lo = hi, hi *= 2;
  if (hi > limit) {
    if (!reaches(limit)) return limit + 1;
    hi = limit;
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (reaches(mid) ? hi : lo) = mid;
  }
  return hi;
}

std::string format_interval(const Interval& i, const char* f) {
  char a[64], b[64], c[64];
  std::snprintf(a, sizeof a, f, i.mean);
  if (!i.defined()) return std::string(a) + (i.n == 1 ? " (one seed)" : "");
  std::snprintf(b, sizeof b, f, i.lo);
  std::snprintf(c, sizeof c, f, i.hi);
  return std::string(a) + " [" + b + ", " + c + "]";
}

}  // namespace ufp4
