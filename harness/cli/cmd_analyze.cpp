// `ufp4 analyze`: the shrinkage-bias measurements of the paper's §3 and §5.2.
//   bias     per-bin table of a grid (Eq. 2) and b_G(P) for densities, by integration and Monte Carlo
//   tensors  SQNR, Delta SQNR, alpha, bucket ratio of captured operands, and GEMM output SQNR
//   chain    signal attenuation through stacked quantized GEMMs (Eq. 5)
#include <chrono>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/analysis/analysis.h"
#include "harness/cli/cli.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/train/run_manifest.h"
#include "kernels/grid.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {


std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

QuantSpec analysis_spec(const Grid& g, bool rht) {
  QuantSpec s;
  s.grid = g;
  s.block = 16;  // the paper's 1x16 blocks with FP32 single-level scales, RTNE
  s.rht = rht ? 16 : 0;
  s.rht_seed = 1;
  return s;
}

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

int analyze_bias(const std::vector<std::string>& args) {
  std::string grid, densities, tensor, dataset, out;
  double max_fpx = 0, nu = 3;
  int block = 16;
  int64_t samples = 1 << 18;
  uint64_t seed = 1;
  po::options_description d("options");
  d.add_options()
      ("grid", po::value(&grid)->default_value("e2m1"), "e2m1, e1m2, int4, or magnitudes \"0,0.5,1,...\"")
      ("max-fpx", po::value(&max_fpx)->default_value(0), "cap of the e2m1 grid: 2, 3, 4 or 6")
      ("density", po::value(&densities)->default_value("uniform,gaussian,laplace,student-t"),
       "comma list of uniform, gaussian, laplace, student-t; \"none\" for the bin table only")
      ("nu", po::value(&nu)->default_value(3), "degrees of freedom of student-t")
      ("tensor", po::value(&tensor), "also the empirical density of a tensor (.npy, or .h5 with --dataset)")
      ("dataset", po::value(&dataset), "dataset inside --tensor's HDF5 file")
      ("block", po::value(&block)->default_value(16), "block size B of the max scaling")
      ("samples", po::value(&samples)->default_value(1 << 18), "Monte Carlo blocks (0: integration only)")
      ("seed", po::value(&seed)->default_value(1), "Monte Carlo seed")
      ("out", po::value(&out), "also write the results to this HDF5 file")
      ("json", po::bool_switch(), "machine-readable output");
  auto vm = parse_command("analyze bias", "[--grid G] [--density LIST] [--tensor FILE] [--json]", d, args);
  if (!vm) return 0;
  Grid g = Grid::parse(grid, max_fpx);
  std::vector<Density> ps;
  if (densities != "none")
    for (const auto& n : split_list(densities)) ps.push_back(Density::named(n, nu));
  if (!tensor.empty()) {
    ArrayF32 a = ends_with(tensor, ".npy") ? read_npy(tensor) : read_h5_f32(tensor, dataset);
    ps.push_back(Density::empirical(a.data));
  }
  struct Row {
    std::string density;
    bool rht;
    BiasMoments integ, mc;
    bool has_mc, ok;
  };
  std::vector<Row> rows;
  bool all_ok = true;
  const auto t0 = std::chrono::steady_clock::now();
  for (const auto& p : ps)
    for (bool rht : {false, true}) {
      // A count as it goes: a row takes seconds (integration, then 2^18 Monte Carlo blocks).
      log_info("analyze bias " + g.name() + ": " + std::to_string(rows.size() + 1) + " of " + std::to_string(2 * ps.size()) + " (" + p.label() +
               (rht ? ", H16" : ", no RHT") + ") at " + std::to_string(static_cast<int>(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count())) + " s");
      Row r{p.label(), rht, bias_by_integration(g, p, block, rht), {}, samples > 0, true};
      if (r.has_mc) {
        r.mc = bias_by_monte_carlo(g, p, block, rht, samples, seed);
        r.ok = agree(r.integ, r.mc);
        if (r.integ.note.empty()) all_ok = all_ok && r.ok;
      }
      rows.push_back(r);
    }
  std::vector<Bin> bins = g.bins();
  if ((*vm)["json"].as<bool>()) {
    std::cout << "{\"grid\": \"" << g.name() << "\", \"gmax\": " << g.gmax() << ", \"block\": " << block << ", \"bins\": [";
    for (size_t i = 0; i < bins.size(); ++i)
      std::cout << (i ? ", " : "") << "{\"level\": " << bins[i].level << ", \"left\": " << bins[i].left << ", \"right\": " << bins[i].right
                << ", \"bias\": " << bins[i].bias << "}";
    std::cout << "], \"densities\": [";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::cout << (i ? ", " : "") << "{\"density\": \"" << r.density << "\", \"rht\": " << (r.rht ? "true" : "false")
                << ", \"integration\": " << json_moments(r.integ);
      if (r.has_mc) std::cout << ", \"monte_carlo\": " << json_moments(r.mc) << ", \"agree\": " << (r.ok ? "true" : "false");
      std::cout << "}";
    }
    std::cout << "]}\n";
  } else {
    std::cout << g.describe() << "\n";
    std::cout << "Eq. 2: expected rounding error in the bin of level q under a locally uniform density = (l - r) / 2\n";
    std::printf("%10s %10s %10s %10s\n", "level", "l_i", "r_i", "bias");
    for (const Bin& b : bins) std::printf("%10.4g %10.4g %10.4g %10.4g\n", b.level, b.left, b.right, b.bias);
    if (!rows.empty()) {
      std::printf("\nShrinkage bias b_G(P) = E[q - t] under 1x%d block max scaling (grid units t = |x| / s), RTNE.\n"
                  "int: integration (+- quadrature error); MC: Monte Carlo (+- standard error); agree: |int - MC| <= err_int + 4 se_MC\n\n",
                  block);
      std::printf("%-34s %-4s %-4s %22s %10s %9s %9s  %s\n", "density", "RHT", "", "bias", "rel.bias", "alpha", "SQNR dB", "");
      for (const Row& r : rows) {
        auto line = [&](const char* tag, const BiasMoments& m, const std::string& verdict) {
          std::printf("%-34s %-4s %-4s %12.6f +- %7.1e %9.4f%% %9.5f %9.3f  %s\n", r.density.c_str(), r.rht ? "H16" : "I", tag, m.bias, m.bias_err,
                      100 * m.rel_bias, m.alpha, m.sqnr_db, verdict.c_str());
        };
        line("int", r.integ, r.integ.note);
        if (r.has_mc) line("MC", r.mc, !r.integ.note.empty() ? "(not compared: integration is a limit)" : r.ok ? "agree" : "DISAGREE");
      }
    }
  }
  if (!out.empty()) {
    H5Writer w(out);
    std::vector<float> m;
    std::string labels;
    for (const Row& r : rows)
      for (const BiasMoments* x : {&r.integ, &r.mc}) {
        if (x == &r.mc && !r.has_mc) continue;
        labels += r.density + "\t" + (r.rht ? "H16" : "I") + "\t" + (x == &r.integ ? "integration" : "monte_carlo") + "\n";
        for (double v : {x->bias, x->bias_err, x->rel_bias, x->alpha, x->alpha_err, x->nmse, x->nmse_err, x->sqnr_db}) m.push_back(static_cast<float>(v));
      }
    w.write_f32("bias", m.data(), {static_cast<int64_t>(m.size() / 8), 8});
    w.attr("rows", labels, "bias");
    w.attr("columns", std::string("bias,bias_err,rel_bias,alpha,alpha_err,nmse,nmse_err,sqnr_db"), "bias");
    std::vector<float> bt;
    for (const Bin& b : bins)
      for (float v : {b.level, b.left, b.right, b.bias}) bt.push_back(v);
    w.write_f32("bins", bt.data(), {static_cast<int64_t>(bins.size()), 4});
    w.attr("columns", std::string("level,left,right,bias"), "bins");
    w.attr("grid", g.name());
    w.attr("block", static_cast<int64_t>(block));
    write_provenance(w);
    w.commit();
  }
  if (!all_ok) throw RuntimeError("analyze bias: integration and Monte Carlo disagree beyond their stated errors (see DISAGREE rows)");
  return 0;
}

