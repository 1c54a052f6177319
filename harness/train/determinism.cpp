#include "harness/train/determinism.h"

#include <ATen/Context.h>

#include <cstdlib>

namespace ufp4 {

void ensure_cublas_workspace_config() { ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0); }

void set_deterministic(bool on) {
  ensure_cublas_workspace_config();
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(on, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(on);
  ctx.setBenchmarkCuDNN(false);
}

bool deterministic() { return at::globalContext().deterministicAlgorithms(); }

}  // namespace ufp4
