// The pair kernel (kernels/quantize/quantize_pair.h): a thread block stages one 64 x 64 input tile in shared
// memory, then each thread rounds two rowwise chunks (one tile row, columns 16 h and 32 + 16 h) and two
// columnwise chunks (16 rows of one column pair) with the hot kernel's arithmetic. Chunks it declines
// go to the general code, as in the hot kernel. The tile is read from global memory once. The batched
// kernel runs the same tile code over many weights' matrices, one tile a block.
#include <algorithm>

#include "kernels/quantize/quantize_cuda.h"
#include "kernels/quantize/quantize_hot_col.cuh"
#include "kernels/quantize/quantize_pair.h"

namespace ufp4 {

namespace {

constexpr int kPairTile = 64;  // input rows and columns of a tile; kHotThreads threads a block

// 16-byte units a tile row: 8 BF16 or 16 FP32.
template <bool kF32>
constexpr int kPairUnits = kF32 ? 16 : 8;

// Shared-memory slot of unit u of tile row `row`. Bits 4-5 of the row spread the columnwise reads
// (a warp reads one row of each of four row blocks); bits 0-1 spread the rowwise reads (a quarter warp
// reads four consecutive rows, two lanes a row, BF16 lanes two units apart, FP32 four). Every access
// of the kernel, the staging stores included, is free of bank conflicts.
template <bool kF32>
__device__ __forceinline__ int pair_slot(int row, int u) {
  const int low = kF32 ? (row & 3) : ((row & 1) | ((row & 2) << 1));
  return u ^ (((row >> 4) << 1) ^ low);
}

// sr_off: the SR stream's offset, read once a thread (the stores between chunks would make the
// compiler read it again for each).
template <int kClass, bool kSR, bool kRht>
__device__ __forceinline__ bool pair_round_store(const HotParams& h, uint64_t sr_off, float (&x)[16], const QuantizeIO& io, int64_t oi) {
  uint32_t o[8];
  if (!hot_chunk_values<kClass, kSR, kRht>(h, x, kSR ? hot_draws_at(h, sr_off, static_cast<uint64_t>(oi)) : U32x4{}, o)) return false;
  uint4* dst = reinterpret_cast<uint4*>(static_cast<uint16_t*>(io.dequant) + oi);
  dst[0] = make_uint4(o[0], o[1], o[2], o[3]);
  dst[1] = make_uint4(o[4], o[5], o[6], o[7]);
  return true;
}

// The tile whose first input element is (r0, c0): what one block of either kernel below does.
template <bool kF32, int kClass, bool kSR, bool kRowRht, bool kColRht>
__device__ __forceinline__ void pair_tile(const KernelSpec& rs, const KernelSpec& cs, const QuantizeIO& rio, const QuantizeIO& cio,
                                          const HotParams& rh, const HotParams& ch, int64_t r0, int64_t c0) {
  constexpr int U = kPairUnits<kF32>, kPer = kF32 ? 4 : 8;  // units a tile row, elements a unit
  __shared__ uint4 tile[kPairTile][U];
  __shared__ float sh_level[2][16];
  __shared__ uint8_t sh_code[2][16];
  const int tid = threadIdx.x;
  if (tid < 16) {
    sh_level[0][tid] = rs.grid.level[tid];
    sh_code[0][tid] = rs.grid.code[tid];
    sh_level[1][tid] = cs.grid.level[tid];
    sh_code[1][tid] = cs.grid.code[tid];
  }
  const uint64_t roff = kSR ? sr_offset(rh.offset, rh.offset_add) : 0, coff = kSR ? sr_offset(ch.offset, ch.offset_add) : 0;
  const int64_t rows = rio.rows, cols = rio.cols;
  const int64_t units = cols / kPer;
  const uint4* src = reinterpret_cast<const uint4*>(rio.in);
#pragma unroll
  for (int p = 0; p < kPairTile * U / kHotThreads; ++p) {
    const int idx = p * kHotThreads + tid, row = idx / U, u = idx % U;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r0 + row < rows && c0 + kPer * u < cols) v = src[(r0 + row) * units + c0 / kPer + u];
    tile[row][pair_slot<kF32>(row, u)] = v;
  }
  __syncthreads();