// ---- captured tensors ---------------------------------------------------------------------------

// A capture file from RUN: a capture_step*.h5 file, a capture folder (its last step), a run's
// results file (its sibling <run>.capture folder), or the manifest of that run.
std::string capture_file(const std::string& run_arg, int64_t step) {
  std::string run = run_arg;
  if (ends_with(run, ".toml")) {
    RunManifest m = RunManifest::load(run);
    run = m.out_dir + "/" + m.name + "-" + m.run_id() + ".h5";
  }
  std::string dir = run;
  if (!is_dir(run)) {
    if (!file_exists(run)) throw Error(run + ": no such file or folder (allowed: a capture_step*.h5 file, a .capture folder or a run's .h5)");
    if (run.find("capture_step") != std::string::npos) return run;
    dir = run.substr(0, run.size() - 3) + ".capture";
    if (!is_dir(dir)) throw Error(run + ": the run has no capture folder " + dir + " (set [capture] steps in its manifest)");
  }
  std::vector<std::string> files;
  walk_files(dir, ".h5", files);
  std::string best;
  int64_t best_step = -1;
  for (const auto& f : files) {
    size_t at = f.rfind("capture_step");
    if (at == std::string::npos) continue;
    int64_t s = std::atoll(f.c_str() + at + 12);
    if ((step < 0 && s > best_step) || s == step) best = f, best_step = s;
  }
  if (best.empty()) throw Error(dir + ": no capture_step" + (step < 0 ? std::string("*") : std::to_string(step)) + ".h5 in it");
  return best;
}

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
    size_t dot = name.rfind('.');
    out.push_back({name, dot == std::string::npos ? name : name.substr(dot + 1)});
  }
  return out;
}

