// Which CUDA kernel `cuda_quantize` runs for a call, decided on the host from the spec and the
// buffers alone: the dispatcher and the tests ask this one function, so a test can say which kernel
// a case exercises without a GPU.
#pragma once
#include <cstdint>

#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_hot.h"

namespace ufp4 {

enum class KernelPath {
  kHot,      // quantize_hot_cuda.cu: the training path (BF16 in and out, 1x16 FP32 scales, RHT off or 16)
  kFast16,   // quantize16_kernel: other 1x16 calls with RHT off or 16, whole 16-element chunks, aligned buffers
  kGeneral,  // the general kernel: every other block size, RHT size, 2D blocks, odd shapes
};

inline const char* kernel_path_name(KernelPath p) {
  return p == KernelPath::kHot ? "hot" : p == KernelPath::kFast16 ? "fast16" : "general";
}

// Whether quantize16_kernel covers this call.
inline bool fast16_applies(const KernelSpec& s, const QuantizeIO& io) {
  const int64_t L = io.columnwise ? io.rows : io.cols;
  return s.block == 16 && !s.block_2d && (s.rht == 0 || s.rht == 16) && L % 16 == 0 && (!io.columnwise || io.cols % 4 == 0) &&
         aligned16(io.in) && aligned16(io.dequant) && aligned16(io.codes);
}

inline KernelPath select_path(const KernelSpec& s, const QuantizeIO& io) {
  if (hot_path_applies(s, io)) return KernelPath::kHot;
  if (fast16_applies(s, io)) return KernelPath::kFast16;
  return KernelPath::kGeneral;
}

}  // namespace ufp4
