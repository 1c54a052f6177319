// Data: SHA-256, the fixed CI corpus and llm.c shards, data prepare and the token stream's epochs.
#include <random>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "harness/data/data.h"
#include "harness/io/array_io.h"
#include "harness/io/run_results.h"
#include "harness/plan/run_manifest.h"
#include "harness/train/token_stream.h"
#include "harness/train/trainer.h"
#include "tests/catch.h"

using namespace ufp4;

namespace {

using test::ci_data;
using test::temp_dir;

}  // namespace

TEST_CASE("SHA-256 known answers", "[data]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex(std::string(1000, 'a')) == "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// The CPU's SHA extensions (where it has them) and the portable rounds, on every length around the block
// and buffer boundaries, fed whole and in uneven pieces: the same digest.
TEST_CASE("SHA-256: the hardware rounds and the portable ones give the same digest", "[data]") {
  std::mt19937 rng(7);
  std::string data(70000, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  auto digest = [&](size_t n, size_t piece) {
    Sha256 h;
    for (size_t at = 0; at < n; at += piece) h.update(data.data() + at, std::min(piece, n - at));
    return h.hex();
  };
  struct Restore {
    ~Restore() { sha256_allow_hardware(true); }
  } restore;
  INFO("hardware rounds on this CPU: " << sha256_hardware());
  if (!sha256_hardware()) WARN("this CPU has no SHA extensions: only the portable rounds are checked here");
  for (size_t n : {0, 1, 55, 56, 63, 64, 65, 127, 128, 129, 1000, 4096, 65537, 70000})
    for (size_t piece : {size_t{1}, size_t{7}, size_t{64}, size_t{100}, n + 1}) {
      sha256_allow_hardware(true);
      const std::string fast = digest(n, std::max<size_t>(piece, 1));
      sha256_allow_hardware(false);
      const std::string portable = digest(n, std::max<size_t>(piece, 1));
      INFO("length " << n << ", pieces of " << piece);
      CHECK(fast == portable);
      CHECK(portable == sha256_hex(data.substr(0, n)));
    }
}

TEST_CASE("the CI corpus is fixed; shards round-trip in llm.c format", "[data]") {
  CHECK(sha256_hex(ci_corpus_text(1 << 16)) == sha256_hex(ci_corpus_text(1 << 16)));
  CHECK(ci_corpus_text(1000).size() == 1000);
  std::string d = temp_dir();
  std::vector<uint16_t> t = {1, 2, 3, 65535, 0};
  write_shard(d + "/x_train.bin", t);
  CHECK(read_shard(d + "/x_train.bin") == t);
  std::ofstream(d + "/bad.bin") << "not a shard";
  CHECK_THROWS_AS(read_shard(d + "/bad.bin"), Error);
  // A folder of llm.c shards without data.toml is accepted as data.
  write_shard(d + "/x_val.bin", t);
  DataInfo info = load_data_info(d);
  CHECK(info.train_shards.size() == 1);
  CHECK(info.val_shards.size() == 1);
  CHECK_THROWS_AS(load_data_info(d + "/missing"), Error);
}

TEST_CASE("data prepare writes a manifest with hashes; the stream visits each window once per epoch", "[data]") {
  const std::string& d = ci_data();
  std::string m = read_text_file(d + "/data.toml");
  CHECK(m.find("inputs_sha256 = \"") != std::string::npos);
  CHECK(m.find("train_sha256") != std::string::npos);
  DataInfo info = load_data_info(d);
  CHECK(info.vocab == 256);
  TokenStream s(info.train_shards, 512, 7);
  std::set<int64_t> firsts;
  const int64_t n = s.windows();
  std::vector<uint16_t> tokens = read_shard(info.train_shards[0]);
  for (int64_t i = 0; i < n; ++i) {
    torch::Tensor b = s.next(1);
    // identify the window by its position: find where its first tokens match (windows are seq-aligned)
    firsts.insert(s.cursor.index);
  }
  CHECK(static_cast<int64_t>(firsts.size()) == n);
  CHECK(s.cursor.epoch == 0);
  s.next(1);
  CHECK(s.cursor.epoch == 1);
  // Same seed, same order; the order is a permutation (no window twice in an epoch).
  TokenStream a(info.train_shards, 64, 3), b(info.train_shards, 64, 3), c(info.train_shards, 64, 4);
  torch::Tensor ba = a.next(16);
  CHECK(torch::equal(ba, b.next(16)));
  CHECK(!torch::equal(ba, c.next(16)));
  TokenStream e(info.train_shards, 1024, 5);
  std::set<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < e.windows(); ++i) {
    torch::Tensor w = e.next(1);
    seen.insert(std::vector<int64_t>(w.data_ptr<int64_t>(), w.data_ptr<int64_t>() + 16));
  }
  CHECK(static_cast<int64_t>(seen.size()) == e.windows());
}
