// Subcommand plumbing for the ufp4 CLI (Boost.Program_options). Each command parses its own
// arguments; `--help` prints its usage. Errors are thrown (ufp4::Error -> exit 2).
#pragma once
#include <boost/program_options.hpp>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ufp4 {

namespace po = boost::program_options;

struct Command {
  std::string name;
  std::string summary;
  std::function<int(const std::vector<std::string>& args)> run;
};

const std::vector<Command>& commands();

// The whole CLI: `args` without the program name; prints as `ufp4` does and returns its exit code
// (0 ok, 1 runtime failure, 2 bad usage or input). main() is this call; tests make it in-process.
int cli_main(const std::vector<std::string>& args);

// Parses `args` against `desc` (+ positionals). Returns nullopt after printing help for --help.
std::optional<po::variables_map> parse_command(const std::string& cmd, const std::string& usage, po::options_description desc,
                                               const std::vector<std::string>& args,
                                               const po::positional_options_description* pos = nullptr);

// Individual commands (one file each).
int cmd_quantize(const std::vector<std::string>& args);
int cmd_analyze(const std::vector<std::string>& args);
int cmd_recipes(const std::vector<std::string>& args);
int cmd_plan(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_data(const std::vector<std::string>& args);
int cmd_check(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_fit(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_campaign(const std::vector<std::string>& args);

}  // namespace ufp4
