// The shrinkage-bias analysis suite: bias theory (integration vs Monte Carlo vs enumeration),
// tensor metrics (Eq. 3, 6, 7), GEMM output SQNR layouts, the attenuation chain (Eq. 5), and the
// analyze/report commands end to end on a CI capture.
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "common/error.h"
#include "common/fs.h"
#include "harness/analysis/analysis.h"
#include "harness/analysis/signal_chain.h"
#include "harness/io/array_io.h"
#include "harness/io/labelled_table.h"
#include "kernels/quantize/grid.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"
#include "tests/run_helpers.h"

using namespace ufp4;

namespace {

// Brute force over every index tuple of a block: the definition of b_G(P) for a finite support.
std::array<double, 3> enumerate(const std::vector<double>& u, const Grid& g, int block) {
  const GridParams& p = g.params();
  auto round = [&](double t) {
    int i = 0;
    while (i + 1 < p.n && t > p.mid[i]) ++i;
    return static_cast<double>(p.level[i]);
  };
  const size_t n = u.size();
  size_t combos = 1;
  for (int j = 0; j < block; ++j) combos *= n;
  double se = 0, st = 0, sqt = 0, stt = 0;
  for (size_t c = 0; c < combos; ++c) {
    std::vector<double> x;
    size_t r = c;
    double m = 0;
    for (int j = 0; j < block; ++j) x.push_back(u[r % n]), m = std::max(m, u[r % n]), r /= n;
    for (double v : x) {
      const double t = m > 0 ? v * g.gmax() / m : 0, q = round(t);
      se += q - t, st += t, sqt += q * t, stt += t * t;
    }
  }
  const double cnt = static_cast<double>(combos * static_cast<size_t>(block));
  return {se / cnt, (sqt / cnt) / (stt / cnt), st / cnt};
}

}  // namespace

TEST_CASE("bias theory: the closed-form sum over a finite support equals enumeration", "[analysis]") {
  for (const char* name : {"e2m1", "e1m2"}) {
    Grid g = Grid::from_name(name);
    const std::vector<double> u = {0.3, 1.0, 2.5, 0.0, 1.7};
    std::vector<float> values(u.begin(), u.end());
    Density d = Density::empirical(values, 5);
    for (int block : {2, 3, 4}) {
      auto want = enumerate(d.support(), g, block);
      BiasMoments got = bias_by_integration(g, d, block, false);
      CHECK(got.bias == Approx(want[0]).margin(1e-13));
      CHECK(got.alpha == Approx(want[1]).epsilon(1e-12));
    }
  }
}

TEST_CASE("bias theory: uniform magnitudes have zero E2M1 bias; uniform grids shrink less", "[analysis]") {
  // With |x| uniform, t = |x| g_max / m is uniform on [0, 6] for the non-max elements; the integral of
  // round(t) - t over [0, 6] is exactly 0 for E2M1 (bin by bin: -1/32 - 3/32 - 3/8 + 1/2).
  BiasMoments u = bias_by_integration(Grid::from_name("e2m1"), Density::named("uniform"), 16, false);
  CHECK(std::fabs(u.bias) < 1e-12);
  for (const char* d : {"gaussian", "laplace", "student-t"}) {
    BiasMoments e = bias_by_integration(Grid::from_name("e2m1"), Density::named(d), 16, false);
    BiasMoments f = bias_by_integration(Grid::from_name("e1m2"), Density::named(d), 16, false);
    CHECK(e.bias < 0);
    CHECK(e.alpha < 1);        // E2M1 shrinks the signal (Eq. 3)
    CHECK(f.alpha > e.alpha);  // the uniform grid keeps more of it
  }
}

