// Stochastic rounding is tested statistically: unbiased per bin, and the mean of many draws beats RTNE.
#include <torch/torch.h>

#include <cmath>

#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/helpers.h"

using namespace ufp4;

TEST_CASE("SR: in every bin the mean of the draws is within 4 sigma of the input", "[sr]") {
  const int64_t N = 1 << 16;
  for (const char* name : {"e2m1", "e1m2", "int4_tc"}) {
    Grid g = Grid::from_name(name);
    std::vector<float> lv = g.values();
    for (size_t i = 0; i + 1 < lv.size(); ++i)
      for (double frac : {0.1, 0.5, 0.77}) {
        const float a = lv[i], b = lv[i + 1];
        const float v = static_cast<float>(a + frac * (b - a));
        QuantSpec s;
        s.grid = g;
        s.scale = ScaleKind::kUnit;
        s.rounding = Rounding::kSr;
        s.seed = 1234;
        QuantizedTensor q = quantize(torch::full({N / 16, 16}, v), s);
        const double mean = q.dequant.to(torch::kFloat64).mean().item<double>();
        const double p = (static_cast<double>(v) - a) / (b - a);
        const double sigma = std::sqrt(p * (1 - p) / N) * (b - a);
        INFO(name << " bin [" << a << ", " << b << "] v=" << v << " mean " << mean << " sigma " << sigma);
        CHECK(std::fabs(mean - v) <= 4 * sigma + 1e-7);
        CHECK((q.dequant == a).logical_or(q.dequant == b).all().item<bool>());
      }
  }
}

TEST_CASE("SR with block scaling: error unbiased; the mean of draws beats RTNE RMSE", "[sr]") {
  torch::Tensor x = test::make_input("outliers", 256, 256, 21);
  QuantSpec s;
  s.grid = Grid::from_name("e2m1");
  s.rounding = Rounding::kSr;
  s.seed = 5;
  const int draws = 32;
  torch::Tensor sum = torch::zeros_like(x);
  for (int k = 0; k < draws; ++k) {
    s.offset = static_cast<uint64_t>(k);
    sum += quantize(x, s).dequant;
  }
  torch::Tensor mean = sum / draws;
  QuantSpec rtne = s;
  rtne.rounding = Rounding::kRtne;
  torch::Tensor r = quantize(x, rtne).dequant;
  const double rmse_sr_mean = (mean - x).pow(2).mean().sqrt().item<double>();
  const double rmse_rtne = (r - x).pow(2).mean().sqrt().item<double>();
  CHECK(rmse_sr_mean < rmse_rtne);
  // Unbiased: the mean error of one draw is zero within 4 standard errors.
  s.offset = 0;
  torch::Tensor e = (quantize(x, s).dequant - x).to(torch::kFloat64);
  const double se = e.std().item<double>() / std::sqrt(static_cast<double>(e.numel()));
  CHECK(std::fabs(e.mean().item<double>()) < 4 * se);
  // RTNE on E2M1 is biased towards zero for such data (the paper's shrinkage): alpha < 1.
  const double alpha = (r * x).sum().item<double>() / (x * x).sum().item<double>();
  CHECK(alpha < 1.0);
}

TEST_CASE("SR is a function of (seed, offset): same key same bits, new key new bits", "[sr]") {
  torch::Tensor x = test::make_input("normal", 64, 64, 23);
  QuantSpec s;
  s.rounding = Rounding::kSr;
  s.seed = 9;
  s.offset = 100;
  torch::Tensor a = quantize(x, s).dequant, b = quantize(x, s).dequant;
  CHECK(torch::equal(a, b));
  s.offset = 101;
  CHECK(!torch::equal(a, quantize(x, s).dequant));
  s.offset = 100;
  s.seed = 10;
  CHECK(!torch::equal(a, quantize(x, s).dequant));
}
