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
// Its two-sided t test of slope 0 (n - 2 degrees of freedom), and the smallest slope the same points
// detect at `alpha` with `power`: (t(1 - alpha/2, n-2) + t(power, n-2)) x its standard error. NaN
// without an interval.
double slope_t_p(const Interval& slope);
double slope_mdd(const Interval& slope, double alpha, double power);

enum class Verdict { kHolds, kContradicted, kSmallerThanPaper, kInconclusive };
// A claim that the true difference is negative (`direction` -1) or positive (+1): holds when the
// interval lies on that side of zero, contradicted when it lies on the other, inconclusive when it
// contains zero or is undefined (fewer than two seeds).
Verdict verdict(const Interval& difference, int direction);
// The registered verdict of a claim (reports/README.md): holds when the Holm-adjusted p of the paired
// t test is below alpha and the mean lies on the claimed side; contradicted when it is below alpha on
// the other side; otherwise smaller than the paper when the interval excludes the paper's effect
// (it lies between that effect and the far side of zero); otherwise inconclusive.
Verdict registered_verdict(const Interval& difference, int direction, double p_adjusted, double alpha, double paper_effect);
const char* verdict_name(Verdict v);  // "holds", "contradicted", "smaller than the paper", "inconclusive"

// Two-sided p of the paired t test of mean zero (n - 1 degrees of freedom); NaN for n < 2.
double paired_t_p(const Interval& difference);
// Holm's step-down adjustment of a family of p-values (NaN entries stay NaN and do not count).
std::vector<double> holm_adjust(const std::vector<double>& p);

// The smallest true mean difference a paired comparison over n seeds detects at the two-sided `alpha`
// level with `power`, given the standard deviation of the per-seed differences:
// (t_{1-alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n). NaN for n < 2.
double minimal_detectable_difference(double sd, size_t n, double alpha = 0.05, double power = 0.8);
// The fewest seeds (>= 2) whose minimal detectable difference is at most |effect|, up to `limit`
// (limit + 1 when even that many do not reach it).
int64_t seeds_for_power(double sd, double effect, double alpha = 0.05, double power = 0.8, int64_t limit = 100000);

// "1.234 [1.100, 1.368]" with printf format `f` for each number; "1.234 (one seed)" when n < 2.
std::string format_interval(const Interval& i, const char* f = "%.4f");

}  // namespace ufp4
