// The padded segments (contract: kernels/moe/padded_segments.h). Every block forms the segments' padded
// ends, valid ends and shifts in shared memory (E is small: one thread sums them), block 0 also writes
// lens and padded_ends; then each thread finds its padded rows' segment by binary search. The read rows: a
// thread a row.
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/numerics/cuda_check.cuh"
#include "kernels/moe/padded_segments.h"

namespace ufp4 {

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) padded_segments_kernel(const __grid_constant__ PaddedSegmentsIO io) {
  extern __shared__ int64_t segment[];  // padded ends [E], valid ends [E], shifts [E]
  const int E = static_cast<int>(io.experts);
  int64_t* pend = segment;
  int64_t* valid_end = segment + E;
  int64_t* shift = segment + 2 * E;
  // Each segment's count and padded length from its two ends, all segments at once (one thread walking
  // the ends from global memory waited out one load after another), then one thread's running sum over
  // shared memory.
  for (int e = threadIdx.x; e < E; e += kThreads) {
    const int64_t start = e ? io.ends[e - 1] : 0, count = io.ends[e] - start;
    pend[e] = (count + io.align - 1) / io.align * io.align;  // the padded length until the sum below
    valid_end[e] = count;
    shift[e] = start;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t pstart = 0;
    for (int e = 0; e < E; ++e) {
      const int64_t padded = pend[e];
      valid_end[e] += pstart;
      shift[e] -= pstart;
      pend[e] = pstart + padded;
      pstart = pend[e];
    }
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int e = threadIdx.x; e < E; e += kThreads) {
      const int64_t count = valid_end[e] - (e ? pend[e - 1] : 0);
      io.padded_ends[e] = static_cast<int32_t>(pend[e]);
      io.lens[e] = static_cast<int32_t>(io.rht ? (count + io.rht - 1) / io.rht * io.rht : count);
    }
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < io.rows; p += static_cast<int64_t>(gridDim.x) * kThreads) {
    int lo = 0, hi = E - 1;  // the first segment whose padded end lies past p, else the last
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (pend[mid] > p) hi = mid;
      else lo = mid + 1;
    }
    io.src[p] = p < valid_end[lo] ? p + shift[lo] : -1;
  }
}

__global__ void __launch_bounds__(kThreads) padded_read_rows_kernel(const __grid_constant__ PaddedReadRowsIO io) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; p < io.rows; p += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t s = io.src[p];
    io.read[p] = s < 0 ? -1 : io.gather[s];
  }
}

}  // namespace

void cuda_padded_read_rows(const PaddedReadRowsIO& io, cudaStream_t stream) {
  if (io.rows <= 0) return;
  const int64_t blocks = std::min<int64_t>((io.rows + kThreads - 1) / kThreads, 1024);
  padded_read_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(io);
  check_launch("padded_read_rows_kernel");
}

void cuda_padded_segments(const PaddedSegmentsIO& io, cudaStream_t stream) {
  if (io.experts < 1 || io.experts > kPaddedSegmentsMaxExperts || io.align < 1 || io.rht < 0)
    throw RuntimeError("padded segments: experts must be in 1..1024, align >= 1 and rht >= 0 (the caller checks)");
  const int64_t blocks = std::min<int64_t>(std::max<int64_t>((io.rows + kThreads - 1) / kThreads, 1), 1024);
  padded_segments_kernel<<<static_cast<unsigned>(blocks), kThreads, 3 * io.experts * sizeof(int64_t), stream>>>(io);
  check_launch("padded_segments_kernel");
}

}  // namespace ufp4
