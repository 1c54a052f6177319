// The router's top k and its backward (contract: kernels/moe/router_top_k.h): a thread a row.
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
    router_top_k_row(io.probs + r * io.experts, io.experts, io.k, io.by_expert, io.values + r * io.k, io.ids + r * io.k);
}

__global__ void __launch_bounds__(kThreads) router_top_k_backward_kernel(const RouterTopKBackwardIO io) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; r < io.rows; r += static_cast<int64_t>(gridDim.x) * kThreads)
    router_top_k_backward_row(io.grad + r * io.k, io.ids + r * io.k, io.experts, io.k, io.dprobs + r * io.experts);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>(std::min<int64_t>((rows + kThreads - 1) / kThreads, 65535)); }

}  // namespace

void cuda_router_top_k(const RouterTopKIO& io, cudaStream_t stream) {
  if (io.rows < 0 || io.k < 1 || io.k > kRouterTopKMaxK || io.k > io.experts)
    throw RuntimeError("router top k: 1 <= k <= min(experts, 8) (the caller checks)");
  if (io.rows == 0) return;
  router_top_k_kernel<<<row_blocks(io.rows), kThreads, 0, stream>>>(io);
  check_launch("router_top_k_kernel");
}

void cuda_router_top_k_backward(const RouterTopKBackwardIO& io, cudaStream_t stream) {
  if (io.rows < 0 || io.k < 1 || io.k > io.experts) throw RuntimeError("router top k backward: 1 <= k <= experts (the caller checks)");
  if (io.rows == 0) return;
  router_top_k_backward_kernel<<<row_blocks(io.rows), kThreads, 0, stream>>>(io);
  check_launch("router_top_k_backward_kernel");
}

}  // namespace ufp4
