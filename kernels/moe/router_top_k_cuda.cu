// The router's top k (contract: kernels/moe/router_top_k.h): a thread a row.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/error.h"
#include "kernels/moe/router_top_k.h"
#include "kernels/numerics/cuda_check.cuh"

namespace ufp4 {

namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) router_top_k_kernel(const RouterTopKIO io) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < io.rows; r += static_cast<int64_t>(gridDim.x) * kThreads)
    router_top_k_row(io.probs + r * io.experts, io.experts, io.k, io.values + r * io.k, io.ids + r * io.k);
}

}  // namespace

void cuda_router_top_k(const RouterTopKIO& io, cudaStream_t stream) {
  if (io.rows < 0 || io.k < 1 || io.k > kRouterTopKMaxK || io.k > io.experts)
    throw RuntimeError("router top k: 1 <= k <= min(experts, 8) (the caller checks)");
  if (io.rows == 0) return;
  const int64_t blocks = std::min<int64_t>((io.rows + kThreads - 1) / kThreads, 65535);
  router_top_k_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(io);
  check_launch("router_top_k_kernel");
}

}  // namespace ufp4
