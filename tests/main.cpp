// Test runner. `--ufp4-gpu` marks a run of [cuda] tests: without a visible GPU it exits 77, which
// CTest reports as skipped; with UFP4_REQUIRE_GPU=1 (make test-gpu) a missing GPU is a failure.
// Without a GPU, [cuda] tests are skipped, never counted as passed: Catch2 v3 reports SKIP; under
// Catch2 v2, which has no skip, they are filtered out and counted on a "skipped:" line.
#if defined(UFP4_CATCH3)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "harness/train/determinism.h"
#include "tests/helpers.h"

namespace {

#if !defined(UFP4_CATCH3)
// Adds "not [cuda]" to every alternative of the test spec; returns how many [cuda] test cases the
// original spec selected.
size_t exclude_cuda_tests(Catch::Session& session) {
  std::vector<std::string>& spec = session.configData().testsOrTags;
  const std::vector<std::string> original = spec;
  Catch::TestSpecParser parser(Catch::ITagAliasRegistry::get());
  for (const auto& a : original) parser.parse(a);
  const Catch::TestSpec selected = parser.testSpec();
  size_t n = 0;
  for (const auto& tc : Catch::getRegistryHub().getTestCaseRegistry().getAllTests()) {
    const bool cuda = std::find(tc.lcaseTags.begin(), tc.lcaseTags.end(), "cuda") != tc.lcaseTags.end();
    if (cuda && (original.empty() || selected.matches(tc))) ++n;
  }
  for (auto& a : spec) {  // alternatives are comma-separated; each gets the exclusion
    std::string out;
    for (char c : a) out += c == ',' ? std::string("~[cuda],") : std::string(1, c);
    a = out;
  }
  spec.push_back("~[cuda]");
  return n;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  ufp4::ensure_cublas_workspace_config();  // before any CUDA call, as in the ufp4 binary
  // Each test trains what it checks: no run is copied from the checkout's results/ or build*/ folders
  // (the test of that reuse names its folder in UFP4_REUSE itself).
  ::setenv("UFP4_REUSE", "off", 1);
  std::vector<char*> args;
  bool gpu_run = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ufp4-gpu") == 0) gpu_run = true;
    else args.push_back(argv[i]);
  }
  const bool gpu = ufp4::test::gpu_available();
  if (gpu_run && !gpu) {
    const char* req = std::getenv("UFP4_REQUIRE_GPU");
    if (req && std::strcmp(req, "1") == 0) {
      std::cerr << "no CUDA device visible to this build (UFP4_REQUIRE_GPU=1)\n";
      return 1;
    }
    std::cout << "no CUDA device: [cuda] tests skipped\n";
    return 77;
  }
  Catch::Session session;
  if (const int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data())) return rc;
#if !defined(UFP4_CATCH3)
  if (!gpu) {
    const size_t skipped = exclude_cuda_tests(session);
    const int rc = session.run();
    if (skipped) std::cout << "skipped: " << skipped << " test case(s) tagged [cuda] (no CUDA device)\n";
    return rc;
  }
#endif
  return session.run();
}
