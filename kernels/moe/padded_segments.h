// The grouped experts' WGRAD operands in padded segments: each expert's rows of the expert-sorted
// operand start at a multiple of `align` rows (the block scales and RHT blocks of the columnwise
// layout never straddle two experts), the gaps filled with zero rows. Given the segment ends, this
// computes each expert's RHT length, the padded segment ends and, for every padded row, the source row
// it holds or -1. Integers only, so the CUDA kernel (padded_segments_cuda.cu: one launch where the
// LibTorch composition took about twenty small ones) equals the CPU reference
// (padded_segments_reference.cpp) bit for bit. Raw pointers, no LibTorch types.
#pragma once
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

constexpr int64_t kPaddedSegmentsMaxExperts = 1024;  // the kernel keeps the segments in shared memory

struct PaddedSegmentsIO {
  int64_t experts = 0;  // E, 1 .. kPaddedSegmentsMaxExperts
  int64_t rows = 0;     // padded rows: the operand's rows + E x (align - 1), a bound that needs no look at the counts
  int64_t align = 16;   // a padded segment's length is a multiple of it
  int64_t rht = 0;      // lens: the counts rounded up to a multiple of rht (0: the counts)
  const int32_t* ends = nullptr;   // [E] cumulative ends of the expert-sorted rows (count e = ends[e] - ends[e - 1])
  int32_t* lens = nullptr;         // [E]
  int32_t* padded_ends = nullptr;  // [E] cumulative ends of the padded segments
  // [rows]: padded row p of expert e's segment holds source row p - padded start + start while p <
  // padded start + count, else -1; rows past the last padded end are -1.
  int64_t* src = nullptr;
};

// Where a padded row's values are read when the operand's rows are themselves a gather of the input (the
// MoE's dispatch, read in place): read[p] = gather[src[p]], -1 where src[p] is -1. One launch on the GPU
// where LibTorch's index_select of a -1-prefixed gather took four.
struct PaddedReadRowsIO {
  int64_t rows = 0;                 // padded rows
  int64_t gathered = 0;             // rows of the gather: each src is -1 or in [0, gathered)
  const int64_t* src = nullptr;     // [rows]
  const int64_t* gather = nullptr;  // [gathered]
  int64_t* read = nullptr;          // [rows]
};

void reference_padded_segments(const PaddedSegmentsIO& io);
// Throws ufp4::Error naming the first src out of range.
void reference_padded_read_rows(const PaddedReadRowsIO& io);
// On `stream` (the caller's); device pointers. The read rows' kernel takes src as given (the caller's
// padded_segments output).
void cuda_padded_segments(const PaddedSegmentsIO& io, cudaStream_t stream);
void cuda_padded_read_rows(const PaddedReadRowsIO& io, cudaStream_t stream);

}  // namespace ufp4
