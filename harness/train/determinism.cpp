#include "harness/train/determinism.h"

#include <ATen/Context.h>
#include <torch/version.h>

#include <cstdlib>

namespace ufp4 {

void ensure_cublas_workspace_config() { ::setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0); }

namespace {
bool fill_uninitialized = false;
}  // namespace

void set_fill_uninitialized_memory(bool on) { fill_uninitialized = on; }

void set_deterministic(bool on) {
  ensure_cublas_workspace_config();
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(on, /*warn_only=*/false);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  ctx.setDeterministicFillUninitializedMemory(fill_uninitialized);  // older LibTorch never fills
#endif
  ctx.setDeterministicCuDNN(on);
  ctx.setBenchmarkCuDNN(false);
}

bool deterministic() { return at::globalContext().deterministicAlgorithms(); }

}  // namespace ufp4