TEST_CASE("bias theory: integration and Monte Carlo agree within their stated errors", "[analysis]") {
  std::vector<Density> ds;
  for (const auto& n : Density::names()) ds.push_back(Density::named(n, 3));
  torch::manual_seed(3);
  torch::Tensor t = torch::randn({4096}) * torch::exp(torch::randn({4096}));  // a heavy-tailed "tensor"
  std::vector<float> tv(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  ds.push_back(Density::empirical(tv, 512));
  for (const char* name : {"e2m1", "e1m2"}) {
    Grid g = Grid::from_name(name);
    for (const auto& d : ds)
      for (bool rht : {false, true}) {
        BiasMoments a = bias_by_integration(g, d, 16, rht);
        if (!a.note.empty()) continue;  // a stated limit, not an exact value (RHT of a non-Gaussian)
        BiasMoments m = bias_by_monte_carlo(g, d, 16, rht, 1 << 14, 7);
        INFO(name << " " << d.label() << (rht ? " H16" : " I") << ": int " << a.bias << " +- " << a.bias_err << ", MC " << m.bias << " +- "
                  << m.bias_err);
        CHECK(std::fabs(a.bias - m.bias) <= a.bias_err + 4 * m.bias_err);
        CHECK(std::fabs(a.alpha - m.alpha) <= a.alpha_err + 4 * m.alpha_err);
        CHECK(std::fabs(a.nmse - m.nmse) <= a.nmse_err + 4 * m.nmse_err);
      }
  }
}

TEST_CASE("tensor metrics: exact tensors, bucket ratio bounds", "[analysis]") {
  QuantSpec s;
  s.grid = Grid::from_name("e2m1");
  s.block = 16;
  // Every block holds each E2M1 magnitude twice (signs mixed): exactly representable, all buckets equal.
  const std::vector<float> mags = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  torch::Tensor x = torch::empty({8, 32});
  for (int r = 0; r < 8; ++r)
    for (int c = 0; c < 32; ++c) x[r][c] = mags[static_cast<size_t>(c % 8)] * ((c / 8) % 2 ? -1.f : 1.f) * static_cast<float>(r + 1);
  TensorMetrics m = tensor_metrics(x, s);
  CHECK(m.nmse == 0);
  CHECK(m.alpha == 1);
  CHECK(m.bucket_ratio == Approx(1.0).epsilon(1e-9));
  // Half zeros, half +-max: two buckets used equally, exp(log 2) / 8.
  torch::Tensor y = torch::zeros({4, 16});
  y.slice(1, 0, 4).fill_(5.0f);
  y.slice(1, 4, 8).fill_(-5.0f);
  CHECK(tensor_metrics(y, s).bucket_ratio == Approx(2.0 / 8).epsilon(1e-6));
  CHECK(bucket_ratio(torch::zeros({100}, torch::kLong), 8) == Approx(1.0 / 8).epsilon(1e-9));
  // Counted where the codes are, as bincount counts: a code at or above k adds its bucket; a negative one is refused.
  const torch::Tensor codes = torch::tensor({0, 1, 1, 2, 9}, torch::kLong);
  CHECK(bucket_ratio(codes, 4) == bucket_ratio(codes.to(torch::kInt32), 4));
  {
    const torch::Tensor p = torch::bincount(codes, {}, 4).to(torch::kFloat64) / 5.0;
    CHECK(bucket_ratio(codes, 4) == Approx(std::exp(-(p * torch::log(p + 1e-12)).sum().item<double>()) / 4).epsilon(1e-12));
  }
  CHECK_THROWS_AS(bucket_ratio(torch::tensor({0, -1}, torch::kLong), 4), Error);
}

TEST_CASE("Eq. 2 for every bin: the per-bin parts sum to the measured b_G and alpha - 1; the endpoint bin expands", "[analysis]") {
  torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(20261127);
  const torch::Tensor gauss = torch::randn({256, 512}, gen);
  // Outlier-heavy, like linear_fc2's input: 1% of the entries 30 times larger (ufp4 quantize's synthetic:outliers).
  const torch::Tensor outliers = torch::randn({512, 512}, gen) * torch::where(torch::rand({512, 512}, gen) < 0.01, torch::full({1}, 30.0f), torch::ones({1}));
  for (const std::string grid : {"e2m1", "e1m2"})
    for (const int rht : {0, 16})
      for (const torch::Tensor* x : {&gauss, &outliers}) {
        QuantSpec s;
        s.grid = Grid::from_name(grid);
        s.rht = rht;
        s.rht_seed = 7;
        const BiasDecomposition d = decompose_bias(*x, s);
        INFO(grid << " rht " << rht << (x == &gauss ? " gaussian" : " outliers"));
        // The identity: the bins partition the elements (summation order is the only difference: 1e-12).
        CHECK(std::fabs(d.bias_sum - d.bias) < 1e-12);
        CHECK(std::fabs(d.alpha_sum - (d.alpha - 1)) < 1e-12);
        double share = 0;
        for (const auto& b : d.bins) share += b.share;
        CHECK(std::fabs(share - 1) < 1e-12);
        // alpha is Eq. 3 on the rotated tensor, as tensor_metrics measures it.
        CHECK(d.alpha == Approx(tensor_metrics(*x, s).alpha).epsilon(1e-9));
        // Each block's maximum lands on g_max exactly (FP32 scales): one element in 16, no error.
        const BinContribution& top = d.bins.back();
        CHECK(top.block_max);
        CHECK(top.share == Approx(1.0 / 16).epsilon(1e-12));
        CHECK(std::fabs(top.mean_error) < 1e-6);
        // Eq. 2's locally uniform prediction per level: -r/2 at zero, (l - r)/2 inside, +l/2 at the top.
        const std::vector<float> lv = s.grid.levels();
        CHECK(d.bins[0].eq2 == Approx(-(lv[1] - lv[0]) / 4.0));
        CHECK(d.bins[lv.size() - 1].eq2 == Approx((lv.back() - lv[lv.size() - 2]) / 4.0));
        for (size_t i = 1; i + 1 < lv.size(); ++i) CHECK(d.bins[i].eq2 == Approx(((lv[i] - lv[i - 1]) - (lv[i + 1] - lv[i])) / 4.0).margin(1e-12));
      }
  QuantSpec e2m1;
  e2m1.grid = Grid::from_name("e2m1");
  const BiasDecomposition plain = decompose_bias(gauss, e2m1);
  CHECK(plain.bins[4].level == 2);
  CHECK(plain.bins[4].eq2 == -0.125);  // the paper's number
  CHECK(plain.bins[6].eq2 == -0.25);
  CHECK(plain.bins[7].eq2 == 0.5);     // the endpoint: only a left half, rounding up
  CHECK(plain.bins[7].mean_error > 0);
  CHECK(plain.bias < 0);
  // The endpoint account of alpha > 1: with RHT the outliers spread over their blocks, many elements land
  // in (5, 6] and round up; without that bin's part, alpha would be below 1.
  e2m1.rht = 16;
  e2m1.rht_seed = 7;
  const BiasDecomposition rotated = decompose_bias(outliers, e2m1);
  INFO("alpha " << rotated.alpha << ", endpoint part " << rotated.bins[7].alpha_contribution);
  CHECK(rotated.alpha > 1);
  CHECK(rotated.bins[7].alpha_contribution > 0);
  CHECK(rotated.alpha - rotated.bins[7].alpha_contribution < 1);
  std::string refused;
  try {
    decompose_bias(gauss, [] { QuantSpec t; t.grid = Grid::from_name("int4_tc"); return t; }());
  } catch (const Error& e) {
    refused = e.what();
  }
  CHECK(refused.find("is not sign-magnitude") != std::string::npos);
}

TEST_CASE("GEMM output SQNR: exact operands give infinite SQNR, rotations cancel in every layout", "[analysis]") {
  torch::manual_seed(5);
  // +-1 operands are exact in every block of every layout (each block's max is 1).
  torch::Tensor x = torch::randint(0, 2, {64, 48}).to(torch::kFloat32) * 2 - 1, w = torch::randint(0, 2, {32, 48}).to(torch::kFloat32) * 2 - 1,
                dy = torch::randint(0, 2, {64, 32}).to(torch::kFloat32) * 2 - 1;
  QuantSpec s;
  s.grid = Grid::from_name("e1m2");
  GemmSqnr e = gemm_sqnr(x, w, dy, s);
  CHECK(std::isinf(e.fwd_y));
  CHECK(std::isinf(e.bwd_dx));
  CHECK(std::isinf(e.bwd_dw));
  // Gaussian operands with RHT-16: a rotation that failed to cancel would leave ~0 dB.
  x = torch::randn({64, 48}), w = torch::randn({32, 48}), dy = torch::randn({64, 32});
  s.rht = 16;
  s.rht_seed = 9;
  GemmSqnr r = gemm_sqnr(x, w, dy, s);
  for (double v : {r.fwd_y, r.bwd_dx, r.bwd_dw}) {
    CHECK(v > 12);
    CHECK(v < 30);
  }
}

TEST_CASE("attenuation chain: E2M1 attenuates as Eq. 5 predicts, E1M2 does not", "[analysis]") {
  torch::manual_seed(11);
  const int64_t d = 256;
  std::vector<torch::Tensor> ws;
  for (int k = 0; k < 8; ++k) ws.push_back(torch::randn({d, d}) / std::sqrt(static_cast<double>(d)));
  torch::Tensor x0 = torch::randn({512, d});
  QuantSpec s;
  s.grid = Grid::from_name("e2m1");
  auto e = attenuation_chain(x0, ws, s);
  s.grid = Grid::from_name("e1m2");
  auto u = attenuation_chain(x0, ws, s);
  REQUIRE(e.size() == 8);
  // Eq. 5 neglects the correlation of the residuals between stages: 2% over 8 stages is its accuracy here.
  CHECK(std::fabs(e.back().eta - e.back().predicted) < 0.02);
  CHECK(e.back().eta < 0.97);
  CHECK(u.back().eta > e.back().eta + 0.02);
}

TEST_CASE("attenuation chain on a residual stream: Eq. 5 diluted by the branches' share of the stream's energy", "[analysis]") {
  // A branch of gain g on a stream at RMS 1 carries w = g^2 / (1 + g^2) of its energy (random weights: branch and
  // stream uncorrelated), and the stream's alpha follows exp(-w sum delta). The share fitted from the chain,
  // ln(eta) / (-sum delta), scatters by about 8% a draw at 24 stages (one draw's noise on ln(eta)); the mean of three
  // draws lies within 25% of w, a serial chain's share being 1.
  QuantSpec s;
  s.grid = Grid::from_name("e2m1");
  const int64_t d = 256;
  for (double g : {0.5, 1.0}) {
    INFO("branch gain " << g);
    double fitted = 0;
    for (int draw = 1; draw <= 3; ++draw) {
      torch::manual_seed(100 + draw);
      std::vector<torch::Tensor> ws;
      for (int k = 0; k < 24; ++k) ws.push_back(torch::randn({d, d}) / std::sqrt(static_cast<double>(d)));
      const auto r = attenuation_chain(torch::randn({1024, d}), ws, s, g);
      REQUIRE(r.size() == 24);
      double sum = 0;
      for (const auto& p : r) sum += p.delta;
      CHECK(r.back().predicted == Approx(std::exp(-sum)).epsilon(1e-12));
      CHECK(r.back().predicted_residual == Approx(std::exp(-g * g / (1 + g * g) * sum)).epsilon(1e-12));
      fitted += std::log(r.back().eta) / -sum / 3;
    }
    CHECK(std::fabs(fitted / (g * g / (1 + g * g)) - 1) < 0.25);
  }
  torch::manual_seed(12);
  std::vector<torch::Tensor> ws;
  for (int k = 0; k < 4; ++k) ws.push_back(torch::randn({d, d}) / std::sqrt(static_cast<double>(d)));
  torch::Tensor x0 = torch::randn({256, d});
  const auto serial = attenuation_chain(x0, ws, s, 0);
  CHECK(serial.back().predicted_residual == serial.back().predicted);
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([&] { attenuation_chain(x0, ws, s, -1); }).find("branch gain must be 0") != std::string::npos);
  const std::vector<torch::Tensor> wide = {torch::randn({2 * d, d})};
  CHECK(message([&] { attenuation_chain(x0, wide, s, 0.5); }).find("a residual stream needs square weights") != std::string::npos);
  auto bad = test::run_cli("analyze chain --residual -1 --depth 2 --dim 32 --tokens 32 --device cpu");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("--residual: ") != std::string::npos);
  CHECK(bad.out.find("(allowed: 0..100)") != std::string::npos);
}

