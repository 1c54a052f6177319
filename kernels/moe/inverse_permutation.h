// The inverse of row-wise permutations, for the MoE routing's maps back: perm holds `rows` rows of
// `width` entries, each row a permutation of 0 .. width - 1, and inv[r width + perm[r width + j]] = j.
// Every entry of inv is written once, so the CUDA kernel (inverse_permutation_cuda.cu: one launch where
// LibTorch's argsort took a radix sort of several passes, or a bitonic sort a row) equals the CPU
// reference (inverse_permutation_reference.cpp) bit for bit. An entry out of range is refused by the
// reference and skipped by the kernel (its inverse entry is then left unwritten): the caller passes
// permutations. Raw pointers, no LibTorch types.
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

struct InversePermutationIO {
  int64_t rows = 0, width = 0;
  const int64_t* perm = nullptr;  // [rows, width]
  int64_t* inv = nullptr;         // [rows, width]
};

void reference_inverse_permutation(const InversePermutationIO& io);
// On `stream` (the caller's); device pointers.
void cuda_inverse_permutation(const InversePermutationIO& io, cudaStream_t stream);

}  // namespace ufp4
