// Deterministic GPU training. On: LibTorch's deterministic algorithms with errors, not warnings (an
// op without a deterministic implementation throws instead of running, so a new source of noise is
// found at once), cuDNN deterministic and not autotuned. Scaled-dot-product attention then takes
// its deterministic backward (flash attention's sequential dQ accumulation), index_add_ and
// scatter_add_ their sort-based forms. Our own kernels use no floating-point atomics (fixed
// reduction orders, kernels/fused_ops.h), and the SR and RHT streams are keyed by (seed, layer,
// step, GEMM, operand), so they are the same after a resume.
#pragma once

namespace ufp4 {

// cuBLAS reproducibility needs CUBLAS_WORKSPACE_CONFIG before its first handle exists: every
// entry point calls this first. Keeps a value the user set.
void ensure_cublas_workspace_config();
void set_deterministic(bool on);
bool deterministic();

}  // namespace ufp4
