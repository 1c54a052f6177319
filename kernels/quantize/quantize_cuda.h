// CUDA launchers of the quantizer (no LibTorch types). All launch on the stream they are given.
#pragma once
#include <cstdint>

#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_pair.h"
#include "kernels/moe/quantize_segments.h"

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

// True when this build carries CUDA kernels and a device is visible.
bool cuda_available();

// Fused (optional RHT +) quantize-dequantize; `io` holds device pointers. io.workspace must hold
// quantize_workspace_floats() floats when block_2d is set.
void cuda_quantize(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream);

// The hot kernel alone (kernels/quantize/quantize_hot.h), for calls where hot_path_applies(); cuda_quantize
// dispatches to it.
void cuda_quantize_hot(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream);

// Both layouts of one operand from one read (kernels/quantize/quantize_pair.h), for calls where
// pair_path_applies(); `io` holds device pointers.
void cuda_quantize_pair(const KernelSpec& row, const KernelSpec& col, const PairIO& io, cudaStream_t stream);

// Every task's pairs (kernels/quantize/quantize_pair.h: PairTask) in one launch a kPairBatchTasks tasks, each task
// covered by pair_batch_applies(); device pointers. Sets the tasks' first_tile.
void cuda_quantize_pair_batch(const KernelSpec& row, const KernelSpec& col, PairTask* tasks, int n_tasks, cudaStream_t stream);

// Segmented quantize-dequantize (kernels/moe/quantize_segments.h): G operands in one launch; `io` holds
// device pointers (ends, lens, keys and tensor amax included). io.workspace as for cuda_quantize().
void cuda_quantize_segments(const KernelSpec& s, const SegmentedQuantizeIO& io, cudaStream_t stream);

// Both segmented operands of one routed activation from one read (kernels/moe/quantize_segments.h), for
// calls where segments_pair_applies(); device pointers.
void cuda_quantize_segments_pair(const KernelSpec& row, const KernelSpec& col, const SegmentedPairIO& io, cudaStream_t stream);

// Standalone RHT of each length-n segment of each row: in [rows, cols] -> out [rows, cols]
// (rowwise) or out [cols, rows] (columnwise: segments run along dim 0, written transposed).
void cuda_rht(const KernelSpec& s, const void* in, DType in_dtype, void* out, DType out_dtype,
              int64_t rows, int64_t cols, bool columnwise, cudaStream_t stream);

}  // namespace ufp4
