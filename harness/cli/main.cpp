// ufp4: the command-line front door. Exit codes: 0 ok, 1 runtime failure, 2 bad usage or input.
#include <iostream>

#include "common/error.h"
#include "common/log.h"
#include "harness/cli/cli.h"
#include "harness/io/provenance.h"
#include "harness/train/determinism.h"

namespace {

void print_help() {
  std::cout << "ufp4 " << ufp4::version() << " - 4-bit training recipes: quantizers, training, ablations, reports\n\n"
            << "usage: ufp4 [--version] [--help] [-v] <command> [args]   (ufp4 <command> --help for details)\n\ncommands:\n";
  for (const auto& c : ufp4::commands()) {
    std::string pad(10 - std::min<size_t>(9, c.name.size()), ' ');
    std::cout << "  " << c.name << pad << c.summary << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  ufp4::ensure_cublas_workspace_config();  // before any CUDA call: cuBLAS reads it at its first handle
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    size_t i = 0;
    for (; i < args.size() && !args[i].empty() && args[i][0] == '-'; ++i) {
      const std::string& a = args[i];
      if (a == "--help" || a == "-h") { print_help(); return ufp4::kExitOk; }
      if (a == "--version") { std::cout << "ufp4 " << ufp4::version() << " (commit " << ufp4::git_commit() << ")\n"; return ufp4::kExitOk; }
      if (a == "-v" || a == "--verbose") { ufp4::set_log_level(ufp4::LogLevel::kDebug); continue; }
      if (a == "-q" || a == "--quiet") { ufp4::set_log_level(ufp4::LogLevel::kQuiet); continue; }
      throw ufp4::Error("unknown option '" + a + "' (allowed before the command: --help, --version, -v, -q)");
    }
    if (i == args.size()) { print_help(); return ufp4::kExitUsage; }
    const std::string name = args[i];
    std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
    std::string allowed;
    for (const auto& c : ufp4::commands()) {
      if (c.name == name) return c.run(rest);
      allowed += (allowed.empty() ? "" : ", ") + c.name;
    }
    throw ufp4::Error("unknown command '" + name + "' (allowed: " + allowed + ")");
  } catch (const ufp4::Error& e) {
    std::cerr << "ufp4: error: " << e.what() << "\n";
    return ufp4::kExitUsage;
  } catch (const boost::program_options::error& e) {
    std::cerr << "ufp4: error: " << e.what() << "\n";
    return ufp4::kExitUsage;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);  // c10 errors carry backtraces
    std::cerr << "ufp4: failed: " << msg << "\n";
    return ufp4::kExitRuntime;
  }
}