TEST_CASE("signal chain: Eq. 5's prediction at each point of the residual stream, by hand", "[analysis]") {
  // Two blocks: block 0's qkv quantized forward and backward, block 1's two routed experts' and its shared expert's
  // fc1 forward only (side by side: one stage at their mean delta), the head forward only.
  const std::map<std::string, double> alpha = {{"layers.0.attention.linear_qkv/fprop.x", 0.9},
                                               {"layers.0.attention.linear_qkv/fprop.w", 0.95},
                                               {"layers.0.attention.linear_qkv/dgrad.dy", 0.5},
                                               {"layers.1.mlp.experts.0.linear_fc1/fprop.x", 0.8},
                                               {"layers.1.mlp.experts.1.linear_fc1/fprop.x", 0.6},
                                               {"layers.1.mlp.shared_expert.linear_fc1/fprop.x", 0.7},
                                               {"lm_head/fprop.x", 0.99}};
  const std::vector<std::string> taps = {"embedding", "layers.0", "layers.1", "final_norm", "logits"};
  const auto c = predict_chain(taps, 2, alpha);
  REQUIRE(c.size() == 5);
  const double qkv = 1 - 0.9 * 0.95, experts = (0.2 + 0.4 + 0.3) / 3, head = 0.01;
  CHECK(c[0].forward == 1.0);
  CHECK(c[0].forward_gemms == 0);
  CHECK(c[0].backward == Approx(std::exp(-0.5)).epsilon(1e-15));
  CHECK(c[0].backward_gemms == 3);
  CHECK(c[1].forward == Approx(std::exp(-qkv)).epsilon(1e-15));
  CHECK(c[1].backward == 1.0);  // the experts and the head quantize no DGRAD operand
  CHECK(c[1].backward_gemms == 2);
  CHECK(c[2].forward == Approx(std::exp(-(qkv + experts))).epsilon(1e-15));
  CHECK(c[2].forward_gemms == 2);
  CHECK(c[3].forward == c[2].forward);  // a norm is no GEMM
  CHECK(c[4].forward == Approx(std::exp(-(qkv + experts + head))).epsilon(1e-15));
  CHECK(c[4].forward_gemms == 3);
  CHECK(c[4].backward_gemms == 0);
  try {
    predict_chain({"layers.2"}, 2, alpha);
    FAIL("a point past the last block was taken");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("'layers.2' is not a point of the residual stream of 2 blocks (allowed: embedding, layers.0 to layers.1") !=
          std::string::npos);
  }
  CHECK(predict_chain(taps, 2, {})[4].forward == 1.0);  // a BF16 run: nothing quantized, nothing predicted
}

