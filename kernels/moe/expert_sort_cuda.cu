// The stable counting sort of assignments by expert (contract: kernels/moe/expert_sort.h), in three
// launches: each chunk of kChunk assignments counts its experts; one block turns the counts into each
// (chunk, expert)'s first row and writes ends and assigned; each chunk then places its assignments, in
// increasing index within an expert: its warps take consecutive slices, a warp 32 assignments at a time,
// and an assignment's rank among its expert's is the count of the same expert in the slices and lanes
// before it. Integer counts only: the same rows on every run, whatever the scheduling.
#include <cuda_runtime.h>

#include <string>

#include "common/error.h"
#include "kernels/moe/expert_sort.h"
#include "kernels/numerics/cuda_check.cuh"

namespace ufp4 {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kSteps = 4;                         // 32-assignment steps a warp
constexpr int kChunk = kThreads * kSteps;         // assignments a block
static_assert(kChunk == kExpertSortChunk, "the workspace's chunks are the blocks'");
constexpr unsigned kFull = 0xffffffffu;

int64_t chunks_of(const ExpertSortIO& io) { return (io.assignments + kChunk - 1) / kChunk; }

// The expert of assignment a, or -1 past the end or outside 0 .. experts - 1 (skipped).
__device__ __forceinline__ int expert_of(const ExpertSortIO& io, int64_t a) {
  if (a >= io.assignments) return -1;
  const int64_t e = io.keys[a];
  return e >= 0 && e < io.experts ? static_cast<int>(e) : -1;
}

__global__ void __launch_bounds__(kThreads) count_kernel(const ExpertSortIO io, int32_t* counts) {
  extern __shared__ int32_t count[];  // [experts]
  for (int e = threadIdx.x; e < io.experts; e += kThreads) count[e] = 0;
  __syncthreads();
  const int64_t a0 = static_cast<int64_t>(blockIdx.x) * kChunk;
  for (int i = threadIdx.x; i < kChunk; i += kThreads) {
    const int e = expert_of(io, a0 + i);
    if (e >= 0) atomicAdd(&count[e], 1);  // integers: the same sum in any order
  }
  __syncthreads();
  for (int e = threadIdx.x; e < io.experts; e += kThreads) counts[blockIdx.x * io.experts + e] = count[e];
}

// One block, a thread an expert: its total over the chunks, the exclusive scan of the totals over the
// experts (warps' shuffles, then the warp sums), then each chunk's first row of the expert, in place.
__global__ void __launch_bounds__(1024) first_rows_kernel(const ExpertSortIO io, int32_t* counts, int64_t chunks) {
  __shared__ int32_t warp_sum[32];
  const int e = threadIdx.x, lane = e % 32, warp = e / 32;
  int32_t total = 0;
  if (e < io.experts)
    for (int64_t c = 0; c < chunks; ++c) total += counts[c * io.experts + e];
  int32_t inclusive = total;
#pragma unroll
  for (int h = 1; h < 32; h *= 2) {
    const int32_t v = __shfl_up_sync(kFull, inclusive, h);
    if (lane >= h) inclusive += v;
  }
  if (lane == 31) warp_sum[warp] = inclusive;
  __syncthreads();
  int32_t before = 0;
  for (int w = 0; w < warp; ++w) before += warp_sum[w];
  if (e >= io.experts) return;
  int32_t row = before + inclusive - total;  // the expert's first row
  io.ends[e] = row + total;
  io.assigned[e] = total;
  for (int64_t c = 0; c < chunks; ++c) {
    const int32_t n = counts[c * io.experts + e];
    counts[c * io.experts + e] = row;
    row += n;
  }
}

__global__ void __launch_bounds__(kThreads) place_kernel(const ExpertSortIO io, const int32_t* first_rows) {
  extern __shared__ int32_t seen[];  // [kWarps][experts]: a warp's assignments of each expert so far, then the warps before
  for (int i = threadIdx.x; i < kWarps * io.experts; i += kThreads) seen[i] = 0;
  __syncthreads();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned lower = (1u << lane) - 1u;
  int32_t* mine = seen + warp * io.experts;
  const int64_t a0 = static_cast<int64_t>(blockIdx.x) * kChunk + warp * 32 * kSteps;
  int expert[kSteps], rank[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int e = expert_of(io, a0 + 32 * s + lane);
    const unsigned peers = __match_any_sync(kFull, e);  // lanes of the same expert this step
    const int32_t before = e >= 0 ? mine[e] : 0;
    __syncwarp();
    if (e >= 0 && (peers & lower) == 0) mine[e] = before + __popc(peers);  // the group's lowest lane counts it in
    __syncwarp();
    expert[s] = e;
    rank[s] = before + __popc(peers & lower);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < io.experts; e += kThreads) {  // each warp's count becomes the warps' before it
    int32_t run = 0;
    for (int w = 0; w < kWarps; ++w) {
      const int32_t n = seen[w * io.experts + e];
      seen[w * io.experts + e] = run;
      run += n;
    }
  }
  __syncthreads();
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    const int e = expert[s];
    if (e < 0) continue;
    const int64_t a = a0 + 32 * s + lane;
    const int64_t r = static_cast<int64_t>(first_rows[blockIdx.x * io.experts + e]) + mine[e] + rank[s];
    io.order[r] = a;
    io.inverse[a] = r;
    io.token_of_row[r] = a / io.k;
  }
}

}  // namespace

void cuda_expert_sort(const ExpertSortIO& io, cudaStream_t stream) {
  if (!expert_sort_cuda_applies(io)) throw RuntimeError("expert sort: the CUDA kernels take 1.." + std::to_string(kExpertSortMaxExperts) +
                                                        " experts, fewer than 2^31 assignments and k >= 1 (the caller checks)");
  const int64_t chunks = chunks_of(io);
  int32_t* counts = static_cast<int32_t*>(io.workspace);
  const size_t table = static_cast<size_t>(io.experts) * sizeof(int32_t);
  if (chunks > 0) {
    count_kernel<<<static_cast<unsigned>(chunks), kThreads, table, stream>>>(io, counts);
    check_launch("expert sort count_kernel");
  }
  first_rows_kernel<<<1, static_cast<unsigned>((io.experts + 31) / 32 * 32), 0, stream>>>(io, counts, chunks);
  check_launch("expert sort first_rows_kernel");
  if (chunks > 0) {
    place_kernel<<<static_cast<unsigned>(chunks), kThreads, kWarps * table, stream>>>(io, counts);
    check_launch("expert sort place_kernel");
  }
}

}  // namespace ufp4