// Eq. 2 for every bin of one tensor (harness/analysis: decompose_bias), flattened into its row of the
// "bins" dataset: for each grid level, then the block maxima, the six numbers of kBinColumns; a grid of
// fewer than 8 levels is padded with NaN at the end, so every row has 9 bins.
constexpr const char* kBinColumns =
    "9 bins a row (the grid's levels ascending, then the block maxima; NaN padding at the end): level,share,mean_error,eq2,bias_part,alpha_part";
void append_bins(const BiasDecomposition& d, std::vector<double>& out) {
  for (const auto& b : d.bins)
    for (double v : {b.level, b.share, b.mean_error, b.eq2, b.bias_contribution, b.alpha_contribution}) out.push_back(v);
  out.insert(out.end(), 6 * (9 - std::min<size_t>(9, d.bins.size())), NAN);
}

int analyze_tensors(const std::vector<std::string>& args) {
  std::string run, grids, out, device, layers;
  int64_t step = -1, tokens = 2048;
  po::options_description d("options");
  d.add_options()
      ("run", po::value(&run), "capture file, capture folder, a run's results .h5, or its manifest")
      ("grids", po::value(&grids)->default_value("e2m1,e1m2"), "comma list of grids")
      ("step", po::value(&step)->default_value(-1), "captured step (default: the last)")
      ("tokens", po::value(&tokens)->default_value(2048), "tokens of each activation used (a multiple of 16)")
      ("device", po::value(&device)->default_value("auto"), "auto, cpu or cuda")
      ("out", po::value(&out), "HDF5 output (default: <capture>.tensors.h5)");
  po::positional_options_description pos;
  pos.add("run", 1);
  auto vm = parse_command("analyze tensors", "RUN [--grids e2m1,e1m2] [--out FILE]", d, args, &pos);
  if (!vm) return 0;
  if (run.empty()) throw Error("analyze tensors: RUN is required (a capture file, capture folder or run results file)");
  if (tokens <= 0 || tokens % 16) throw Error("--tokens: " + std::to_string(tokens) + " is not allowed (allowed: a positive multiple of 16)");
  const std::string file = capture_file(run, step);
  if (out.empty()) out = file.substr(0, file.size() - 3) + ".tensors.h5";
  const torch::Device dev = pick_device(device);
  std::vector<Grid> gs;
  for (const auto& n : split_list(grids)) gs.push_back(Grid::parse(n));
  std::vector<CapturedLayer> ls = captured_layers(file);
  if (ls.empty()) throw Error(file + ": no captured operands (datasets <layer>/fprop.x/before)");
  auto attrs = read_h5_string_attrs(file);

  std::vector<float> tm, gm;
  std::vector<double> bm;  // per tensor row: Eq. 2 for every bin (append_bins)
  std::string trows, grows;
  size_t done = 0;
  for (const auto& L : ls) {
    torch::Tensor x = load(file, L.name + "/fprop.x/before", dev), w = load(file, L.name + "/fprop.w/before", dev),
                  dy = load(file, L.name + "/dgrad.dy/before", dev);
    const int64_t m = std::min<int64_t>(tokens, x.size(0) / 16 * 16);
    x = x.narrow(0, 0, m).contiguous();
    dy = dy.narrow(0, 0, m).contiguous();
    for (const Grid& g : gs)
      for (bool rht : {false, true}) {
        QuantSpec spec = analysis_spec(g, rht);
        const std::string tr = std::string(rht ? "H16" : "I");
        for (auto [tname, t] : std::vector<std::pair<std::string, torch::Tensor>>{{"fwd_x", x}, {"fwd_w", w}, {"bwd_dy", dy}}) {
          TensorMetrics tmx = tensor_metrics(t, spec);
          trows += L.name + "\t" + L.family + "\t" + tname + "\t" + g.name() + "\t" + tr + "\n";
          for (double v : {tmx.nmse, tmx.sqnr_db, tmx.alpha, tmx.bucket_ratio}) tm.push_back(static_cast<float>(v));
          append_bins(decompose_bias(t, spec), bm);
        }
        GemmSqnr s = gemm_sqnr(x, w, dy, spec);
        for (auto [gname, v] : std::vector<std::pair<std::string, double>>{{"fwd_y", s.fwd_y}, {"bwd_dx", s.bwd_dx}, {"bwd_dw", s.bwd_dw}}) {
          grows += L.name + "\t" + L.family + "\t" + gname + "\t" + g.name() + "\t" + tr + "\n";
          gm.push_back(static_cast<float>(v));
        }
      }
    log_info("analyze tensors: " + std::to_string(++done) + "/" + std::to_string(ls.size()) + " " + L.name);
  }
  H5Writer wr(out);
  wr.write_f32("tensors", tm.data(), {static_cast<int64_t>(tm.size() / 4), 4});
  wr.attr("rows", trows, "tensors");
  wr.attr("columns", std::string("nmse,sqnr_db,alpha,bucket_ratio"), "tensors");
  const int64_t nrows = static_cast<int64_t>(tm.size() / 4);
  wr.write_f64("bins", bm.data(), {nrows, 9 * 6});
  wr.attr("rows", trows, "bins");
  wr.attr("columns", std::string(kBinColumns), "bins");
  wr.write_f32("gemms", gm.data(), {static_cast<int64_t>(gm.size()), 1});
  wr.attr("rows", grows, "gemms");
  wr.attr("columns", std::string("sqnr_db"), "gemms");
  wr.attr("capture", file);
  wr.attr("capture_step", static_cast<int64_t>(read_h5_double_attr(file, "step")));
  wr.attr("capture_git_commit", attrs["git_commit"]);
  wr.attr("capture_device", attrs["device"]);
  wr.attr("tokens", tokens);
  wr.attr("spec", std::string("1x16 blocks, FP32 single-level max scaling, RTNE; H16 = RHT-16 along each GEMM's reduction dimension"));
  write_provenance(wr);
  wr.commit();

  // Summary: per family and tensor, mean over layers.
  std::map<std::string, std::vector<double>> agg;  // "family/tensor grid A" -> sqnr values
  std::istringstream in(trows);
  size_t i = 0;
  for (std::string line; std::getline(in, line); ++i) {
    std::stringstream ls2(line);
    std::string layer, fam, tn, gname, tr;
    std::getline(ls2, layer, '\t');
    std::getline(ls2, fam, '\t');
    std::getline(ls2, tn, '\t');
    std::getline(ls2, gname, '\t');
    std::getline(ls2, tr, '\t');
    agg[fam + "/" + tn + " " + gname + " " + tr].push_back(tm[i * 4 + 1]);
  }
  std::printf("%-34s %10s\n", "tensor grid transform", "SQNR dB (mean over layers)");
  for (const auto& [k, v] : agg) {
    double s = 0;
    for (double x : v) s += x;
    std::printf("%-34s %10.3f\n", k.c_str(), s / static_cast<double>(v.size()));
  }
  std::cout << "written to " << out << "\n";
  return 0;
}

