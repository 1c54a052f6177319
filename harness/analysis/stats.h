// Statistics for verdicts over seeds: Student-t intervals of a mean, paired differences, the
// holds / contradicted / inconclusive verdict and the minimal detectable difference. A verdict on a
// paper claim needs at least two (we ask three) seeds paired across recipes; one seed gives no
// interval and so no verdict.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

namespace ufp4 {

// Student's t distribution with `df` degrees of freedom (df > 0, not necessarily whole).
double student_t_cdf(double t, double df);
double student_t_quantile(double p, double df);  // 0 < p < 1

struct Interval {
  size_t n = 0;
  double mean = 0, sd = 0;   // sd: sample standard deviation (n - 1); NaN for n < 2
  double lo = 0, hi = 0;     // two-sided t interval at `level`; NaN for n < 2
  double level = 0.95;
  bool defined() const { return n >= 2; }
};

// Mean and two-sided Student-t interval: mean +- t_{(1+level)/2, n-1} sd / sqrt(n).
Interval mean_interval(const std::vector<double>& x, double level = 0.95);
// Paired differences a_i - b_i (the same seed in both), and their interval. Sizes must agree.
Interval paired_difference(const std::vector<double>& a, const std::vector<double>& b, double level = 0.95);

// The least-squares slope of y on x with its two-sided Student-t interval (n - 2 degrees of freedom):
// mean = slope, sd = its standard error. Undefined (NaN bounds) for fewer than three points or one x.
Interval slope_interval(const std::vector<double>& x, const std::vector<double>& y, double level = 0.95);

enum class Verdict { kHolds, kContradicted, kInconclusive };
// A claim that the true difference is negative (`direction` -1) or positive (+1): holds when the
// interval lies on that side of zero, contradicted when it lies on the other, inconclusive when it
// contains zero or is undefined (fewer than two seeds).
Verdict verdict(const Interval& difference, int direction);
const char* verdict_name(Verdict v);  // "holds", "contradicted", "inconclusive"

// The smallest true mean difference a paired comparison over n seeds detects at the two-sided 5%
// level with 80% power, given the standard deviation of the per-seed differences:
// (t_{0.975, n-1} + t_{0.80, n-1}) sd / sqrt(n). NaN for n < 2.
double minimal_detectable_difference(double sd, size_t n);

// "1.234 [1.100, 1.368]" with printf format `f` for each number; "1.234 (one seed)" when n < 2.
std::string format_interval(const Interval& i, const char* f = "%.4f");

}  // namespace ufp4
