// `ufp4 analyze`: the shrinkage-bias measurements of the paper's §3 and §5.2.
//   bias     per-bin table of a grid (Eq. 2) and b_G(P) for densities, by integration and Monte Carlo
//   tensors  SQNR, Delta SQNR, alpha, bucket ratio of captured operands, and GEMM output SQNR
//   capture  the same on the operands of training runs, analysed as they train
//   chain    signal attenuation through stacked quantized GEMMs (Eq. 5)
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/text.h"
#include "harness/analysis/analysis_files.h"
#include "harness/campaign/capture_analysis.h"
#include "harness/cli/cli.h"
#include "harness/plan/run_manifest.h"
#include "harness/plan/run_plan.h"
#include "kernels/quantize/grid.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

int analyze_bias(const std::vector<std::string>& args) {
  std::string grid, densities, tensor, dataset;
  double max_fpx = 0, nu = 3;
  BiasAnalysisOptions opt;
  po::options_description d("options");
  d.add_options()
      ("grid", po::value(&grid)->default_value("e2m1"), (Grid::builtin_list(true) + ", or magnitudes \"0,0.5,1,...\"").c_str())
      ("max-fpx", po::value(&max_fpx)->default_value(0), "cap of the e2m1 grid: 2, 3, 4 or 6")
      ("density", po::value(&densities)->default_value("uniform,gaussian,laplace,student-t"),
       "comma list of uniform, gaussian, laplace, student-t; \"none\" for the bin table only")
      ("nu", po::value(&nu)->default_value(3), "degrees of freedom of student-t")
      ("tensor", po::value(&tensor), "also the empirical density of a tensor (.npy, or .h5 with --dataset)")
      ("dataset", po::value(&dataset), "dataset inside --tensor's HDF5 file")
      ("block", po::value(&opt.block)->default_value(16), "block size B of the max scaling")
      ("samples", po::value(&opt.samples)->default_value(1 << 18), "Monte Carlo blocks (0: integration only)")
      ("seed", po::value(&opt.seed)->default_value(1), "Monte Carlo seed")
      ("out", po::value(&opt.out), "also write the results to this HDF5 file")
      ("json", po::bool_switch(&opt.json), "machine-readable output");
  auto vm = parse_command("analyze bias", "[--grid G] [--density LIST] [--tensor FILE] [--json]", d, args);
  if (!vm) return 0;
  opt.grid = Grid::parse(grid, max_fpx);
  if (densities != "none")
    for (const auto& n : split(densities, ',', /*skip_empty=*/true)) opt.densities.push_back(Density::named(n, nu));
  if (!tensor.empty()) opt.densities.push_back(tensor_density(tensor, dataset));
  run_bias_analysis(opt);
  return 0;
}

// ---- captured tensors ---------------------------------------------------------------------------