TEST_CASE("analyze and report: bias --json, tensors and chain on a CI capture, the analysis report", "[analysis]") {
  auto j = test::run_cli("analyze bias --grid e2m1 --density gaussian --samples 256 --json");
  REQUIRE(j.code == 0);
  CHECK(j.out.find("{\"level\": 2, \"left\": 0.25, \"right\": 0.5, \"bias\": -0.125}") != std::string::npos);
  CHECK(j.out.find("\"agree\": true") != std::string::npos);
  auto bad = test::run_cli("analyze bias --density cauchy");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("allowed: uniform, gaussian, laplace, student-t") != std::string::npos);

  const std::string dir = test::temp_dir();
  // The capture run is the fixture's (ci-train): experiments/analysis/ci.toml into build/ci/analysis.
  const std::string manifest = std::string(UFP4_SOURCE_DIR) + "/experiments/analysis/ci.toml";
  const std::string cap = test::ci_fixture("analysis") + "/analysis_bf16-" + [&] {
    auto p = test::run_cli("plan " + manifest);
    size_t at = p.out.find("analysis_bf16 ");
    return p.out.substr(p.out.find_first_not_of(' ', at + 14), 16);
  }() + ".h5";
  auto t = test::run_cli("analyze tensors " + cap + " --tokens 256 --device cpu --out " + dir + "/tensors.h5");
  INFO(t.out);
  REQUIRE(t.code == 0);
  auto labels = read_h5_string_attrs(dir + "/tensors.h5", "tensors")["rows"];
  CHECK(labels.find("layers.1.mlp.linear_fc2\tlinear_fc2\tfwd_x\te1m2\tH16") != std::string::npos);
  // Eq. 2 for every bin of every captured operand: per row, the bins' parts of alpha - 1 sum to the row's alpha - 1.
  CHECK(read_h5_string_attrs(dir + "/tensors.h5", "bins")["rows"] == labels);
  const std::vector<double> bins = read_h5_f64(dir + "/tensors.h5", "bins");
  const ArrayF32 metrics = read_h5_f32(dir + "/tensors.h5", "tensors");
  const size_t rows = metrics.data.size() / 4;
  REQUIRE(bins.size() == rows * 54);
  for (size_t i = 0; i < rows; ++i) {
    double alpha_part = 0, share = 0;
    for (size_t b = 0; b < 9; ++b) alpha_part += bins[i * 54 + b * 6 + 5], share += bins[i * 54 + b * 6 + 1];
    CHECK(std::fabs(share - 1) < 1e-9);
    CHECK(alpha_part == Approx(metrics.data[i * 4 + 2] - 1.0).margin(1e-6));  // the tensors dataset holds alpha in FP32
  }
  auto c = test::run_cli("analyze chain --capture " + cap + " --depth 4 --device cpu --out " + dir + "/chain-captured.h5");
  REQUIRE(c.code == 0);
  auto r = test::run_cli("report analysis --tensors " + dir + "/tensors.h5 --chain " + dir + "/chain-captured.h5 --out " + dir + "/analysis.md");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("linear_fc2/fwd_x | SQNR E1M2, H16 (dB)") != std::string::npos);
  CHECK(r.out.find("E2M1 attenuates faster than E1M2") != std::string::npos);
  CHECK(r.out.find("## Eq. 2 for every bin (linear_fc2/fwd_x)") != std::string::npos);
  CHECK(r.out.find("| e2m1 level | Eq. 2 | share I |") != std::string::npos);
  CHECK(r.out.find("| 2 | -0.1250 |") != std::string::npos);  // Eq. 2 at E2M1's level 2: the paper's number
  CHECK(r.out.find("### alpha > 1: the endpoint bin") != std::string::npos);
  CHECK(r.out.find("## Provenance") != std::string::npos);
}

