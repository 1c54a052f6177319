// `ufp4 data prepare`: corpus -> tokenizer -> token shards + data.toml, done by the ufp4-data tool.
#include <unistd.h>

#include <iostream>

#include "harness/cli.h"
#include "harness/data.h"
#include "harness/error.h"
#include "harness/fs.h"

namespace ufp4 {

namespace {
std::string tool_path(const std::string& dir = executable_dir()) {
  std::string p = dir + "/ufp4-data";
  if (!file_exists(p)) throw RuntimeError(p + ": the data tool is missing (rebuild with make)");
  return p;
}
}  // namespace

void run_data_tool(const DataPrepareOptions& o) { run_data_tool_from(executable_dir() + "/ufp4", o); }

void run_data_tool_from(const std::string& sibling, const DataPrepareOptions& o) {
  std::string cmd = shell_quote(tool_path(sibling.substr(0, sibling.find_last_of('/')))) + " prepare --out " + shell_quote(o.out_dir) + " --tokenizer " + shell_quote(o.tokenizer) +
                    " --vocab-size " + std::to_string(o.vocab_size) + (o.ci_corpus ? " --ci" : "");
  for (const auto& i : o.inputs) cmd += " --input " + shell_quote(i);
  cmd += " >/dev/null";
  int rc = std::system(cmd.c_str());
  if (rc != 0) throw RuntimeError("data prepare failed (" + cmd + ")");
}

int cmd_data(const std::vector<std::string>& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: ufp4 data prepare [--input PATH ...] --out DIR [--tokenizer bpe|byte] [--vocab-size N] [--ci]\n"
              << "  (ufp4 data prepare --help lists every option)\n";
    return args.empty() ? 2 : 0;
  }
  if (args[0] != "prepare") throw Error("data: unknown action '" + args[0] + "' (allowed: prepare)");
  std::vector<char*> argv;
  std::string tool = tool_path();
  argv.push_back(const_cast<char*>(tool.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::cout.flush();
  execv(tool.c_str(), argv.data());
  throw RuntimeError(tool + ": cannot run the data tool");
}

}  // namespace ufp4
