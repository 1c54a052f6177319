#include "harness/analysis/analysis_files.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/io/array_io.h"
#include "harness/analysis/tensor_tables.h"
#include "harness/io/labelled_table.h"
#include "harness/io/provenance.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

// ---- bias ---------------------------------------------------------------------------------------

std::string json_moments(const BiasMoments& m) {
  char b[512];
  std::snprintf(b, sizeof b,
                "{\"bias\": %.10g, \"bias_err\": %.3g, \"rel_bias\": %.10g, \"rel_bias_err\": %.3g, \"alpha\": %.10g, \"alpha_err\": %.3g, "
                "\"nmse\": %.10g, \"nmse_err\": %.3g, \"sqnr_db\": %.6f, \"note\": \"%s\"}",
                m.bias, m.bias_err, m.rel_bias, m.rel_bias_err, m.alpha, m.alpha_err, m.nmse, m.nmse_err, m.sqnr_db, m.note.c_str());
  return b;
}

// Within the stated errors: the quadrature estimate plus 4 Monte Carlo standard errors.
bool agree(const BiasMoments& i, const BiasMoments& m) {
  auto ok = [](double a, double ea, double b, double eb) { return std::fabs(a - b) <= ea + 4 * eb + 1e-12; };
  return ok(i.bias, i.bias_err, m.bias, m.bias_err) && ok(i.alpha, i.alpha_err, m.alpha, m.alpha_err) && ok(i.nmse, i.nmse_err, m.nmse, m.nmse_err);
}

struct BiasRow {
  std::string density;
  bool rht;
  BiasMoments integ, mc;
  bool has_mc, ok;
};

// Every density without and with RHT-16; `all_ok`: every row whose integration is exact agrees.
std::vector<BiasRow> bias_rows(const BiasAnalysisOptions& opt, bool& all_ok) {
  const Grid& g = opt.grid;
  std::vector<BiasRow> rows;
  all_ok = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& p : opt.densities)
    for (bool rht : {false, true}) {
      // A count as it goes: a row takes seconds (integration, then 2^18 Monte Carlo blocks).
      log_info("analyze bias " + g.name() + ": " + std::to_string(rows.size() + 1) + " of " + std::to_string(2 * opt.densities.size()) + " (" + p.label() +
               (rht ? ", H16" : ", no RHT") + ") at " + std::to_string(static_cast<int>(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())) + " s");
      BiasRow r{p.label(), rht, bias_by_integration(g, p, opt.block, rht), {}, opt.samples > 0, true};
      if (r.has_mc) {
        r.mc = bias_by_monte_carlo(g, p, opt.block, rht, opt.samples, opt.seed);
        r.ok = agree(r.integ, r.mc);
        if (r.integ.note.empty()) all_ok = all_ok && r.ok;
      }
      rows.push_back(r);
    }
  return rows;
}

void print_bias_json(const BiasAnalysisOptions& opt, const std::vector<Bin>& bins, const std::vector<BiasRow>& rows) {
  std::cout << "{\"grid\": \"" << opt.grid.name() << "\", \"gmax\": " << opt.grid.gmax() << ", \"block\": " << opt.block << ", \"bins\": [";
  for (size_t i = 0; i < bins.size(); ++i)
    std::cout << (i ? ", " : "") << "{\"level\": " << bins[i].level << ", \"left\": " << bins[i].left << ", \"right\": " << bins[i].right
              << ", \"bias\": " << bins[i].bias << "}";
  std::cout << "], \"densities\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const BiasRow& r = rows[i];
    std::cout << (i ? ", " : "") << "{\"density\": \"" << r.density << "\", \"rht\": " << (r.rht ? "true" : "false")
              << ", \"integration\": " << json_moments(r.integ);
    if (r.has_mc) std::cout << ", \"monte_carlo\": " << json_moments(r.mc) << ", \"agree\": " << (r.ok ? "true" : "false");
    std::cout << "}";
  }
  std::cout << "]}\n";
}

