// Deterministic GPU training. On: LibTorch's deterministic algorithms with errors, not warnings (an
// op without a deterministic implementation throws instead of running, so a new source of noise is
// found at once), cuDNN deterministic and not autotuned. Attention then runs cuDNN's fused forward with
// flash attention's deterministic backward (sequential dQ accumulation; models/deterministic_attention.h):
// LibTorch refuses cuDNN's fused backward in this mode, which adds dQ with atomics. That is what the
// mode still costs: about 2.1 ms instead of 1.2 ms a layer at dense-113m's shape (reports/bench.md).
// index_add_ and scatter_add_ take their sort-based forms. Our own kernels use no floating-point atomics (fixed
// reduction orders, kernels/fused/fused_kernels.h), and the SR and RHT streams are keyed by (seed, layer,
// step, GEMM, operand), so they are the same after a resume.
//
// LibTorch (2.2+) also fills every new tensor with NaN in this mode, by default, so that a program
// that reads memory it never wrote still gives the same bits. That fill is one more write of every
// activation and gradient, a large part of the mode's cost (dense-113m's BF16 step: 1.24x the
// non-deterministic step with it, 1.15x without), and our step reads only memory it wrote, so
// set_deterministic turns the fill off. The [cuda] test "filling new memory changes no bit" trains
// with the fill on and off and asserts the same bits, which holds only while nothing reads unwritten
// memory.
#pragma once

namespace ufp4 {

// cuBLAS reproducibility needs CUBLAS_WORKSPACE_CONFIG before its first handle exists: every
// entry point calls this first. Keeps a value the user set.
void ensure_cublas_workspace_config();
void set_deterministic(bool on);
bool deterministic();
// Whether deterministic mode fills new memory (default off; the test above turns it on). Takes
// effect at the next set_deterministic.
void set_fill_uninitialized_memory(bool on);

}  // namespace ufp4
