#include <cmath>

#include "harness/analysis/stats.h"
#include "tests/catch.h"

using namespace ufp4;

TEST_CASE("Student-t quantiles match the published table", "[stats]") {
  // Two-sided 95% (p = 0.975) and the 80% power term (p = 0.80), e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2.
  const struct {
    double df, p, t;
  } table[] = {{1, 0.975, 12.706}, {2, 0.975, 4.303}, {4, 0.975, 2.776}, {9, 0.975, 2.262}, {29, 0.975, 2.045},
               {100, 0.975, 1.984}, {2, 0.80, 1.061}, {4, 0.80, 0.941}, {9, 0.80, 0.883}, {1, 0.90, 3.078}};
  for (const auto& r : table) {
    INFO("df " << r.df << " p " << r.p);
    CHECK(std::fabs(student_t_quantile(r.p, r.df) - r.t) < 5e-4);
    CHECK(std::fabs(student_t_cdf(r.t, r.df) - r.p) < 2e-4);  // the table's t is rounded to 3 decimals
  }
  CHECK(student_t_quantile(0.025, 4) == -student_t_quantile(0.975, 4));
  CHECK(std::fabs(student_t_cdf(0, 3) - 0.5) < 1e-15);
  CHECK(std::fabs(student_t_quantile(0.975, 1e6) - 1.95996) < 1e-4);  // the normal limit
}

TEST_CASE("intervals, paired differences and verdicts", "[stats]") {
  // 1, 2, 3: mean 2, sd 1, half-width t(0.975, 2) / sqrt(3).
  Interval i = mean_interval({1, 2, 3});
  CHECK(i.n == 3);
  CHECK(i.mean == 2);
  CHECK(i.sd == 1);
  CHECK(std::fabs(i.hi - i.mean - 4.302653 / std::sqrt(3.0)) < 1e-5);
  CHECK(std::fabs(i.mean - i.lo - (i.hi - i.mean)) < 1e-12);
  // One seed: a mean but no interval, and so no verdict.
  Interval one = mean_interval({1.5});
  CHECK(!one.defined());
  CHECK(std::isnan(one.lo));
  CHECK(verdict(one, -1) == Verdict::kInconclusive);
  CHECK(format_interval(one) == "1.5000 (one seed)");
  // Paired: a constant offset with little noise is detected in both directions.
  std::vector<double> a = {3.10, 3.20, 3.05}, b = {3.13, 3.22, 3.09};
  Interval d = paired_difference(a, b);
  CHECK(std::fabs(d.mean + 0.03) < 1e-12);
  CHECK(verdict(d, -1) == Verdict::kHolds);
  CHECK(verdict(d, +1) == Verdict::kContradicted);
  CHECK(std::string(verdict_name(verdict(d, -1))) == "holds");
  // Unpaired noise larger than the offset: inconclusive.
  CHECK(verdict(paired_difference({3.1, 3.3, 3.0}, {3.2, 3.1, 3.15}), -1) == Verdict::kInconclusive);
  CHECK_THROWS(paired_difference({1, 2}, {1}));
  // Minimal detectable difference: (t.975 + t.80) sd / sqrt(n); shrinks with seeds.
  CHECK(std::fabs(minimal_detectable_difference(1.0, 3) - (4.302653 + 1.060660) / std::sqrt(3.0)) < 1e-5);
  CHECK(minimal_detectable_difference(1.0, 10) < minimal_detectable_difference(1.0, 3));
  CHECK(std::isnan(minimal_detectable_difference(1.0, 1)));
  CHECK(format_interval(i, "%.1f") == "2.0 [-0.5, 4.5]");
}

TEST_CASE("slope of a line with its t interval", "[stats]") {
  // y = 1 + 2x + e, e = +-0.1 alternating: slope and its standard error by hand.
  const std::vector<double> x = {0, 1, 2, 3}, y = {1.1, 2.9, 5.1, 6.9};
  const Interval s = slope_interval(x, y);
  // sxx = 5, sxy = 9.8 -> slope 1.96, intercept 1.06; residuals 0.04, -0.12, 0.12, -0.04 -> sse 0.032,
  // standard error sqrt(0.032 / 2 / 5).
  CHECK(s.mean == Approx(1.96).epsilon(1e-12));
  CHECK(s.sd == Approx(std::sqrt(0.0032)).epsilon(1e-9));
  CHECK(s.hi - s.mean == Approx(4.302653 * s.sd).epsilon(1e-5));  // t(0.975, 2)
  CHECK(verdict(s, +1) == Verdict::kHolds);
  // Flat noisy data: the interval holds zero. Two points or one x: no interval.
  CHECK(verdict(slope_interval({0, 1, 2, 3}, {1, 1.2, 0.9, 1.05}), +1) == Verdict::kInconclusive);
  CHECK(!slope_interval({0, 1}, {1, 2}).defined());
  CHECK(!slope_interval({1, 1, 1}, {1, 2, 3}).defined());
  CHECK_THROWS(slope_interval({1, 2}, {1}));
}
