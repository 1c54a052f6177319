// CUDA kernels of the MoE combine and the dispatch's backward (contract: kernels/fused/fused_kernels.h), one
// instantiation per top_k. The forward and the dispatch's backward: a thread takes 8 columns of one
// token and walks its k slots in order. The combine's backward: a warp a token; lane p takes the row
// vectors p, p + 32, ... and, for each of them, every slot in order (the weight gradient's partials),
// so the token's gradient row is read once for its k expert rows.
#include <cuda_runtime.h>

#include "kernels/numerics/cuda_check.cuh"
#include "kernels/fused/fused_device.cuh"
#include "kernels/fused/fused_kernels.h"

namespace ufp4 {

namespace {

constexpr int kThreads = 256;

// Vector c (8 values) of expert row a as slot values: zeros past the capacity.
__device__ __forceinline__ void slot_row(const MoeCombineIO& io, int64_t a, int64_t c, float (&v)[8]) {
  if (io.kept && !io.kept[a]) {
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = 0.0f;
    return;
  }
  load8<true>(io.y, a * io.d + 8 * c, v);
}

// This thread's token t and 8-column vector c of a [tokens, d] pass a thread a vector; false past the end.
__device__ __forceinline__ bool token_vector(int64_t tokens, int64_t d, int64_t& t, int64_t& c) {
  const int64_t vecs = d / 8, i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= tokens * vecs) return false;
  t = i / vecs, c = i % vecs;
  return true;
}

// K: the slots a token (top_k), fixed at compile time so that every slot's loads are issued before the
// first is used (with a run-time loop each slot's row waited for the previous one's arithmetic).
template <int K>
__global__ void __launch_bounds__(kThreads) moe_combine_forward_kernel(const __grid_constant__ MoeCombineIO io) {
  int64_t t, c;
  if (!token_vector(io.tokens, io.d, t, c)) return;
  float v[K][8];
#pragma unroll
  for (int j = 0; j < K; ++j) slot_row(io, io.inverse[t * K + j], c, v[j]);
  float acc[8];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const float w = bf16_bits_to_f32(io.w[t * K + j]);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float p = round_to_bf16(mul_rn(v[j][e], w));
      acc[e] = j == 0 ? p : round_to_bf16(add_rn(acc[e], p));
    }
  }
  store8<true>(io.out, t * io.d + 8 * c, acc);
}

template <int K>
__global__ void __launch_bounds__(kThreads) moe_combine_backward_kernel(const __grid_constant__ MoeCombineIO io) {
  const int64_t t = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (t >= io.tokens) return;  // whole warps leave together
  const int64_t vecs = io.d / 8;
  int64_t rows[K];
  float w[K], part[K];
  bool kept[K];
#pragma unroll
  for (int j = 0; j < K; ++j) {
    part[j] = 0.0f;
    rows[j] = io.inverse[t * K + j];
    w[j] = bf16_bits_to_f32(io.w[t * K + j]);
    kept[j] = !io.kept || io.kept[rows[j]];
  }
  for (int64_t c = lane; c < vecs; c += 32) {
    // Every load of this vector before the first store (the stores may alias them as far as the
    // compiler knows).
    float g[8], v[K][8];
    load8<true>(io.dout, t * io.d + 8 * c, g);
#pragma unroll
    for (int j = 0; j < K; ++j) slot_row(io, rows[j], c, v[j]);
#pragma unroll
    for (int j = 0; j < K; ++j) {
      float dy[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        dy[e] = kept[j] ? moe_slot_grad(g[e], w[j], K) : 0.0f;
        part[j] = add_rn(part[j], round_to_bf16(mul_rn(g[e], v[j][e])));
      }
      store8<true>(io.dy, rows[j] * io.d + 8 * c, dy);
    }
  }
#pragma unroll
  for (int j = 0; j < K; ++j) {
    const float sum = warp_tree_sum(part[j]);
    if (lane == 0) io.dw[t * K + j] = f32_to_bf16_bits(canon_nan(K > 1 ? add_rn(round_to_bf16(sum), 0.0f) : sum));
  }
}

