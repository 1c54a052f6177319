// Tuning variants of the hot kernel's columnwise stochastic-rounding path, timed beside the production
// kernel (cuda_quantize_hot) in one run, each first checked bit for bit against it. Not part of the
// library: the production kernel keeps only the variant that measured best (kernels/quantize/quantize_hot_cuda.cu).
//
//   cmake --build build --target dev && build/ufp4_dev_hot_col_sr [rows cols ...]
//
// Variants: thread blocks an SM must hold (the register cap), row tiles a block walks, direct loads from
// global memory (with or without the L2 128-byte line hint) or a shared-memory tile filled by
// asynchronous copies, the next tile's copy in flight while one is rounded.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/quantize/quant_spec.h"
#include "kernels/quantize/quantize_cuda.h"
#include "kernels/quantize/quantize_hot_col.cuh"

namespace ufp4 {
namespace {

// 16-byte asynchronous global-to-shared copy (zero-filled when !valid), and its group fences.
__device__ __forceinline__ void cp_async16_shared(unsigned dst, const void* gmem, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory"); }

// Shared-memory tiles: kTiles consecutive row tiles a thread block, the next tile's asynchronous copy in
// flight while one is rounded. No buffer is refilled before the barrier that follows its last reader
// (up to three buffers).
template <int kTiles, int kClass, bool kRht>
__device__ __forceinline__ void hot_col_tiles_sr(const KernelSpec& s, const QuantizeIO& io, const HotParams& h, const float* sh_level,
                                                 const uint8_t* sh_code) {
  constexpr int kBufs = kTiles < 3 ? kTiles : 3;
  __shared__ ColTile tile[kBufs];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kColTile, ty0 = static_cast<int64_t>(blockIdx.y) * kTiles;
  const int64_t row_tiles = (io.rows + kColTile - 1) / kColTile;
  const int nt = static_cast<int>(row_tiles - ty0 < kTiles ? row_tiles - ty0 : kTiles);
  static_assert(kColTile * kColTile / 8 == 4 * kHotThreads, "four 16-byte units a thread a tile");
  const int64_t units = io.cols / 8;
  const int crow = threadIdx.x / 8, cu = threadIdx.x % 8;  // thread i moves unit i % 8 of tile rows i / 8 + 16 p
  const int rows_left = static_cast<int>(io.rows - ty0 * kColTile - crow);
  const bool col_ok = c0 + 8 * cu < io.cols;
  const uint4* src = reinterpret_cast<const uint4*>(io.in);
  const uint4* ld = src + (ty0 * kColTile + crow) * units + c0 / 8 + cu;
  const int64_t rows16 = 16 * units;
  const unsigned sh0 = static_cast<unsigned>(__cvta_generic_to_shared(&tile[0][crow][0]));
  auto issue = [&](int t) {
    const unsigned sh = sh0 + static_cast<unsigned>(t % kBufs) * sizeof(ColTile);
    const int left = rows_left - t * kColTile;
    const uint4* g = ld;
#pragma unroll
    for (int p = 0; p < 4; ++p, g += rows16) {
      const bool ok = col_ok && 16 * p < left;
      cp_async16_shared(sh + (16 * p * (kColTile / 8) + col_slot(16 * p, cu)) * 16, ok ? g : src, ok);
    }
    ld += 4 * rows16;
    cp_async_commit();
  };
  const int b = threadIdx.x % 4, cp = threadIdx.x / 4;
  const bool pair_ok = c0 + 2 * cp < io.cols;
  const int rows_b = static_cast<int>(io.rows - ty0 * kColTile - 16 * b);
  const int64_t out0 = (c0 + 2 * cp) * io.rows + ty0 * kColTile + 16 * b;
  uint32_t declined = 0;
  issue(0);
#pragma unroll 1
  for (int t = 0; t < kTiles; ++t) {
    if (t >= nt) break;
    if (t + 1 < nt) {
      issue(t + 1);
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (pair_ok && t * kColTile < rows_b) {
      uint32_t raw[16];
      col_pair_words(tile[t % kBufs], b, cp, raw);
      declined |= round_col_words_sr<kClass, kRht>(h, io, raw, out0 + t * kColTile) << (2 * t);
    }
  }
  general_col_chunks(s, io, sh_level, sh_code, out0, declined);
}

enum Loads { kDirect, kDirectNoHint, kSharedTiles };

template <int kMinBlocks, int kTiles, int kLoads, int kClass>
__global__ void __launch_bounds__(kHotThreads, kMinBlocks) col_sr_variant(const __grid_constant__ KernelSpec s,
                                                                          const __grid_constant__ QuantizeIO io,
                                                                          const __grid_constant__ HotParams h) {
  __shared__ float sh_level[16];
  __shared__ uint8_t sh_code[16];
  if (threadIdx.x < 16) { sh_level[threadIdx.x] = s.grid.level[threadIdx.x]; sh_code[threadIdx.x] = s.grid.code[threadIdx.x]; }
  if constexpr (kLoads == kSharedTiles) hot_col_tiles_sr<kTiles, kClass, true>(s, io, h, sh_level, sh_code);
  else hot_col_direct_sr<kTiles, kLoads == kDirect, kClass, true>(s, io, h, sh_level, sh_code);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "hot_col_sr_variants: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Variant {
  const char* name;
  void (*launch)(const KernelSpec&, const QuantizeIO&, cudaStream_t);
};

template <int kMinBlocks, int kTiles, int kLoads>
void launch_variant(const KernelSpec& s, const QuantizeIO& io, cudaStream_t stream) {
  const int64_t row_groups = ((io.rows + kColTile - 1) / kColTile + kTiles - 1) / kTiles;
  const dim3 grid(static_cast<unsigned>((io.cols + kColTile - 1) / kColTile), static_cast<unsigned>(row_groups));
  if (s.fast.kind == kGridE2M1) col_sr_variant<kMinBlocks, kTiles, kLoads, kGridE2M1><<<grid, kHotThreads, 0, stream>>>(s, io, make_hot_params(s));
  else col_sr_variant<kMinBlocks, kTiles, kLoads, kGridUniform><<<grid, kHotThreads, 0, stream>>>(s, io, make_hot_params(s));
  check(cudaGetLastError(), "variant launch");
}

const Variant kVariants[] = {
    {"production (cuda_quantize_hot)", cuda_quantize_hot},
    {"direct, 7 blocks, 2 tiles, line hint", launch_variant<7, 2, kDirect>},
    {"direct, 7 blocks, 2 tiles, no hint", launch_variant<7, 2, kDirectNoHint>},
    {"direct, 6 blocks, 2 tiles, line hint", launch_variant<6, 2, kDirect>},
    {"direct, 8 blocks, 2 tiles, line hint", launch_variant<8, 2, kDirect>},
    {"direct, 7 blocks, 1 tile, line hint", launch_variant<7, 1, kDirect>},
    {"direct, 7 blocks, 4 tiles, line hint", launch_variant<7, 4, kDirect>},
    {"shared tiles, 6 blocks, 2 tiles", launch_variant<6, 2, kSharedTiles>},
    {"shared tiles, 6 blocks, 3 tiles", launch_variant<6, 3, kSharedTiles>},
};

// BF16 bits of normally distributed values (a fixed generator, so every run times the same input).
std::vector<uint16_t> normal_bf16(size_t n) {
  std::vector<uint16_t> v(n);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return (static_cast<double>(state >> 11) + 0.5) / 9007199254740992.0;
  };
  for (size_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(std::sqrt(-2 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()));
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    v[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  }
  return v;
}

void run_shape(int64_t rows, int64_t cols) {
  const size_t n = static_cast<size_t>(rows * cols), flush_bytes = 256u << 20;
  std::vector<uint16_t> host = normal_bf16(n), want(n), got(n);
  void *in = nullptr, *out = nullptr, *flush = nullptr;
  check(cudaMalloc(&in, n * 2), "cudaMalloc");
  check(cudaMalloc(&out, n * 2), "cudaMalloc");
  check(cudaMalloc(&flush, flush_bytes), "cudaMalloc");
  check(cudaMemcpy(in, host.data(), n * 2, cudaMemcpyHostToDevice), "upload");
  cudaStream_t stream;
  cudaEvent_t start, stop;
  check(cudaStreamCreate(&stream), "stream");
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (const char* grid : {"e2m1", "e1m2"}) {
    QuantSpec q;
    q.grid = Grid::from_name(grid);
    q.rounding = Rounding::kSr;
    q.rht = 16;
    q.rht_seed = 1234;
    q.seed = 99;
    q.offset = 7;
    const KernelSpec s = make_kernel_spec(q);
    QuantizeIO io;
    io.in = in;
    io.in_dtype = DType::kBF16;
    io.out_dtype = DType::kBF16;
    io.dequant = out;
    io.rows = rows;
    io.cols = cols;
    io.columnwise = true;
    if (!hot_path_applies(s, io)) throw Error("hot_col_sr_variants: the hot kernel does not cover this shape");
    for (const Variant& v : kVariants) {
      check(cudaMemsetAsync(out, 0xff, n * 2, stream), "clear");
      v.launch(s, io, stream);
      check(cudaMemcpyAsync(v.launch == cuda_quantize_hot ? want.data() : got.data(), out, n * 2, cudaMemcpyDeviceToHost, stream), "download");
      check(cudaStreamSynchronize(stream), "variant");
      const bool same = v.launch == cuda_quantize_hot || std::memcmp(want.data(), got.data(), n * 2) == 0;
      std::vector<float> ms;
      for (int r = 0; r < 30; ++r) {
        check(cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream), "L2 flush");
        check(cudaEventRecord(start, stream), "record");
        v.launch(s, io, stream);
        check(cudaEventRecord(stop, stream), "record");
        check(cudaEventSynchronize(stop), "sync");
        float t = 0;
        check(cudaEventElapsedTime(&t, start, stop), "elapsed");
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      const double us = 1e3 * ms[ms.size() / 2];
      std::printf("| %lldx%lld | %s | %s | %.1f | %.2f | %s |\n", static_cast<long long>(rows), static_cast<long long>(cols), grid, v.name, us,
                  4.0 * n / (us * 1e6), same ? "bit-identical" : "DIFFERS");
    }
  }
  cudaFree(in); cudaFree(out); cudaFree(flush);
  cudaEventDestroy(start); cudaEventDestroy(stop); cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace ufp4

int main(int argc, char** argv) {
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int i = 1; i + 1 < argc; i += 2) shapes.emplace_back(std::atoll(argv[i]), std::atoll(argv[i + 1]));
  if (shapes.empty()) shapes = {{16384, 2048}, {16384, 5632}, {8192, 8192}, {131072, 384}};
  std::printf("Columnwise SR + RHT-16 quantize-dequantize, BF16 in and out; median of 30 CUDA-event times, L2 flushed.\n\n");
  std::printf("| shape | grid | variant | us | TB/s | vs production |\n|---|---|---|---|---|---|\n");
  try {
    for (auto [r, c] : shapes) ufp4::run_shape(r, c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
