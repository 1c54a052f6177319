// `ufp4 data prepare`: corpus -> tokenizer -> token shards + data.toml, done by the ufp4-data tool.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include <iostream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/cli/cli.h"
#include "harness/data/data.h"

namespace ufp4 {

int cmd_data(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: ufp4 data prepare [--input PATH ...] --out DIR [--tokenizer bpe|byte] [--vocab-size N] [--ci]\n"
              << "       ufp4 data verify DIR    (every shard against data.toml: headers, sizes, token counts, SHA-256)\n"
              << "  (ufp4 data prepare --help lists every option)\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "verify") {
    if (args.size() != 2) throw Error("data verify: give one data folder (usage: ufp4 data verify DIR)");
    const DataVerification v = verify_data(args[1], DataCheck::kFull);
    std::cout << args[1] << ": " << v.shards << " shards, " << v.bytes << " bytes: every shard matches data.toml\n";
    return 0;
  }
  if (args[0] != "prepare") throw Error("data: unknown action '" + args[0] + "' (allowed: prepare, verify)");
  // The tool runs as a child (not exec'd in place), so that an in-process caller of the CLI, such as
  // the test suite, goes on after it; its exit code is the command's.
  std::vector<char*> argv;
  const std::string tool = data_tool_path(executable_dir());
  argv.push_back(const_cast<char*>(tool.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execv(tool.c_str(), argv.data());
    ::_exit(127);
  }
  if (pid < 0) throw RuntimeError(tool + ": cannot start the data tool");
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) throw RuntimeError(tool + ": lost the data tool");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) throw RuntimeError(tool + ": cannot run the data tool");
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace ufp4
