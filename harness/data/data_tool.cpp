// Running the ufp4-data tool (a separate process: SentencePiece and LibTorch carry colliding protobuf
// copies) from the LibTorch side: the training engine prepares missing data through it.
#include <cstdlib>

#include "common/error.h"
#include "common/fs.h"
#include "harness/data/data.h"

namespace ufp4 {

std::string data_tool_path(const std::string& dir) {
  std::string p = dir + "/ufp4-data";
  if (!file_exists(p)) throw RuntimeError(p + ": the data tool is missing (rebuild with make)");
  return p;
}

void run_data_tool(const DataPrepareOptions& o) { run_data_tool_from(executable_dir() + "/ufp4", o); }

void ensure_data(const DataSource& s) {
  if (data_ready(s.path) || s.prepare.empty()) return;
  DataPrepareOptions d;
  d.out_dir = s.path;
  d.ci_corpus = s.prepare == "ci";
  d.tokenizer = s.tokenizer;
  d.vocab_size = static_cast<int>(s.vocab_size);
  make_dirs(s.path);
  run_data_tool(d);
}

void run_data_tool_from(const std::string& sibling, const DataPrepareOptions& o) {
  std::string cmd = shell_quote(data_tool_path(sibling.substr(0, sibling.find_last_of('/')))) + " prepare --out " + shell_quote(o.out_dir) +
                    " --tokenizer " + shell_quote(o.tokenizer) + " --vocab-size " + std::to_string(o.vocab_size) + (o.ci_corpus ? " --ci" : "");
  for (const auto& i : o.inputs) cmd += " --input " + shell_quote(i);
  cmd += " >/dev/null";
  int rc = std::system(cmd.c_str());
  if (rc != 0) throw RuntimeError("data prepare failed (" + cmd + ")");
}

}  // namespace ufp4
