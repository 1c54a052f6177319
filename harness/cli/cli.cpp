#include "harness/cli/cli.h"

#include <iostream>

#include "common/error.h"

namespace ufp4 {

const std::vector<Command>& commands() {
  static const std::vector<Command> cmds = {
      {"run", "train the runs of manifests (resumes partial runs, skips finished ones)", cmd_run},
      {"plan", "manifests into runs (run id, what differs, FLOPs, GPU time, results); a model's parameters and memory", cmd_plan},
      {"report", "render reports with the paper's numbers beside ours (tables 1-3, figures 2, 4-10, 12)", cmd_report},
      {"check", "compare loss curves against committed references", cmd_check},
      {"fit", "scaling-law fits (loss vs compute, Chinchilla) with bootstrap intervals", cmd_fit},
      {"bench", "kernel and training-step benchmarks (Google Benchmark, CUDA events) into HDF5", cmd_bench},
      {"analyze", "shrinkage-bias analysis: bias theory, captured tensors, attenuation chain", cmd_analyze},
      {"quantize", "quantize an .npy or HDF5 dataset with any grid, block, scale, rounding and RHT", cmd_quantize},
      {"recipes", "list recipes, print one fully resolved, or several as paper Table 1", cmd_recipes},
      {"data", "prepare tokenized data shards (ufp4 data prepare)", cmd_data},
  };
  return cmds;
}

std::optional<po::variables_map> parse_command(const std::string& cmd, const std::string& usage, po::options_description desc,
                                               const std::vector<std::string>& args, const po::positional_options_description* pos) {
  desc.add_options()("help,h", "show this help");
  po::variables_map vm;
  try {
    po::command_line_parser parser(args);
    parser.options(desc);
    if (pos) parser.positional(*pos);
    po::store(parser.run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: ufp4 " << cmd << " " << usage << "\n\n" << desc << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(cmd + ": " + e.what() + " (see ufp4 " + cmd + " --help)");
  }
  return vm;
}

}  // namespace ufp4
