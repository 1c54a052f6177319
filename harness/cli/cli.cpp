#include "harness/cli/cli.h"

#include <algorithm>
#include <iostream>

#include "common/error.h"
#include "common/log.h"
#include "harness/io/provenance.h"

namespace ufp4 {

const std::vector<Command>& commands() {
  static const std::vector<Command> cmds = {
      {"run", "train the runs of manifests (resumes partial runs, skips finished ones)", cmd_run},
      {"campaign", "a registered campaign: plan its runs, run it (pilot, seeds by power, the rest), check it", cmd_campaign},
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

namespace {

void print_help() {
  std::cout << "ufp4 " << version() << " - 4-bit training recipes: quantizers, training, ablations, reports\n\n"
            << "usage: ufp4 [--version] [--help] [-v] <command> [args]   (ufp4 <command> --help for details)\n\ncommands:\n";
  for (const auto& c : commands()) {
    std::string pad(10 - std::min<size_t>(9, c.name.size()), ' ');
    std::cout << "  " << c.name << pad << c.summary << "\n";
  }
}

}  // namespace

int cli_main(const std::vector<std::string>& args) {
  set_log_level(LogLevel::kInfo);  // each invocation starts from the default (tests call this in-process)
  try {
    size_t i = 0;
    for (; i < args.size() && !args[i].empty() && args[i][0] == '-'; ++i) {
      const std::string& a = args[i];
      if (a == "--help" || a == "-h") { print_help(); return kExitOk; }
      if (a == "--version") { std::cout << "ufp4 " << version() << " (commit " << git_commit() << ")\n"; return kExitOk; }
      if (a == "-v" || a == "--verbose") { set_log_level(LogLevel::kDebug); continue; }
      if (a == "-q" || a == "--quiet") { set_log_level(LogLevel::kQuiet); continue; }
      throw Error("unknown option '" + a + "' (allowed before the command: --help, --version, -v, -q)");
    }
    if (i == args.size()) { print_help(); return kExitUsage; }
    const std::string name = args[i];
    std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
    std::string allowed;
    for (const auto& c : commands()) {
      if (c.name == name) return c.run(rest);
      allowed += (allowed.empty() ? "" : ", ") + c.name;
    }
    throw Error("unknown command '" + name + "' (allowed: " + allowed + ")");
  } catch (const Error& e) {
    std::cerr << "ufp4: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const po::error& e) {
    std::cerr << "ufp4: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);  // c10 errors carry backtraces
    std::cerr << "ufp4: failed: " << msg << "\n";
    return kExitRuntime;
  }
}

}  // namespace ufp4
