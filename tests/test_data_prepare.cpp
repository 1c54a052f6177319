// ufp4 data prepare on a folder corpus: which files it takes, deduplication, the document list,
// sharding, and tokens independent of threads and shard size.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "common/fs.h"
#include "common/sha256.h"
#include "harness/data/data.h"
#include "tests/catch.h"
#include "tests/helpers.h"

using namespace ufp4;
using namespace ufp4::test;

namespace {

std::string code(int k, int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i) s += "def f" + std::to_string(k) + "_" + std::to_string(i) + "(x):\n    return x * " + std::to_string(i + k) + "\n";
  return s;
}

std::vector<uint16_t> concatenated(const std::vector<std::string>& shards) {
  std::vector<uint16_t> all;
  for (const auto& s : shards) {
    auto t = read_shard(s);
    all.insert(all.end(), t.begin(), t.end());
  }
  return all;
}

}  // namespace

TEST_CASE("data prepare: source files deduplicated in name order; tokens independent of threads and shard size", "[data]") {
  const std::string root = temp_dir(), in = root + "/corpus";
  make_dirs(in + "/pkg/sub");
  make_dirs(in + "/pkg/__pycache__");
  for (int k = 0; k < 12; ++k) std::ofstream(in + "/pkg/m" + std::to_string(k) + (k % 3 == 0 ? ".c" : ".py")) << code(k, 20 + k);
  std::ofstream(in + "/pkg/copy.py") << code(5, 25);  // m5.py's content: the first name in order keeps it
  std::ofstream(in + "/pkg/sub/kern.cuh") << code(40, 30);
  std::ofstream(in + "/pkg/notes.txt") << code(41, 30);           // not a source ending
  std::ofstream(in + "/pkg/__pycache__/m1.py") << code(42, 30);   // caches are skipped
  std::ofstream(in + "/pkg/blob.py") << std::string("ab\0cd", 5);  // binary: skipped
  REQUIRE(symlink((in + "/pkg").c_str(), (in + "/pkg/sub/loop").c_str()) == 0);  // not followed

  auto prepare = [&](const std::string& out, const std::string& extra) {
    CliResult r = run_cli("data prepare --input " + in + " --out " + out + " --val-fraction 0.25 " + extra);
    INFO(r.out);
    REQUIRE(r.code == 0);
  };
  const std::string one = root + "/one", many = root + "/many";
  prepare(one, "--tokenizer byte --threads 1");
  prepare(many, "--tokenizer byte --threads 3 --shard-tokens 1024 --batch-bytes 3000");

  // The document list: every source file once, in name order, named under the input.
  std::vector<std::string> names;
  {
    std::ifstream f(one + "/documents.tsv");
    for (std::string line; std::getline(f, line);)
      if (line[0] != '#') names.push_back(line.substr(0, line.find('\t')));
  }
  CHECK(names.size() == 13);  // 12 modules + kern.cuh + copy.py, less m5.py (copy.py's content, later in name order)
  CHECK(std::find(names.begin(), names.end(), in + "/pkg/copy.py") != names.end());
  CHECK(std::is_sorted(names.begin(), names.end()));
  CHECK(std::find(names.begin(), names.end(), in + "/pkg/sub/kern.cuh") != names.end());
  for (const auto& n : names) {
    CHECK(n.find("__pycache__") == std::string::npos);
    CHECK(n.find("loop") == std::string::npos);
    CHECK(n.find("m5.py") == std::string::npos);
    CHECK(n.find("blob.py") == std::string::npos);
  }
  const std::string manifest = read_text_file(one + "/data.toml");
  CHECK(manifest.find("documents = 13\n") != std::string::npos);
  CHECK(manifest.find("duplicates = 1\n") != std::string::npos);
  CHECK(manifest.find("skipped = 1\n") != std::string::npos);
  CHECK(manifest.find("documents_sha256 = \"" + sha256_hex(read_text_file(one + "/documents.tsv")) + "\"") != std::string::npos);

  // The same tokens whatever the threads and shard size; several shards when asked.
  DataInfo a = load_data_info(one), b = load_data_info(many);
  CHECK(a.train_shards.size() == 1);
  CHECK(b.train_shards.size() > 1);
  CHECK(concatenated(a.train_shards) == concatenated(b.train_shards));
  CHECK(concatenated(a.val_shards) == concatenated(b.val_shards));
  CHECK(count_train_tokens(b) == static_cast<int64_t>(concatenated(b.train_shards).size()));
  CHECK(manifest.find("train_tokens = " + std::to_string(count_train_tokens(a)) + "\n") != std::string::npos);

  // Preparing again gives the same data manifest, so the same run ids.
  prepare(root + "/again", "--tokenizer byte --threads 2");
  CHECK(read_text_file(root + "/again/data.toml") == manifest);
  CHECK(data_identity(root + "/again") == data_identity(one));

  // A BPE tokenizer trained twice (other folder, other thread count) gives the same data manifest:
  // it names the tokenizer by its vocabulary, not by the .model file (which records paths and threads).
  prepare(root + "/bpe1", "--threads 1 --tokenizer bpe --vocab-size 300");
  prepare(root + "/bpe2", "--threads 2 --tokenizer bpe --vocab-size 300");
  const std::string bpe = read_text_file(root + "/bpe1/data.toml");
  CHECK(bpe.find("tokenizer_vocab_sha256 = \"") != std::string::npos);
  CHECK(bpe == read_text_file(root + "/bpe2/data.toml"));

  // Bad options: one line, exit 2.
  CliResult bad = run_cli("data prepare --input " + in + " --out " + root + "/bad --tokenizer byte --shard-tokens 10");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("--shard-tokens: 10 (allowed: at least 1024)") != std::string::npos);
  CliResult ext = run_cli("data prepare --input " + in + " --out " + root + "/bad --tokenizer byte --extension ,");
  CHECK(ext.code == 2);
}