// A capture file from RUN: a capture_step*.h5 file, a capture folder (its last step), a run's
// results file (its sibling <run>.capture folder), or the manifest of that run.
std::string capture_file(const std::string& run_arg, int64_t step) {
  std::string run = run_arg;
  if (ends_with(run, ".toml")) {
    run = plan_run(RunManifest::load(run)).results_path;
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

int analyze_tensors(const std::vector<std::string>& args) {
  std::string run, grids, device;
  int64_t step = -1;
  TensorsAnalysisOptions opt;
  po::options_description d("options");
  d.add_options()
      ("run", po::value(&run), "capture file, capture folder, a run's results .h5, or its manifest")
      ("grids", po::value(&grids)->default_value("e2m1,e1m2"), "comma list of grids")
      ("step", po::value(&step)->default_value(-1), "captured step (default: the last)")
      ("tokens", po::value(&opt.tokens)->default_value(2048), "tokens of each activation used (a multiple of 16)")
      ("device", po::value(&device)->default_value("auto"), "auto, cpu or cuda")
      ("out", po::value(&opt.out), "HDF5 output (default: <capture>.tensors.h5)");
  po::positional_options_description pos;
  pos.add("run", 1);
  auto vm = parse_command("analyze tensors", "RUN [--grids e2m1,e1m2] [--out FILE]", d, args, &pos);
  if (!vm) return 0;
  if (run.empty()) throw Error("analyze tensors: RUN is required (a capture file, capture folder or run results file)");
  if (opt.tokens <= 0 || opt.tokens % 16) throw Error("--tokens: " + std::to_string(opt.tokens) + " is not allowed (allowed: a positive multiple of 16)");
  opt.capture = capture_file(run, step);
  if (opt.out.empty()) opt.out = opt.capture.substr(0, opt.capture.size() - 3) + ".tensors.h5";
  opt.device = pick_device(device);
  for (const auto& n : split(grids, ',', /*skip_empty=*/true)) opt.grids.push_back(Grid::parse(n));
  run_tensors_analysis(opt);
  return 0;
}

// ---- operands of training runs, analysed as they train ----------------------------------------

int analyze_capture(const std::vector<std::string>& args) {
  std::vector<std::string> manifests;
  std::string grids, shard;
  CaptureAnalysisOptions opt;
  po::options_description d("options");
  d.add_options()
      ("manifest", po::value(&manifests)->multitoken(), "run manifests with [capture] steps (sweeps expanded)")
      ("grids", po::value(&grids)->default_value("e2m1,e1m2"), "comma list of analysis grids")
      ("device", po::value(&opt.device), "auto, cpu or cuda (default: the manifests')")
      ("force", po::bool_switch(&opt.force), "analyse again where the step files exist")
      ("shard", po::value(&shard), "I/N: the runs whose index i has i % N == I (one process a GPU; default 0/1)");
  po::positional_options_description pos;
  pos.add("manifest", -1);
  auto vm = parse_command("analyze capture", "MANIFEST... [--grids e2m1,e1m2] [--shard I/N] [--force]", d, args, &pos);
  if (!vm) return 0;
  if (manifests.empty()) throw Error("analyze capture: MANIFEST is required (run manifests with [capture] steps)");
  if (!shard.empty()) {
    const auto parts = split(shard, '/');
    char* end = nullptr;
    if (parts.size() == 2) opt.shard = static_cast<int>(std::strtol(parts[0].c_str(), &end, 10)), opt.shards = static_cast<int>(std::strtol(parts[1].c_str(), &end, 10));
    if (parts.size() != 2 || opt.shards < 1 || opt.shard < 0 || opt.shard >= opt.shards)
      throw Error("--shard: '" + shard + "' is not allowed (allowed: I/N with 0 <= I < N)");
  }
  opt.manifests = manifests;
  for (const auto& n : split(grids, ',', /*skip_empty=*/true)) opt.grids.push_back(Grid::parse(n));
  for (const auto& f : run_capture_analysis(opt)) std::cout << f << "\n";
  return 0;
}

// ---- attenuation chain --------------------------------------------------------------------------

int analyze_chain(const std::vector<std::string>& args) {
  std::string capture, grids, device;
  ChainAnalysisOptions opt;
  po::options_description d("options");
  d.add_options()
      ("capture", po::value(&capture), "chain the captured linear_proj weights (square) of this capture; default: random weights")
      ("input", po::value(&opt.input)->default_value("student-t"), "input rows: gaussian, student-t (heavy-tailed), or captured")
      ("nu", po::value(&opt.nu)->default_value(3), "degrees of freedom of the student-t input")
      ("depth", po::value(&opt.depth)->default_value(12), "number K of stacked GEMMs")
      ("dim", po::value(&opt.dim)->default_value(768), "width of random weights")
      ("tokens", po::value(&opt.tokens)->default_value(2048), "rows of the input")
      ("grids", po::value(&grids)->default_value("e2m1,e1m2"), "comma list of grids")
      ("seed", po::value(&opt.seed)->default_value(1), "seed of random weights and inputs")
      ("residual", po::value(&opt.residual)->default_value(0), "a residual stream x + g Q(x) Q(W)^T with this branch gain g; 0: the serial chain")
      ("device", po::value(&device)->default_value("auto"), "auto, cpu or cuda")
      ("out", po::value(&opt.out), "also write the results to this HDF5 file");
  auto vm = parse_command("analyze chain", "[--capture FILE] [--depth K] [--residual G] [--grids LIST] [--out FILE]", d, args);
  if (!vm) return 0;
  if (opt.depth < 1 || opt.depth > 1000) throw Error("--depth: " + std::to_string(opt.depth) + " is not allowed (allowed: 1..1000)");
  if (opt.input != "gaussian" && opt.input != "student-t" && opt.input != "captured")
    throw Error("--input: '" + opt.input + "' is not allowed (allowed: gaussian, student-t, captured)");
  if (!(opt.residual >= 0 && opt.residual <= 100)) throw Error("--residual: " + std::to_string(opt.residual) + " is not allowed (allowed: 0..100)");
  opt.device = pick_device(device);
  if (!capture.empty()) opt.capture = capture_file(capture, -1);
  opt.grids = split(grids, ',', /*skip_empty=*/true);
  run_chain_analysis(opt);
  return 0;
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
  const std::string allowed = "bias, tensors, capture, chain";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: ufp4 analyze <analysis> [options]\n\nanalyses:\n"
              << "  bias      per-bin bias of a grid (Eq. 2) and b_G(P) for densities, by integration and Monte Carlo\n"
              << "  tensors   SQNR, Delta SQNR (Eq. 7), alpha (Eq. 3), bucket ratio (Eq. 6) and GEMM output SQNR of captured operands\n"
              << "  capture   the same measurements on the operands of training runs, analysed as they train (one file a captured step)\n"
              << "  chain     signal attenuation through stacked quantized GEMMs (Eq. 5)\n";
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "bias") return analyze_bias(rest);
  if (args[0] == "tensors") return analyze_tensors(rest);
  if (args[0] == "capture") return analyze_capture(rest);
  if (args[0] == "chain") return analyze_chain(rest);
  throw Error("analyze: unknown analysis '" + args[0] + "' (allowed: " + allowed + ")");
}

}  // namespace ufp4