template <int K>
__global__ void __launch_bounds__(kThreads) moe_dispatch_backward_kernel(const __grid_constant__ MoeDispatchBackwardIO io) {
  int64_t t, c;
  if (!token_vector(io.tokens, io.d, t, c)) return;
  float v[K][8];
#pragma unroll
  for (int j = 0; j < K; ++j) load8<true>(io.g, io.inverse[t * K + j] * io.d + 8 * c, v[j]);
#pragma unroll
  for (int j = 1; j < K; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) v[0][e] = round_to_bf16(add_rn(v[0][e], v[j][e]));
  store8<true>(io.dx, t * io.d + 8 * c, v[0]);
}

// The kernel instantiated for top_k (1 .. kMoeMaxTopK, checked by the caller).
template <template <int> class Launch, typename... Args>
void for_top_k(int64_t top_k, Args&&... args) {
  switch (top_k) {
    case 1: Launch<1>::run(args...); break;
    case 2: Launch<2>::run(args...); break;
    case 3: Launch<3>::run(args...); break;
    case 4: Launch<4>::run(args...); break;
    case 5: Launch<5>::run(args...); break;
    case 6: Launch<6>::run(args...); break;
    case 7: Launch<7>::run(args...); break;
    default: Launch<8>::run(args...); break;
  }
}
static_assert(kMoeMaxTopK == 8, "for_top_k instantiates 1 .. 8 slots");

unsigned blocks_for(int64_t threads) { return static_cast<unsigned>((threads + kThreads - 1) / kThreads); }

void check_shape(int64_t tokens, int64_t top_k, int64_t d, const char* what) {
  if (tokens <= 0 || !moe_combine_cuda_applies(d, top_k))
    throw Error(std::string(what) + ": the CUDA kernel takes a last dimension that is a multiple of 8 and 1 to " + std::to_string(kMoeMaxTopK) +
                " slots a token, got " + std::to_string(d) + " and " + std::to_string(top_k));
}

template <int K>
struct CombineForward {
  static void run(const MoeCombineIO& io, cudaStream_t stream) {
    moe_combine_forward_kernel<K><<<blocks_for(io.tokens * io.d / 8), kThreads, 0, stream>>>(io);
  }
};
template <int K>
struct CombineBackward {
  static void run(const MoeCombineIO& io, cudaStream_t stream) {
    moe_combine_backward_kernel<K><<<blocks_for(io.tokens * 32), kThreads, 0, stream>>>(io);
  }
};
template <int K>
struct DispatchBackward {
  static void run(const MoeDispatchBackwardIO& io, cudaStream_t stream) {
    moe_dispatch_backward_kernel<K><<<blocks_for(io.tokens * io.d / 8), kThreads, 0, stream>>>(io);
  }
};

}  // namespace

void cuda_moe_combine_forward(const MoeCombineIO& io, cudaStream_t stream) {
  check_shape(io.tokens, io.top_k, io.d, "moe combine");
  for_top_k<CombineForward>(io.top_k, io, stream);
  check_launch("moe combine forward");
}

void cuda_moe_combine_backward(const MoeCombineIO& io, cudaStream_t stream) {
  check_shape(io.tokens, io.top_k, io.d, "moe combine");
  for_top_k<CombineBackward>(io.top_k, io, stream);
  check_launch("moe combine backward");
}

void cuda_moe_dispatch_backward(const MoeDispatchBackwardIO& io, cudaStream_t stream) {
  check_shape(io.tokens, io.top_k, io.d, "moe dispatch backward");
  for_top_k<DispatchBackward>(io.top_k, io, stream);
  check_launch("moe dispatch backward");
}

}  // namespace ufp4
