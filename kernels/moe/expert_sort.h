// The dropless MoE routing's layout (models/moe_routing.h) from each assignment's expert, by a stable
// counting sort: keys[a] is the expert of assignment a (a = token * k + slot). Outputs:
//   order[r]    the assignment row r holds: expert 0's assignments in increasing a, then expert 1's, ...
//   inverse[a]  the row of assignment a (order's inverse)
//   token_of_row[r]  order[r] / k, the token row r reads
//   ends[e]     int32: the rows of experts 0..e; assigned[e]: the assignments of expert e
// The stable order is unique and every output is an integer, so the CUDA kernels (expert_sort_cuda.cu:
// three launches where LibTorch took a radix sort, two searchsorted and a handful of conversions) equal the
// CPU reference (expert_sort_reference.cpp) bit for bit, and both equal LibTorch's stable sort of the keys
// with searchsorted's segment ends. A key outside 0 .. experts - 1 is refused by the reference and
// skipped by the kernels (its rows are then left unwritten): the caller passes expert ids. Raw pointers,
// no LibTorch types.
#pragma once
#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

constexpr int64_t kExpertSortMaxExperts = 1024;  // the kernels' shared-memory tables
constexpr int64_t kExpertSortChunk = 1024;       // assignments a thread block of the kernels

struct ExpertSortIO {
  int64_t assignments = 0, experts = 0, k = 1;
  const int64_t* keys = nullptr;  // [assignments]
  int64_t* order = nullptr;       // [assignments]
  int64_t* inverse = nullptr;     // [assignments]
  int64_t* token_of_row = nullptr;  // [assignments]
  int32_t* ends = nullptr;        // [experts]
  int64_t* assigned = nullptr;    // [experts]
  void* workspace = nullptr;      // expert_sort_workspace_bytes(io), CUDA only
};

// What the CUDA kernels take: 1 <= experts <= kExpertSortMaxExperts, fewer than 2^31 assignments, k >= 1.
inline bool expert_sort_cuda_applies(const ExpertSortIO& io) {
  return io.experts >= 1 && io.experts <= kExpertSortMaxExperts && io.assignments >= 0 && io.assignments < (int64_t{1} << 31) && io.k >= 1;
}
// Each chunk's count of each expert, then its first row for each (int32).
inline size_t expert_sort_workspace_bytes(const ExpertSortIO& io) {
  return static_cast<size_t>((io.assignments + kExpertSortChunk - 1) / kExpertSortChunk * io.experts) * sizeof(int32_t);
}

void reference_expert_sort(const ExpertSortIO& io);
// On `stream` (the caller's); device pointers.
void cuda_expert_sort(const ExpertSortIO& io, cudaStream_t stream);

}  // namespace ufp4