// ---- attenuation chain --------------------------------------------------------------------------

int analyze_chain(const std::vector<std::string>& args) {
  std::string capture, grids, out, device, input;
  int64_t depth = 12, dim = 768, tokens = 2048;
  uint64_t seed = 1;
  double nu = 3;
  po::options_description d("options");
  d.add_options()
      ("capture", po::value(&capture), "chain the captured linear_proj weights (square) of this capture; default: random weights")
      ("input", po::value(&input)->default_value("student-t"), "input rows: gaussian, student-t (heavy-tailed), or captured")
      ("nu", po::value(&nu)->default_value(3), "degrees of freedom of the student-t input")
      ("depth", po::value(&depth)->default_value(12), "number K of stacked GEMMs")
      ("dim", po::value(&dim)->default_value(768), "width of random weights")
      ("tokens", po::value(&tokens)->default_value(2048), "rows of the input")
      ("grids", po::value(&grids)->default_value("e2m1,e1m2"), "comma list of grids")
      ("seed", po::value(&seed)->default_value(1), "seed of random weights and inputs")
      ("device", po::value(&device)->default_value("auto"), "auto, cpu or cuda")
      ("out", po::value(&out), "also write the results to this HDF5 file");
  auto vm = parse_command("analyze chain", "[--capture FILE] [--depth K] [--grids LIST] [--out FILE]", d, args);
  if (!vm) return 0;
  if (depth < 1 || depth > 1000) throw Error("--depth: " + std::to_string(depth) + " is not allowed (allowed: 1..1000)");
  if (input != "gaussian" && input != "student-t" && input != "captured")
    throw Error("--input: '" + input + "' is not allowed (allowed: gaussian, student-t, captured)");
  const torch::Device dev = pick_device(device);
  torch::manual_seed(seed);
  std::vector<torch::Tensor> ws;
  torch::Tensor x0;
  std::string source = "random Gaussian weights / sqrt(d)";
  if (!capture.empty()) {
    const std::string file = capture_file(capture, -1);
    std::vector<torch::Tensor> proj;
    for (const auto& L : captured_layers(file))
      if (L.family == "linear_proj") proj.push_back(load(file, L.name + "/fprop.w/before", dev));
    if (proj.empty()) throw Error(file + ": no captured linear_proj weights to chain");
    for (int64_t k = 0; k < depth; ++k) ws.push_back(proj[static_cast<size_t>(k) % proj.size()]);
    dim = proj[0].size(1);
    source = "captured linear_proj weights of " + std::to_string(proj.size()) + " layers (cycled), " + file;
    if (input == "captured") {
      for (const auto& L : captured_layers(file))
        if (L.family == "linear_proj") {
          x0 = load(file, L.name + "/fprop.x/before", dev);
          break;
        }
      x0 = x0.narrow(0, 0, std::min<int64_t>(tokens, x0.size(0)));
    }
  } else {
    if (input == "captured") throw Error("--input: captured needs --capture");
    for (int64_t k = 0; k < depth; ++k) ws.push_back(torch::randn({dim, dim}, torch::TensorOptions().device(dev)) / std::sqrt(static_cast<double>(dim)));
  }
  if (!x0.defined()) {
    torch::Tensor z = torch::randn({tokens, dim}, torch::TensorOptions().device(dev));
    if (input == "student-t") {  // z / sqrt(chi2_nu / nu) with chi2 as a sum of squares needs integer nu; use Gamma
      torch::Tensor g = torch::_standard_gamma(torch::full({tokens, dim}, nu / 2, torch::TensorOptions().device(dev))) * 2;
      z = z / torch::sqrt(g / nu);
    }
    x0 = z;
  }
  std::printf("Signal attenuation through %lld stacked quantized GEMMs (1x16 FP32 max scaling, RTNE); weights: %s; input: %s\n",
              static_cast<long long>(depth), source.c_str(), input.c_str());
  std::printf("eta_K: projection of the quantized chain's output on the exact output; predicted: exp(-sum delta_k) (Eq. 5)\n\n");
  std::printf("%-8s %-4s %6s %12s %12s %10s\n", "grid", "A", "K", "eta_K", "predicted", "delta_K");
  std::unique_ptr<H5Writer> w;
  if (!out.empty()) w = std::make_unique<H5Writer>(out);
  for (const auto& gname : split_list(grids)) {
    Grid g = Grid::parse(gname);
    for (bool rht : {false, true}) {
      std::vector<ChainPoint> pts = attenuation_chain(x0, ws, analysis_spec(g, rht));
      std::vector<float> rows;
      for (const auto& p : pts) {
        if (p.k == 1 || p.k == static_cast<int>(depth) || p.k % 4 == 0)
          std::printf("%-8s %-4s %6d %12.6f %12.6f %10.6f\n", g.name().c_str(), rht ? "H16" : "I", p.k, p.eta, p.predicted, p.delta);
        for (double v : {static_cast<double>(p.k), p.eta, p.predicted, p.delta}) rows.push_back(static_cast<float>(v));
      }
      if (w) {
        const std::string ds = "chain/" + g.name() + "/" + (rht ? "H16" : "I");
        w->write_f32(ds, rows.data(), {static_cast<int64_t>(pts.size()), 4});
        w->attr("columns", std::string("k,eta,predicted,delta"), ds);
      }
    }
  }
  if (w) {
    w->attr("weights", source);
    w->attr("input", input);
    w->attr("depth", depth);
    w->attr("tokens", tokens);
    write_provenance(*w);
    w->commit();
    std::cout << "written to " << out << "\n";
  }
  return 0;
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
  const std::string allowed = "bias, tensors, chain";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: ufp4 analyze <analysis> [options]\n\nanalyses:\n"
              << "  bias      per-bin bias of a grid (Eq. 2) and b_G(P) for densities, by integration and Monte Carlo\n"
              << "  tensors   SQNR, Delta SQNR (Eq. 7), alpha (Eq. 3), bucket ratio (Eq. 6) and GEMM output SQNR of captured operands\n"
              << "  chain     signal attenuation through stacked quantized GEMMs (Eq. 5)\n";
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "bias") return analyze_bias(rest);
  if (args[0] == "tensors") return analyze_tensors(rest);
  if (args[0] == "chain") return analyze_chain(rest);
  throw Error("analyze: unknown analysis '" + args[0] + "' (allowed: " + allowed + ")");
}

}  // namespace ufp4
