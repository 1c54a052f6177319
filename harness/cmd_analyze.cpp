// `ufp4 analyze`: shrinkage-bias analyses. `bias` prints the per-bin table of a grid (paper Eq. 2).
#include <cstdio>
#include <iostream>

#include "harness/cli.h"
#include "harness/error.h"
#include "kernels/grid.h"

namespace ufp4 {

namespace {

int analyze_bias(const std::vector<std::string>& args) {
  std::string grid;
  double max_fpx = 0;
  po::options_description d("options");
  d.add_options()
      ("grid", po::value(&grid)->default_value("e2m1"), "e2m1, e1m2, int4, int4_tc, or magnitudes \"0,0.5,1,...\"")
      ("max-fpx", po::value(&max_fpx)->default_value(0), "cap of the e2m1 grid: 2, 3, 4 or 6")
      ("json", po::bool_switch(), "machine-readable output");
  auto vm = parse_command("analyze bias", "[--grid G] [--json]", d, args);
  if (!vm) return 0;
  Grid g = Grid::parse(grid, max_fpx);
  std::vector<Bin> bins = g.bins();
  if ((*vm)["json"].as<bool>()) {
    std::cout << "{\"grid\": \"" << g.name() << "\", \"gmax\": " << g.gmax() << ", \"bins\": [";
    for (size_t i = 0; i < bins.size(); ++i)
      std::cout << (i ? ", " : "") << "{\"level\": " << bins[i].level << ", \"left\": " << bins[i].left << ", \"right\": " << bins[i].right
                << ", \"bias\": " << bins[i].bias << "}";
    std::cout << "]}\n";
    return 0;
  }
  std::cout << g.describe() << "\n";
  std::cout << "Eq. 2: expected rounding error in the bin of level q under a locally uniform density = (l - r) / 2\n";
  std::printf("%10s %10s %10s %10s\n", "level", "l_i", "r_i", "bias");
  for (const Bin& b : bins) std::printf("%10.4g %10.4g %10.4g %10.4g\n", b.level, b.left, b.right, b.bias);
  return 0;
}

}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
  const std::string allowed = "bias";
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: ufp4 analyze <analysis> [options]\n\nanalyses:\n  bias      per-bin shrinkage bias of a grid (Eq. 2)\n"
              << "  tensors   (not yet implemented: SQNR, bucket ratio, alpha on captured tensors)\n"
              << "  chain     (not yet implemented: attenuation through stacked GEMMs)\n";
    return args.empty() ? 2 : 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "bias") return analyze_bias(rest);
  if (args[0] == "tensors" || args[0] == "chain") throw Error("analyze " + args[0] + ": not yet implemented (shrinkage-bias analysis suite)");
  throw Error("analyze: unknown analysis '" + args[0] + "' (allowed: " + allowed + ")");
}

}  // namespace ufp4