  // Rowwise: tile row t / 2, chunks at columns 16 h and 32 + 16 h (h = t % 2).
  const int row = tid >> 1, h = tid & 1;
  uint32_t declined = 0;  // bit k: rowwise chunk k; bit 2 + k: columnwise chunk k
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int64_t col = c0 + 32 * k + 16 * h;
    if (r0 + row >= rows || col >= cols) continue;
    float x[16];
    if constexpr (kF32) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint4 q = tile[row][pair_slot<true>(row, 8 * k + 4 * h + j)];
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) x[4 * j + e] = hot_widen_f32<kRowRht>(rh, w[e], 4 * j + e);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const uint4 q = tile[row][pair_slot<false>(row, 4 * k + 2 * h + j)];
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          x[8 * j + 2 * e] = hot_widen<kRowRht>(rh, w[e], false, 8 * j + 2 * e);
          x[8 * j + 2 * e + 1] = hot_widen<kRowRht>(rh, w[e], true, 8 * j + 2 * e + 1);
        }
      }
    }
    if (!pair_round_store<kClass, kSR, kRowRht>(rh, roff, x, rio, (r0 + row) * cols + col)) declined |= 1u << k;
  }

  // Columnwise: columns 2 cp and 2 cp + 1 (cp = t / 4) of row block b = t % 4; output element
  // (column, row) at column * rows + row.
  const int b = tid & 3, cp = tid >> 2;
  const int64_t oi0 = (c0 + 2 * cp) * rows + r0 + 16 * b;  // chunk k: oi0 + k rows
  if (r0 + 16 * b < rows && c0 + 2 * cp < cols) {  // 16 divides cols: both columns are in
    if constexpr (kF32) {
      uint2 raw[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) raw[i] = reinterpret_cast<const uint2*>(&tile[16 * b + i][pair_slot<true>(16 * b + i, cp >> 1)])[cp & 1];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = hot_widen_f32<kColRht>(ch, k ? raw[i].y : raw[i].x, i);
        if (!pair_round_store<kClass, kSR, kColRht>(ch, coff, x, cio, oi0 + k * rows)) declined |= 4u << k;
      }
    } else {
      uint32_t raw[16];
#pragma unroll
      for (int i = 0; i < 16; ++i) raw[i] = reinterpret_cast<const uint32_t*>(&tile[16 * b + i][pair_slot<false>(16 * b + i, cp >> 2)])[cp & 3];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        float x[16];
#pragma unroll
        for (int i = 0; i < 16; ++i) x[i] = hot_widen<kColRht>(ch, raw[i], k == 1, i);
        if (!pair_round_store<kClass, kSR, kColRht>(ch, coff, x, cio, oi0 + k * rows)) declined |= 4u << k;
      }
    }
  }

  // After every chunk, so nothing of them is live across the out-of-line calls.
  for (; declined; declined &= declined - 1) {
    const int bit = __ffs(declined) - 1;
    if (bit < 2) general_chunk(rs, rio, sh_level[0], sh_code[0], (r0 + row) * cols + c0 + 32 * bit + 16 * h);
    else general_chunk(cs, cio, sh_level[1], sh_code[1], oi0 + (bit - 2) * rows);
  }
}

template <bool kF32, int kClass, bool kSR, bool kRowRht, bool kColRht>
__global__ void __launch_bounds__(kHotThreads, kSR ? 6 : 8)
    quantize_pair_kernel(const __grid_constant__ KernelSpec rs, const __grid_constant__ KernelSpec cs, const __grid_constant__ QuantizeIO rio,
                         const __grid_constant__ QuantizeIO cio, const __grid_constant__ HotParams rh, const __grid_constant__ HotParams ch) {
  pair_tile<kF32, kClass, kSR, kRowRht, kColRht>(rs, cs, rio, cio, rh, ch, static_cast<int64_t>(blockIdx.y) * kPairTile,
                                                  static_cast<int64_t>(blockIdx.x) * kPairTile);
}

struct PairBatchParams {
  PairTask task[kPairBatchTasks];
  int tasks;
};

// One block a tile of the launch's tasks, in task order: FP32 weights, round to nearest.
template <int kClass, bool kRht>
__global__ void __launch_bounds__(kHotThreads, 8)
    quantize_pair_batch_kernel(const __grid_constant__ KernelSpec rs, const __grid_constant__ KernelSpec cs,
                               const __grid_constant__ PairBatchParams b, const __grid_constant__ HotParams rh, const __grid_constant__ HotParams ch) {
  const int tile = static_cast<int>(blockIdx.x);
  int t = 0;
  while (t + 1 < b.tasks && b.task[t + 1].first_tile <= tile) ++t;  // the same for the whole block
  const PairTask& task = b.task[t];
  const int col_tiles = (task.cols + kPairTile - 1) / kPairTile, per = ((task.rows + kPairTile - 1) / kPairTile) * col_tiles;
  const int local = tile - task.first_tile, m = local / per, at = local % per;
  const int64_t offset = static_cast<int64_t>(m) * task.rows * task.cols;
  // The matrix's two QuantizeIOs in shared memory: built in each thread's stack they cost the tile as
  // much local-memory traffic as its input.
  __shared__ QuantizeIO io[2];
  if (threadIdx.x < 2) {
    PairIO p;
    p.in = static_cast<const float*>(task.in) + offset;
    p.in_dtype = DType::kF32;
    p.rows = task.rows;
    p.cols = task.cols;
    p.row_out = static_cast<uint16_t*>(task.row_out) + offset;
    p.col_out = static_cast<uint16_t*>(task.col_out) + offset;
    io[threadIdx.x] = pair_output_io(p, threadIdx.x == 1);
  }
  __syncthreads();
  pair_tile<true, kClass, false, kRht, kRht>(rs, cs, io[0], io[1], rh, ch, static_cast<int64_t>(at / col_tiles) * kPairTile,
                                             static_cast<int64_t>(at % col_tiles) * kPairTile);
}