void print_bias_table(const BiasAnalysisOptions& opt, const std::vector<Bin>& bins, const std::vector<BiasRow>& rows) {
  std::cout << opt.grid.describe() << "\n";
  std::cout << "Eq. 2: expected rounding error in the bin of level q under a locally uniform density = (l - r) / 2\n";
  std::printf("%10s %10s %10s %10s\n", "level", "l_i", "r_i", "bias");
  for (const Bin& b : bins) std::printf("%10.4g %10.4g %10.4g %10.4g\n", b.level, b.left, b.right, b.bias);
  if (rows.empty()) return;
  std::printf("\nShrinkage bias b_G(P) = E[q - t] under 1x%d block max scaling (grid units t = |x| / s), RTNE.\n"
              "int: integration (+- quadrature error); MC: Monte Carlo (+- standard error); agree: |int - MC| <= err_int + 4 se_MC\n\n",
              opt.block);
  std::printf("%-34s %-4s %-4s %22s %10s %9s %9s  %s\n", "density", "RHT", "", "bias", "rel.bias", "alpha", "SQNR dB", "");
  for (const BiasRow& r : rows) {
    auto line = [&](const char* tag, const BiasMoments& m, const std::string& verdict) {
      std::printf("%-34s %-4s %-4s %12.6f +- %7.1e %9.4f%% %9.5f %9.3f  %s\n", r.density.c_str(), r.rht ? "H16" : "I", tag, m.bias, m.bias_err,
                  100 * m.rel_bias, m.alpha, m.sqnr_db, verdict.c_str());
    };
    line("int", r.integ, r.integ.note);
    if (r.has_mc) line("MC", r.mc, !r.integ.note.empty() ? "(not compared: integration is a limit)" : r.ok ? "agree" : "DISAGREE");
  }
}

void write_bias_file(const BiasAnalysisOptions& opt, const std::vector<Bin>& bins, const std::vector<BiasRow>& rows) {
  H5Writer w(opt.out);
  LabelledTable bias(8, "bias,bias_err,rel_bias,alpha,alpha_err,nmse,nmse_err,sqnr_db");
  for (const BiasRow& r : rows)
    for (const BiasMoments* x : {&r.integ, &r.mc}) {
      if (x == &r.mc && !r.has_mc) continue;
      // As FP32, as the committed bias files were written.
      std::vector<double> v;
      for (double y : {x->bias, x->bias_err, x->rel_bias, x->alpha, x->alpha_err, x->nmse, x->nmse_err, x->sqnr_db}) v.push_back(static_cast<float>(y));
      bias.add({r.density, r.rht ? "H16" : "I", x == &r.integ ? "integration" : "monte_carlo"}, v);
    }
  write_labelled_table(w, "bias", bias);
  std::vector<float> bt;
  for (const Bin& b : bins)
    for (float v : {b.level, b.left, b.right, b.bias}) bt.push_back(v);
  w.write_f32("bins", bt.data(), {static_cast<int64_t>(bins.size()), 4});
  w.attr("columns", std::string("level,left,right,bias"), "bins");
  w.attr("grid", opt.grid.name());
  w.attr("block", static_cast<int64_t>(opt.block));
  write_provenance(w);
  w.commit();
}

// ---- captured tensors ---------------------------------------------------------------------------

torch::Tensor load(const std::string& file, const std::string& ds, const torch::Device& dev) {
  ArrayF32 a = read_h5_f32(file, ds);
  return torch::from_blob(a.data.data(), a.shape, torch::kFloat32).clone().to(dev);
}

struct CapturedLayer {
  std::string name, family;
};

std::vector<CapturedLayer> captured_layers(const std::string& file) {
  std::vector<CapturedLayer> out;
  for (const auto& ds : list_h5_datasets(file)) {
    const std::string suffix = "/fprop.x/before";
    if (!ends_with(ds, suffix)) continue;
    std::string name = ds.substr(0, ds.size() - suffix.size());
    out.push_back({name, layer_family(name)});
  }
  return out;
}

// A layer's unrotated operand from a capture file: "raw" where the recipe rotated that GEMM, else "before".
torch::Tensor load_operand(const std::string& file, const std::vector<std::string>& datasets, const std::string& key, const torch::Device& dev) {
  const bool rotated = std::find(datasets.begin(), datasets.end(), key + "/raw") != datasets.end();
  return load(file, key + (rotated ? "/raw" : "/before"), dev);
}

// One layer's operands (x and dy cut to `tokens` rows) under every grid, without and with RHT-16.
void measure_captured_layer(const std::string& file, const std::vector<std::string>& datasets, const CapturedLayer& L, const TensorsAnalysisOptions& opt,
                            TensorTables& t) {
  torch::Tensor x = load_operand(file, datasets, L.name + "/fprop.x", opt.device), w = load_operand(file, datasets, L.name + "/fprop.w", opt.device),
                dy = load_operand(file, datasets, L.name + "/dgrad.dy", opt.device);
  const int64_t m = std::min<int64_t>(opt.tokens, x.size(0) / 16 * 16);
  measure_layer(L.name, L.family, x.narrow(0, 0, m).contiguous(), w, dy.narrow(0, 0, m).contiguous(), opt.grids, t);
}

