// Test runner. `--ufp4-gpu` marks a run of [cuda] tests: without a visible GPU it exits 77, which
// CTest reports as skipped; with UFP4_REQUIRE_GPU=1 (make test-gpu) a missing GPU is a failure.
#if defined(UFP4_CATCH3)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <vector>

#include "tests/helpers.h"

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool gpu_run = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ufp4-gpu") == 0) gpu_run = true;
    else args.push_back(argv[i]);
  }
  if (gpu_run && !ufp4::test::gpu_available()) {
    const char* req = std::getenv("UFP4_REQUIRE_GPU");
    if (req && std::strcmp(req, "1") == 0) {
      std::cerr << "no CUDA device visible to this build (UFP4_REQUIRE_GPU=1)\n";
      return 1;
    }
    std::cout << "no CUDA device: [cuda] tests skipped\n";
    return 77;
  }
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