TEST_CASE("analyze capture: training runs' operands analysed as they train, the tables a capture file gives", "[analysis]") {
  const std::string dir = test::temp_dir();
  const std::string m = test::tiny_manifest(dir, "ufp4", 8, "steps = 8\n[capture]\nsteps = [3, 7]\nlayers = [\"layers.*\"]\ntokens = 0\n");
  auto a = test::run_cli("analyze capture " + m);
  INFO(a.out);
  REQUIRE(a.code == 0);
  const RunPlan p = test::planned(RunManifest::load(m));
  const std::string f7 = p.capture.dir + "/step7.tensors.h5";
  REQUIRE(file_exists(p.capture.dir + "/step3.tensors.h5"));
  REQUIRE(file_exists(f7));
  // Provenance: what was trained, on which data, where in training.
  auto attrs = read_h5_string_attrs(f7);
  CHECK(attrs["recipe"] == "ufp4");
  CHECK(attrs["run_id"] == p.run_id);
  CHECK(attrs["data_manifest_sha256"] == p.data.manifest_sha256);
  auto num = read_h5_numeric_attrs(f7);
  CHECK(num["step"] == 7);
  CHECK(num["seed"] == 1);
  CHECK(num["epochs_at_step"] > 0);
  // Eq. 2 for every bin on captured operands: per row the bins' parts sum to b_G measured alone (the scales
  // table's FP32 column), their shares to 1; E4M3 and E8M0 scales move b_G off the FP32 scale's (their own bias).
  const LabelledTable bins = read_labelled_table(f7, "bins"), scales = read_labelled_table(f7, "scales");
  REQUIRE(bins.rows() > 0);
  REQUIRE(bins.labels == scales.labels);
  bool scale_moves = false;
  for (size_t i = 0; i < bins.rows(); ++i) {
    double bias = 0, share = 0;
    for (size_t b = 0; b < 9; ++b)
      if (!std::isnan(bins.at(i, b * 6 + 1))) share += bins.at(i, b * 6 + 1), bias += bins.at(i, b * 6 + 4);
    CHECK(share == Approx(1).margin(1e-12));
    CHECK(bias == Approx(scales.at(i, 0)).margin(1e-12));
    scale_moves = scale_moves || std::fabs(scales.at(i, 8) - scales.at(i, 0)) > 1e-6;
  }
  CHECK(scale_moves);
  // The recipe's own quantization of every GEMM operand of every captured linear (six each).
  const LabelledTable own = read_labelled_table(f7, "recipe");
  const LabelledTable tensors = read_labelled_table(f7, "tensors");
  CHECK(own.rows() == 6 * tensors.rows() / 12);  // 12 tensor rows a linear: 3 operands x 2 grids x I, H16
  for (size_t i = 0; i < own.rows(); ++i) CHECK(own.at(i, 1) > 0);  // SQNR in dB
  // The signal chain of the step: a forward and a backward row at each point of the residual stream. The
  // embedding is no GEMM's output, so both passes agree there bit for bit; the recipe changes the stream after it.
  const LabelledTable chain = read_labelled_table(f7, "chain");
  REQUIRE(chain.rows() == 2 * static_cast<size_t>(p.model.n_layers + 3));
  CHECK(chain.labels.front() == std::vector<std::string>{"embedding", "forward"});
  CHECK(chain.at(0, 0) == 1.0);
  CHECK(chain.at(0, 1) == 0.0);
  CHECK(chain.at(0, 2) == 1.0);  // nothing crossed: Eq. 5 predicts no attenuation
  const size_t last_block = 2 * static_cast<size_t>(p.model.n_layers);  // forward row of layers.<n - 1>
  CHECK(chain.labels[last_block][0] == "layers." + std::to_string(p.model.n_layers - 1));
  CHECK(chain.at(last_block, 1) > 0);
  CHECK(chain.at(last_block, 2) != 1.0);  // ufp4 quantizes every block's FPROP operands (alpha above 1 as often as below)
  CHECK(chain.at(last_block, 3) == 2.0 * static_cast<double>(p.model.n_layers) + 2.0 * static_cast<double>(p.model.n_layers));
  CHECK(num["chain_loss_recipe"] != num["chain_loss_exact"]);
  // Measuring the chain leaves training as it was: the same run trained plainly has the same bits.
  const std::string kept = dir + "/analysed";
  REQUIRE(::mkdir(kept.c_str(), 0755) == 0);
  REQUIRE(std::rename(p.results_path.c_str(), (kept + "/" + p.results_path.substr(p.results_path.rfind('/') + 1)).c_str()) == 0);
  // The same tables from a capture file of the same step: the run trained again with its operands written
  // (the unrotated ones beside the rotated), then `analyze tensors` on the file.
  REQUIRE(test::run_cli("run --force " + m).code == 0);
  const std::string plain = dir + "/plain";
  REQUIRE(::mkdir(plain.c_str(), 0755) == 0);
  REQUIRE(std::rename(p.results_path.c_str(), (plain + "/" + p.results_path.substr(p.results_path.rfind('/') + 1)).c_str()) == 0);
  auto same = test::run_cli("check " + kept + " --reference " + plain + " --exact");
  INFO(same.out);
  CHECK(same.code == 0);
  CHECK(same.out.find("final weights bit-identical") != std::string::npos);
  auto t = test::run_cli("analyze tensors " + p.capture.dir + "/capture_step7.h5 --tokens 128 --device cpu --out " + dir + "/t7.h5");
  INFO(t.out);
  REQUIRE(t.code == 0);
  for (const char* table : {"tensors", "bins", "scales", "gemms"}) {
    INFO(table);
    const LabelledTable x = read_labelled_table(f7, table), y = read_labelled_table(dir + "/t7.h5", table);
    CHECK(x.labels == y.labels);
    CHECK(test::first_bit_mismatch(torch::tensor(x.values), torch::tensor(y.values)) == -1);
  }
  auto r = test::run_cli("report mechanism --results " + dir + "/runs --out " + dir + "/mechanism.md");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string md = read_text_file(dir + "/mechanism.md");
  CHECK(md.find("| tiny | linear_fc2 | ufp4 | 7 | ") != std::string::npos);  // Key Finding 2's row of the last step
  for (const char* section : {"## Key Finding 2", "## Figures 4-7 and 12", "## The scale's own bias", "## alpha of each GEMM operand",
                              "### alpha > 1: the endpoint bin", "## Over training", "## Provenance", "## linear_fc1's input: well behaved, as in the paper?",
                              "2 blocks with this family: too few for a slope over blocks", "## The chain, measured", "**Eq. 5's size.**",
                              "**Eq. 5's ranking.**",
                              "### The paper on GEMM outputs", "| tiny | ufp4 | linear_fc2/fwd_y | ",
                              "## The claims at a glance"})
    CHECK(md.find(section) != std::string::npos);
  CHECK(md.find("No step file holds a chain table") == std::string::npos);  // the chain's rows, not its absence
  CHECK(md.find("**tiny, ufp4** (step 7, 1 seed)") != std::string::npos);     // its point-by-point table
  CHECK(md.find("| " + p.run_id) == std::string::npos);  // ids are shown as code
  CHECK(md.find("`" + p.run_id + "`") != std::string::npos);
  auto again = test::run_cli("analyze capture " + m);
  CHECK(again.out.find("every step analysed, skipped") != std::string::npos);
  const std::string none = test::tiny_manifest(dir, "bf16", 4);
  auto bad = test::run_cli("analyze capture " + none);
  CHECK(bad.code == 2);
  CHECK(bad.out.find("[capture] steps is empty") != std::string::npos);
  // A BF16 run quantizes nothing: its two passes are one computation, so the chain is exact at every point. A MoE
  // run's experts (the grouped path) leave the chain measured and counted a linear per stage.
  for (const std::string& model : {std::string("tiny"), std::string("tiny-moe")}) {
    INFO(model);
    const std::string b = test::tiny_manifest(dir, "bf16", 4, "steps = 4\n[capture]\nsteps = [3]\nlayers = [\"layers.*\"]\ntokens = 0\n", model);
    REQUIRE(test::run_cli("analyze capture " + b).code == 0);
    const LabelledTable exact = read_labelled_table(test::planned(RunManifest::load(b)).capture.dir + "/step3.tensors.h5", "chain");
    REQUIRE(exact.rows() > 0);
    for (size_t i = 0; i < exact.rows(); ++i) {
      CHECK(exact.at(i, 0) == 1.0);
      CHECK(exact.at(i, 1) == 0.0);
      CHECK(exact.at(i, 2) == 1.0);
    }
  }
  // A step file is trusted by its content, not its name: another run's file in this run's capture folder is refused.
  {
    const std::string b = test::tiny_manifest(dir, "bf16", 4, "steps = 4\n[capture]\nsteps = [3]\nlayers = [\"layers.*\"]\ntokens = 0\n");
    write_text_atomically(p.capture.dir + "/step3.tensors.h5", read_text_file(test::planned(RunManifest::load(b)).capture.dir + "/step3.tensors.h5"));
    auto foreign = test::run_cli("analyze capture " + m);
    CHECK(foreign.code == 2);
    CHECK(foreign.out.find(p.capture.dir + "/step3.tensors.h5: a step file of run id") != std::string::npos);
    CHECK(foreign.out.find("(run id " + p.run_id + "); remove it to analyse the step again") != std::string::npos);
  }
  const std::string moe = test::tiny_manifest(dir, "ufp4", 4, "steps = 4\n[capture]\nsteps = [3]\nlayers = [\"layers.*\"]\ntokens = 0\n", "tiny-moe");
  REQUIRE(test::run_cli("analyze capture " + moe).code == 0);
  const RunPlan pm = test::planned(RunManifest::load(moe));
  const LabelledTable moe_chain = read_labelled_table(pm.capture.dir + "/step3.tensors.h5", "chain");
  REQUIRE(moe_chain.rows() == 2 * static_cast<size_t>(pm.model.n_layers + 3));
  CHECK(moe_chain.at(moe_chain.rows() - 6, 1) > 0);  // the stream after the last block moved
  const std::string late = test::tiny_manifest(dir, "bf16", 4, "steps = 4\n[capture]\nsteps = [9]\nlayers = [\"layers.*\"]\n");
  auto past = test::run_cli("analyze capture " + late);
  CHECK(past.code == 2);
  CHECK(past.out.find("[capture] steps: 9 is not a step of the run (allowed: 0 to 3)") != std::string::npos);
}
