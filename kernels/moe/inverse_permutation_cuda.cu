// The inverse of row-wise permutations (contract: kernels/moe/inverse_permutation.h): a thread an entry.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/moe/inverse_permutation.h"
#include "kernels/numerics/cuda_check.cuh"

namespace ufp4 {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) inverse_permutation_kernel(const InversePermutationIO io) {
  const int64_t n = io.rows * io.width;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t r = i / io.width, j = i - r * io.width, p = io.perm[i];
    if (p >= 0 && p < io.width) io.inv[r * io.width + p] = j;
  }
}

}  // namespace

void cuda_inverse_permutation(const InversePermutationIO& io, cudaStream_t stream) {
  if (io.rows < 0 || io.width < 0) throw RuntimeError("inverse permutation: negative rows or width (the caller checks)");
  const int64_t n = io.rows * io.width;
  if (n == 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  inverse_permutation_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(io);
  check_launch("inverse_permutation_kernel");
}

}  // namespace ufp4