template <bool kF32, int kClass, bool kSR, bool kRowRht, bool kColRht>
void launch_pair(const KernelSpec& rs, const KernelSpec& cs, const PairIO& p, cudaStream_t stream) {
  const int64_t row_tiles = (p.rows + kPairTile - 1) / kPairTile, col_tiles = (p.cols + kPairTile - 1) / kPairTile;
  if (row_tiles > 65535) throw Error("quantize pair: " + std::to_string(p.rows) + " rows are too many for one launch");
  const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
  quantize_pair_kernel<kF32, kClass, kSR, kRowRht, kColRht><<<grid, kHotThreads, 0, stream>>>(
      rs, cs, pair_output_io(p, false), pair_output_io(p, true), make_hot_params(rs), make_hot_params(cs));
  check_cuda(cudaGetLastError(), "quantize pair kernel launch");
}

// BF16 input: every rounding, RHT on both outputs, on the columnwise one only (the E2M1 reference
// recipe's X and dY), or on neither.
template <int kClass, bool kSR>
void launch_pair_bf16(const KernelSpec& rs, const KernelSpec& cs, const PairIO& p, cudaStream_t stream) {
  if (rs.rht) launch_pair<false, kClass, kSR, true, true>(rs, cs, p, stream);
  else if (cs.rht) launch_pair<false, kClass, kSR, false, true>(rs, cs, p, stream);
  else launch_pair<false, kClass, kSR, false, false>(rs, cs, p, stream);
}

// FP32 input (weights): round to nearest, RHT on both outputs or on neither.
template <int kClass>
void launch_pair_f32(const KernelSpec& rs, const KernelSpec& cs, const PairIO& p, cudaStream_t stream) {
  if (rs.rht) launch_pair<true, kClass, false, true, true>(rs, cs, p, stream);
  else launch_pair<true, kClass, false, false, false>(rs, cs, p, stream);
}

template <int kClass, bool kRht>
void launch_pair_batch(const KernelSpec& rs, const KernelSpec& cs, PairTask* tasks, int n, cudaStream_t stream) {
  const HotParams rh = make_hot_params(rs), ch = make_hot_params(cs);
  for (int first = 0; first < n; first += kPairBatchTasks) {
    PairBatchParams b{};
    b.tasks = std::min(kPairBatchTasks, n - first);
    int64_t tiles = 0;
    for (int i = 0; i < b.tasks; ++i) {
      PairTask& t = tasks[first + i];
      t.first_tile = static_cast<int32_t>(tiles);
      tiles += static_cast<int64_t>(t.batch) * ((t.rows + kPairTile - 1) / kPairTile) * ((t.cols + kPairTile - 1) / kPairTile);
      if (tiles > 0x7fffffff) throw Error("quantize pair batch: more than 2^31 - 1 tiles in one launch");
      b.task[i] = t;
    }
    quantize_pair_batch_kernel<kClass, kRht><<<static_cast<unsigned>(tiles), kHotThreads, 0, stream>>>(rs, cs, b, rh, ch);
    check_cuda(cudaGetLastError(), "quantize pair batch kernel launch");
  }
}

}  // namespace

void cuda_quantize_pair_batch(const KernelSpec& rs, const KernelSpec& cs, PairTask* tasks, int n_tasks, cudaStream_t stream) {
  for (int i = 0; i < n_tasks; ++i)
    if (!pair_batch_applies(rs, cs, tasks[i])) throw Error("quantize pair batch: the batched pair kernel does not cover task " + std::to_string(i));
  if (n_tasks <= 0) return;
  if (rs.fast.kind == kGridE2M1) {
    if (rs.rht) launch_pair_batch<kGridE2M1, true>(rs, cs, tasks, n_tasks, stream);
    else launch_pair_batch<kGridE2M1, false>(rs, cs, tasks, n_tasks, stream);
  } else if (rs.rht) {
    launch_pair_batch<kGridUniform, true>(rs, cs, tasks, n_tasks, stream);
  } else {
    launch_pair_batch<kGridUniform, false>(rs, cs, tasks, n_tasks, stream);
  }
}

void cuda_quantize_pair(const KernelSpec& rs, const KernelSpec& cs, const PairIO& p, cudaStream_t stream) {
  if (!pair_path_applies(rs, cs, p)) throw Error("quantize pair: the pair kernel does not cover this call");
  const bool e2m1 = rs.fast.kind == kGridE2M1, sr = rs.rounding == 1;
  if (p.in_dtype == DType::kF32) {
    if (e2m1) launch_pair_f32<kGridE2M1>(rs, cs, p, stream);
    else launch_pair_f32<kGridUniform>(rs, cs, p, stream);
  } else if (e2m1) {
    if (sr) launch_pair_bf16<kGridE2M1, true>(rs, cs, p, stream);
    else launch_pair_bf16<kGridE2M1, false>(rs, cs, p, stream);
  } else {
    if (sr) launch_pair_bf16<kGridUniform, true>(rs, cs, p, stream);
    else launch_pair_bf16<kGridUniform, false>(rs, cs, p, stream);
  }
}

}  // namespace ufp4