void write_tensors_file(const TensorsAnalysisOptions& opt, const TensorTables& t, std::map<std::string, std::string>& capture_attrs) {
  const std::string& file = opt.capture;
  H5Writer wr(opt.out);
  write_tensor_tables(wr, t);
  wr.attr("capture", file);
  wr.attr("capture_step", static_cast<int64_t>(read_h5_double_attr(file, "step")));
  wr.attr("capture_git_commit", capture_attrs["git_commit"]);
  wr.attr("capture_device", capture_attrs["device"]);
  wr.attr("tokens", opt.tokens);
  wr.attr("spec", std::string("1x16 blocks, FP32 single-level max scaling, RTNE; H16 = RHT-16 along each GEMM's reduction dimension"));
  write_provenance(wr);
  wr.commit();
}

// Summary: per family and tensor, mean over layers.
void print_tensors_summary(const TensorTables& t) {
  std::map<std::string, std::vector<double>> agg;  // "family/tensor grid A" -> sqnr values
  for (size_t i = 0; i < t.tensors.rows(); ++i) {
    const auto& l = t.tensors.labels[i];  // layer, family, tensor, grid, transform
    agg[l[1] + "/" + l[2] + " " + l[3] + " " + l[4]].push_back(static_cast<float>(t.tensors.at(i, 1)));
  }
  std::printf("%-34s %10s\n", "tensor grid transform", "SQNR dB (mean over layers)");
  for (const auto& [k, v] : agg) {
    double s = 0;
    for (double x : v) s += x;
    std::printf("%-34s %10.3f\n", k.c_str(), s / static_cast<double>(v.size()));
  }
}

// ---- attenuation chain --------------------------------------------------------------------------

// The weights to chain and what they are; x0 only when the input is captured.
struct Chain {
  std::vector<torch::Tensor> weights;
  torch::Tensor x0;
  std::string source = "random Gaussian weights / sqrt(d)";
  int64_t dim = 0;
};

Chain captured_chain(const ChainAnalysisOptions& opt) {
  const std::string& file = opt.capture;
  const torch::Device& dev = opt.device;
  Chain c;
  std::vector<torch::Tensor> proj;
  for (const auto& L : captured_layers(file))
    if (L.family == "linear_proj") proj.push_back(load(file, L.name + "/fprop.w/before", dev));
  if (proj.empty()) throw Error(file + ": no captured linear_proj weights to chain");
  for (int64_t k = 0; k < opt.depth; ++k) c.weights.push_back(proj[static_cast<size_t>(k) % proj.size()]);
  c.dim = proj[0].size(1);
  c.source = "captured linear_proj weights of " + std::to_string(proj.size()) + " layers (cycled), " + file;
  if (opt.input == "captured") {
    for (const auto& L : captured_layers(file))
      if (L.family == "linear_proj") {
        c.x0 = load(file, L.name + "/fprop.x/before", dev);
        break;
      }
    c.x0 = c.x0.narrow(0, 0, std::min<int64_t>(opt.tokens, c.x0.size(0)));
  }
  return c;
}

Chain random_chain(const ChainAnalysisOptions& opt) {
  if (opt.input == "captured") throw Error("--input: captured needs --capture");
  Chain c;
  c.dim = opt.dim;
  for (int64_t k = 0; k < opt.depth; ++k)
    c.weights.push_back(torch::randn({c.dim, c.dim}, torch::TensorOptions().device(opt.device)) / std::sqrt(static_cast<double>(c.dim)));
  return c;
}

torch::Tensor random_input(const ChainAnalysisOptions& opt, int64_t dim) {
  torch::Tensor z = torch::randn({opt.tokens, dim}, torch::TensorOptions().device(opt.device));
  if (opt.input == "student-t") {  // z / sqrt(chi2_nu / nu) with chi2 as a sum of squares needs integer nu; use Gamma
    torch::Tensor g = torch::_standard_gamma(torch::full({opt.tokens, dim}, opt.nu / 2, torch::TensorOptions().device(opt.device))) * 2;
    z = z / torch::sqrt(g / opt.nu);
  }
  return z;
}

