// The one CUDA error check of the kernels: a failed CUDA call or launch is a runtime failure
// (ufp4::RuntimeError, exit 1), never bad input, named by what was being done.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"

namespace ufp4 {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw RuntimeError(std::string("CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

// After a kernel launch: the launch's own error (bad configuration, no device), if any.
inline void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

}  // namespace ufp4
