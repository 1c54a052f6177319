// Fuzzing the inputs a user hands ufp4: run manifests, recipes and .npy headers, mutated at random
// (fixed seeds, thousands of cases). Every case either loads or fails with ufp4::Error (exit 2 at the
// CLI) whose message is one line naming the file; no other exception, no crash, no hang. A sample
// also goes through the CLI to check the exit code and the single stderr line.
#include <cstdint>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/array_io.h"
#include "harness/plan/run_manifest.h"
#include "models/recipe.h"
#include "tests/catch.h"
#include "tests/run_helpers.h"

using namespace ufp4;

namespace {

// Mutations of a text: byte edits, token edits and line edits, a few per case.
std::string mutate(const std::string& s, std::mt19937_64& rng) {
  static const std::vector<std::string> tokens = {"=", "[", "]", "{", "}", "\"", ",", ".", "#", "\n", "-1", "0", "1e400", "nan", "inf",
                                                  "true", "\"x\"", "[[a]]", "[train]", "[sweep]", "\"train.seed\" = [1, 2]",
                                                  "extends = \"x.toml\"", "[ablation.f]", "field = \"train.lr\"", "levels = []",
                                                  "999999999999999999999", "\"\\u00e9\"", "'''", "=[", "{}"};
  std::string t = s;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = t.empty() ? 0 : rng() % (t.size() + 1);
    switch (rng() % 7) {
      case 0: if (!t.empty() && pos < t.size()) t.erase(pos, 1 + rng() % 8); break;                   // delete
      case 1: t.insert(pos, 1, static_cast<char>(rng() % 256)); break;                                // any byte
      case 2: t.insert(pos, tokens[rng() % tokens.size()]); break;                                    // a TOML token
      case 3: if (pos < t.size()) t[pos] = "0123456789.-+e\"[]={}, \n"[rng() % 24]; break;             // replace a char
      case 4: { const size_t a = t.rfind('\n', pos), b = t.find('\n', pos);                          // duplicate a line
                if (a != std::string::npos && b != std::string::npos) t.insert(b, t.substr(a, b - a)); } break;
      case 5: { const size_t a = t.rfind('\n', pos), b = t.find('\n', pos);                          // drop a line
                if (a != std::string::npos && b != std::string::npos) t.erase(a, b - a); } break;
      case 6: t.resize(pos); break;                                                                    // truncate
    }
  }
  return t;
}

// The outcome every case must have: loaded, or one ufp4::Error line naming a file.
void expect_clean(const std::string& what, const std::string& file, const std::string& body, const std::function<void()>& load) {
  try {
    load();
  } catch (const Error& e) {
    const std::string msg = e.what();
    if (msg.find('\n') != std::string::npos || msg.empty() || msg.find(".toml") == std::string::npos && msg.find(".npy") == std::string::npos) {
      INFO(what << " input:\n" << body);
      FAIL("not a one-line error naming the file: " << msg);
    }
  } catch (const std::exception& e) {
    INFO(what << " input:\n" << body);
    FAIL("an exception other than ufp4::Error: " << e.what());
  }
  (void)file;
}

}  // namespace

TEST_CASE("fuzzed manifests and recipes load or fail with one clear line", "[fuzz]") {
  const std::string d = test::temp_dir();
  const std::string root = UFP4_SOURCE_DIR;
  // Seeds: the repository's own manifests and recipes, a sweep and an ablation.
  std::vector<std::string> manifests;
  for (const char* f : {"/experiments/ci/ufp4.toml", "/experiments/proxy/dense113m_ufp4.toml", "/experiments/archive/1600-steps/table2/proxy.toml",
                        "/experiments/archive/1600-steps/table3/proxy.toml", "/experiments/figure8/moe_proxy.toml"})
    manifests.push_back(read_text_file(root + f));
  manifests.push_back("[model]\nname = \"tiny\"\n[train]\nsteps = 5\n[sweep]\n\"train.seed\" = [1, 2, 3]\n\"recipe.name\" = [\"bf16\", \"ufp4\"]\n");
  std::vector<std::string> recipes;
  for (const char* f : {"/models/recipes/ufp4.toml", "/models/recipes/e2m1_ref.toml", "/models/recipes/nvfp4_nvidia.toml"})
    recipes.push_back(read_text_file(root + f));
  std::mt19937_64 rng(20261123);
  const int n = 2500;
  for (int i = 0; i < n; ++i) {
    const std::string mbody = mutate(manifests[i % manifests.size()], rng);
    const std::string mpath = d + "/m" + std::to_string(i % 7) + ".toml";
    std::ofstream(mpath, std::ios::binary) << mbody;
    expect_clean("manifest", mpath, mbody, [&] {
      for (const auto& m : RunManifest::expand(mpath)) (void)plan_run(m);
    });
    const std::string rbody = mutate(recipes[i % recipes.size()], rng);
    const std::string rpath = d + "/r" + std::to_string(i % 7) + ".toml";
    std::ofstream(rpath, std::ios::binary) << rbody;
    expect_clean("recipe", rpath, rbody, [&] { Recipe::load(rpath); });
  }
}

TEST_CASE("fuzzed .npy headers load or fail with one clear line, without huge allocations", "[fuzz]") {
  const std::string d = test::temp_dir();
  ArrayF32 a;
  a.shape = {3, 5};
  a.data.assign(15, 1.5f);
  write_npy(d + "/seed.npy", a);
  const std::string seed = read_text_file(d + "/seed.npy");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 3000; ++i) {
    std::string body = seed;
    const size_t header_end = 10 + static_cast<size_t>(static_cast<unsigned char>(seed[8]));
    // Mutate inside the magic, the length or the header dict mostly; sometimes anywhere.
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      if (body.empty()) break;
      const size_t pos = rng() % std::min(body.size(), rng() % 4 ? header_end : body.size());
      switch (rng() % 5) {
        case 0: body[pos] = static_cast<char>(rng() % 256); break;
        case 1: body.insert(pos, std::to_string(rng() % 3 ? rng() % 100 : rng())); break;
        case 2: body.erase(pos, 1 + rng() % 4); break;
        case 3: body.insert(pos, std::vector<std::string>{"(", ")", ",", "'<f8'", "'<i4'", "True", "-1", "'shape':", "1e9"}[rng() % 9]); break;
        case 4: body.resize(pos); break;
      }
    }
    const std::string path = d + "/x" + std::to_string(i % 5) + ".npy";
    std::ofstream(path, std::ios::binary) << body;
    expect_clean("npy", path, body, [&] { read_npy(path); });
  }
}

TEST_CASE("the CLI turns fuzzed input into exit 2 and one stderr line", "[fuzz]") {
  const std::string d = test::temp_dir();
  const std::string seed = read_text_file(std::string(UFP4_SOURCE_DIR) + "/experiments/archive/1600-steps/table2/proxy.toml");
  std::mt19937_64 rng(99);
  int failures_seen = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string path = d + "/c" + std::to_string(i) + ".toml";
    std::ofstream(path, std::ios::binary) << mutate(seed, rng);
    // stderr alone is read (stdout goes away), from the repository root as a user runs it; in-process
    // (cli_main, which main() is): the CLI's error handling without 30 LibTorch start-ups.
    const test::CliResult r = test::run_cli("plan " + path, test::CliOutput::kStderr);
    INFO(r.out);
    CHECK((r.code == 0 || r.code == 2));
    if (r.code == 2) {
      ++failures_seen;
      CHECK(std::count(r.out.begin(), r.out.end(), '\n') == 1);
      CHECK(r.out.rfind("ufp4: error: ", 0) == 0);
    }
  }
  CHECK(failures_seen > 5);
}