// One grid and transform: its rows printed (k = 1, every 4th, the last) and written to `w` when given.
void chain_rows(const Chain& c, const Grid& g, bool rht, int64_t depth, double residual, H5Writer* w) {
  std::vector<ChainPoint> pts = attenuation_chain(c.x0, c.weights, analysis_spec(g, rht), residual);
  std::vector<float> rows;
  for (const auto& p : pts) {
    if (p.k == 1 || p.k == static_cast<int>(depth) || p.k % 4 == 0) {
      std::printf("%-8s %-4s %6d %12.6f %12.6f %10.6f", g.name().c_str(), rht ? "H16" : "I", p.k, p.eta, p.predicted, p.delta);
      if (residual > 0) std::printf(" %18.6f", p.predicted_residual);
      std::printf("\n");
    }
    for (double v : {static_cast<double>(p.k), p.eta, p.predicted, p.delta}) rows.push_back(static_cast<float>(v));
  }
  if (w) {
    const std::string ds = "chain/" + g.name() + "/" + (rht ? "H16" : "I");
    w->write_f32(ds, rows.data(), {static_cast<int64_t>(pts.size()), 4});
    w->attr("columns", std::string("k,eta,predicted,delta"), ds);
    if (residual > 0) {  // apart, so that every chain file's rows keep their four columns
      std::vector<float> diluted;
      for (const auto& p : pts) diluted.push_back(static_cast<float>(p.k)), diluted.push_back(static_cast<float>(p.predicted_residual));
      const std::string rs = "chain_residual/" + g.name() + "/" + (rht ? "H16" : "I");
      w->write_f32(rs, diluted.data(), {static_cast<int64_t>(pts.size()), 2});
      w->attr("columns", std::string("k,predicted_residual"), rs);
    }
  }
}

}  // namespace

Density tensor_density(const std::string& file, const std::string& dataset) {
  ArrayF32 a = ends_with(file, ".npy") ? read_npy(file) : read_h5_f32(file, dataset);
  return Density::empirical(a.data);
}

void run_bias_analysis(const BiasAnalysisOptions& opt) {
  bool all_ok = true;
  const std::vector<BiasRow> rows = bias_rows(opt, all_ok);
  const std::vector<Bin> bins = opt.grid.bins();
  if (opt.json) print_bias_json(opt, bins, rows);
  else print_bias_table(opt, bins, rows);
  if (!opt.out.empty()) write_bias_file(opt, bins, rows);
  if (!all_ok) throw RuntimeError("analyze bias: integration and Monte Carlo disagree beyond their stated errors (see DISAGREE rows)");
}

void run_tensors_analysis(const TensorsAnalysisOptions& opt) {
  const std::string& file = opt.capture;
  std::vector<CapturedLayer> ls = captured_layers(file);
  const std::vector<std::string> datasets = list_h5_datasets(file);
  if (ls.empty()) throw Error(file + ": no captured operands (datasets <layer>/fprop.x/before)");
  auto attrs = read_h5_string_attrs(file);
  TensorTables t;
  size_t done = 0;
  for (const auto& L : ls) {
    measure_captured_layer(file, datasets, L, opt, t);
    log_info("analyze tensors: " + std::to_string(++done) + "/" + std::to_string(ls.size()) + " " + L.name);
  }
  write_tensors_file(opt, t, attrs);
  print_tensors_summary(t);
  std::cout << "written to " << opt.out << "\n";
}

void run_chain_analysis(const ChainAnalysisOptions& opt) {
  torch::manual_seed(opt.seed);
  Chain c = opt.capture.empty() ? random_chain(opt) : captured_chain(opt);
  if (!c.x0.defined()) c.x0 = random_input(opt, c.dim);
  std::printf("Signal attenuation through %lld stacked quantized GEMMs (1x16 FP32 max scaling, RTNE); weights: %s; input: %s\n",
              static_cast<long long>(opt.depth), c.source.c_str(), opt.input.c_str());
  std::printf("eta_K: projection of the quantized chain's output on the exact output; predicted: exp(-sum delta_k) (Eq. 5)\n\n");
  if (opt.residual > 0)
    std::printf("A residual stream, branch gain %g: each branch carries w = %.4f of the stream's energy if branch and stream are uncorrelated "
                "(random weights); predicted_residual: exp(-w sum delta_k)\n\n",
                opt.residual, opt.residual * opt.residual / (1 + opt.residual * opt.residual));
  std::printf("%-8s %-4s %6s %12s %12s %10s%s\n", "grid", "A", "K", "eta_K", "predicted", "delta_K", opt.residual > 0 ? " predicted_residual" : "");
  std::unique_ptr<H5Writer> w;
  if (!opt.out.empty()) w = std::make_unique<H5Writer>(opt.out);
  for (const auto& gname : opt.grids) {
    Grid g = Grid::parse(gname);
    for (bool rht : {false, true}) chain_rows(c, g, rht, opt.depth, opt.residual, w.get());
  }
  if (w) {
    w->attr("weights", c.source);
    w->attr("input", opt.input);
    w->attr("residual_branch_gain", opt.residual);
    w->attr("depth", opt.depth);
    w->attr("tokens", opt.tokens);
    write_provenance(*w);
    w->commit();
    std::cout << "written to " << opt.out << "\n";
  }
}

}  // namespace ufp4
