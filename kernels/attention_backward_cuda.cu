// Causal attention's deterministic backward on the tensor cores (see attention_backward.h).
//
// One thread block of 4 warps per (batch, KV head, key block j of 64 keys); warp w owns keys
// 16w..16w+15 of the block. Scores are formed transposed, S^T = K Q^T (keys x queries), so P^T and
// dS^T come out of the MMAs in the layout the next products take as their A operand: dV += P^T dO and
// dK += dS^T Q need no trip through shared memory. dQ = dS K needs dS with queries as rows: dS^T goes
// to shared memory once and is read back transposed (ldmatrix .trans). Q and dO tiles of the next
// query block are copied in (cp.async) while the current one is worked on.
//
// dQ of query block i is the sum over key blocks j <= i of their dS K. Block j adds its term after
// block j + 1 has (a per-query-block counter: block j waits until it reads i - j), into an FP32
// accumulator that block i writes first and block 0 turns into BF16: the same order on every run.
// Blocks take their work in ticket order, last key block first, so the block a block waits on started
// before it, and, walking the query blocks from its own upwards, reaches each query block `group`
// iterations earlier.

#include <mutex>

#include "kernels/attention_backward.h"
#include "kernels/cuda_check.cuh"
#include "kernels/float_bits.h"

namespace ufp4 {

namespace {

constexpr int kThreads = 128;                         // 4 warps, 16 keys each
constexpr int kTile = kAttnBlock * kAttnHeadDim * 2;  // one 64 x 64 BF16 tile: 8 KB
// Shared memory: K, two Q and two dO buffers, dS^T (V's tile at the start), then lse and delta for two query blocks.
constexpr int kOffK = 0, kOffQ = kTile, kOffDo = 3 * kTile, kOffDs = 5 * kTile, kOffStats = 6 * kTile;
constexpr int kSmemBytes = kOffStats + 4 * kAttnBlock * 4;
constexpr float kLog2e = 1.4426950408889634f;

// Byte offset of element (r, c) in a 64 x 64 BF16 tile of 128-byte rows whose 16-byte chunks are
// permuted by the row (chunk ^ (r & 7)): the 8 rows an ldmatrix phase reads hit 8 different banks.
__device__ __forceinline__ uint32_t swz(int r, int c) { return r * 128 + ((((c >> 3) ^ r) & 7) << 4) + (c & 7) * 2; }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldsm(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_t(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void st_shared(uint32_t addr, uint32_t v) { asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v)); }

// c += a b: m16n8k16, BF16 operands, FP32 sums.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}


__device__ __forceinline__ unsigned load_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void fence_acquire() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }
__device__ __forceinline__ void red_release_add(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
// *p += (a, b), two FP32 reductions in L2 (no reply). (Four a lane, after a shuffle, were no faster.)
__device__ __forceinline__ void red_add2(float* p, float a, float b) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.relaxed.gpu.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// A 64 x 64 tile of rows `stride` elements apart into a swizzled shared tile: 4 16-byte copies a thread.
__device__ __forceinline__ void load_tile(uint32_t dst, const uint16_t* src, int64_t stride, int tid) {
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int id = tid + u * kThreads, r = id >> 3, c = id & 7;
    cp_async16(dst + r * 128 + (((c ^ r) & 7) << 4), src + r * stride + c * 8);
  }
}

__device__ __forceinline__ float bf16_lo(uint32_t w) { return bf16_bits_to_f32(static_cast<uint16_t>(w)); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return bf16_bits_to_f32(static_cast<uint16_t>(w >> 16)); }

// delta = rowsum(dO O) per query row: 8 threads a row, 8 elements each, summed in a fixed tree.
__global__ void attention_delta_kernel(AttentionBackwardIO io, float* delta) {
  const int64_t rows = io.batch * io.heads * io.seq;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 8) + threadIdx.x / 8;
  const int part = threadIdx.x & 7;
  float s = 0.0f;
  if (r < rows) {
    const int64_t b = r / (io.heads * io.seq), h = (r / io.seq) % io.heads, row = r % io.seq;
    const uint4 o = *reinterpret_cast<const uint4*>(io.o + b * io.o_st.batch + h * io.o_st.head + row * io.o_st.row + part * 8);
    const uint4 d = *reinterpret_cast<const uint4*>(io.dout + b * io.dout_st.batch + h * io.dout_st.head + row * io.dout_st.row + part * 8);
    const uint32_t ow[4] = {o.x, o.y, o.z, o.w}, dw[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) s = fmaf(bf16_hi(ow[k]), bf16_hi(dw[k]), fmaf(bf16_lo(ow[k]), bf16_lo(dw[k]), s));
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  if (r < rows && part == 0) delta[r] = s;
}

// dQ = BF16(scale x the FP32 sum), 8 threads a row.
__global__ void attention_dq_convert_kernel(AttentionBackwardIO io, const float* __restrict__ dq_acc) {
  const int64_t rows = io.batch * io.heads * io.seq;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 8) + threadIdx.x / 8;
  if (r >= rows) return;
  const int part = threadIdx.x & 7;
  const int64_t b = r / (io.heads * io.seq), h = (r / io.seq) % io.heads, row = r % io.seq;
  const float4* src = reinterpret_cast<const float4*>(dq_acc + r * kAttnHeadDim + part * 8);
  const float4 x = __ldcs(src), y = __ldcs(src + 1);
  const float sc = io.scale;
  *reinterpret_cast<uint4*>(io.dq + b * io.dq_st.batch + h * io.dq_st.head + row * io.dq_st.row + part * 8) =
      make_uint4(pack_bf16x2_finite(x.x * sc, x.y * sc), pack_bf16x2_finite(x.z * sc, x.w * sc), pack_bf16x2_finite(y.x * sc, y.y * sc), pack_bf16x2_finite(y.z * sc, y.w * sc));
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 2)
    attention_backward_kernel(AttentionBackwardIO io, const float* __restrict__ delta, float* __restrict__ dq_acc, unsigned* counters) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int nblocks = static_cast<int>(io.seq / kAttnBlock);
  // The block's work from a ticket taken as it starts, not from blockIdx (whose dispatch order CUDA does
  // not promise): every block this one waits on took an earlier ticket, so it is running or done.
  __shared__ unsigned ticket_s;
  if (tid == 0) ticket_s = atomicAdd(counters + io.batch * io.heads * nblocks, 1u);
  __syncthreads();
  const int j = nblocks - 1 - static_cast<int>(ticket_s % nblocks);  // the last key block first
  const int64_t bkv = ticket_s / nblocks, b = bkv / io.kv_heads, kvh = bkv % io.kv_heads;
  const int group = static_cast<int>(io.heads / io.kv_heads);
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sK = base + kOffK, sDs = base + kOffDs;
  float* stats = reinterpret_cast<float*>(smem + kOffStats);  // lse[2][64], then delta[2][64]

  load_tile(sK, io.k + b * io.k_st.batch + kvh * io.k_st.head + static_cast<int64_t>(j) * kAttnBlock * io.k_st.row, io.k_st.row, tid);
  load_tile(sDs, io.v + b * io.v_st.batch + kvh * io.v_st.head + static_cast<int64_t>(j) * kAttnBlock * io.v_st.row, io.v_st.row, tid);
  cp_async_commit();

  // Iteration it: query block j + it / group, query head kvh * group + it % group. Query blocks outside,
  // so the key block after this one, which adds into each query block's dQ first, is `group`
  // iterations ahead of it.
  const int iterations = group * (nblocks - j);
  auto issue = [&](int it, int buf) {
    const int64_t hq = kvh * group + it % group, row0 = static_cast<int64_t>(j + it / group) * kAttnBlock;
    load_tile(base + kOffQ + buf * kTile, io.q + b * io.q_st.batch + hq * io.q_st.head + row0 * io.q_st.row, io.q_st.row, tid);
    load_tile(base + kOffDo + buf * kTile, io.dout + b * io.dout_st.batch + hq * io.dout_st.head + row0 * io.dout_st.row, io.dout_st.row, tid);
    const int64_t r = (b * io.heads + hq) * io.seq + row0;
    if (tid < 16) cp_async16(base + kOffStats + (buf * 64 + tid * 4) * 4, io.lse + r + tid * 4);
    else if (tid < 32) cp_async16(base + kOffStats + (128 + buf * 64 + (tid - 16) * 4) * 4, delta + r + (tid - 16) * 4);
  };
  issue(0, 0);
  cp_async_commit();
  cp_async_wait<1>();
  __syncthreads();

  // This warp's 16 keys of K and V as A operands (keys x head dims), for every iteration.
  uint32_t kf[4][4], vf[4][4];
  {
    const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      ldsm(sK + swz(r, ks * 16 + (lane >> 4) * 8), kf[ks]);
      ldsm(sDs + swz(r, ks * 16 + (lane >> 4) * 8), vf[ks]);
    }
  }
  float dk[8][4], dv[8][4];
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  const float sl2 = io.scale * kLog2e;
  // Lane offsets of the ldmatrix row addresses: B from [n][k] rows, B from [k][n] rows (transposed), A from [k][m] rows (transposed).
  const int b_row = (lane & 7) + (lane >> 4) * 8, b_col = ((lane >> 3) & 1) * 8;
  const int bt_row = (lane & 7) + ((lane >> 3) & 1) * 8, bt_col = (lane >> 4) * 8;

  unsigned* pending = nullptr;  // the counter this warp counts itself into at the next iteration
  for (int it = 0; it < iterations; ++it) {
    const int buf = it & 1;
    // The other buffer was last read before the previous iteration's dS^T barrier: refill it now.
    if (it + 1 < iterations) issue(it + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const int64_t hq = kvh * group + it % group;
    const int i = j + it / group;
    const uint32_t sQ = base + kOffQ + buf * kTile, sDo = base + kOffDo + buf * kTile;
    const float* lse = stats + buf * 64;
    const float* dlt = stats + 128 + buf * 64;

    // S^T = K Q^T and dP^T = V dO^T: this warp's 16 keys x the block's 64 queries.
    float s[8][4], dp[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks)
#pragma unroll
      for (int np = 0; np < 4; ++np) {
        uint32_t bq[4], bo[4];
        ldsm(sQ + swz(np * 16 + b_row, ks * 16 + b_col), bq);
        ldsm(sDo + swz(np * 16 + b_row, ks * 16 + b_col), bo);
        mma(s[2 * np], kf[ks], bq[0], bq[1]);
        mma(s[2 * np + 1], kf[ks], bq[2], bq[3]);
        mma(dp[2 * np], vf[ks], bo[0], bo[1]);
        mma(dp[2 * np + 1], vf[ks], bo[2], bo[3]);
      }
    // P^T = exp(scale S^T - lse) (zero above the diagonal), dS^T = P^T (dP^T - delta).
    const bool diagonal = i == j;
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n * 8 + 2 * t + (e & 1), row = warp * 16 + g + (e >> 1) * 8;
        float p = exp2f(fmaf(s[n][e], sl2, -lse[col] * kLog2e));
        if (diagonal && row > col) p = 0.0f;
        s[n][e] = p;
        dp[n][e] = p * (dp[n][e] - dlt[col]);
      }
    // dV += P^T dO, dK += dS^T Q: A from the registers (two score tiles make one k16 step over queries).
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) {
      const uint32_t ap[4] = {pack_bf16x2_finite(s[2 * kq][0], s[2 * kq][1]), pack_bf16x2_finite(s[2 * kq][2], s[2 * kq][3]),
                              pack_bf16x2_finite(s[2 * kq + 1][0], s[2 * kq + 1][1]), pack_bf16x2_finite(s[2 * kq + 1][2], s[2 * kq + 1][3])};
      const uint32_t ad[4] = {pack_bf16x2_finite(dp[2 * kq][0], dp[2 * kq][1]), pack_bf16x2_finite(dp[2 * kq][2], dp[2 * kq][3]),
                              pack_bf16x2_finite(dp[2 * kq + 1][0], dp[2 * kq + 1][1]), pack_bf16x2_finite(dp[2 * kq + 1][2], dp[2 * kq + 1][3])};
      // dS^T to shared memory for dQ, as the BF16 values the dK product takes.
      const int r0 = warp * 16 + g, c0 = kq * 16 + 2 * t;
      st_shared(sDs + swz(r0, c0), ad[0]);
      st_shared(sDs + swz(r0 + 8, c0), ad[1]);
      st_shared(sDs + swz(r0, c0 + 8), ad[2]);
      st_shared(sDs + swz(r0 + 8, c0 + 8), ad[3]);
#pragma unroll
      for (int nd = 0; nd < 4; ++nd) {
        uint32_t bo[4], bq[4];
        ldsm_t(sDo + swz(kq * 16 + bt_row, nd * 16 + bt_col), bo);
        ldsm_t(sQ + swz(kq * 16 + bt_row, nd * 16 + bt_col), bq);
        mma(dv[2 * nd], ap, bo[0], bo[1]);
        mma(dv[2 * nd + 1], ap, bo[2], bo[3]);
        mma(dk[2 * nd], ad, bq[0], bq[1]);
        mma(dk[2 * nd + 1], ad, bq[2], bq[3]);
      }
    }
    const int64_t qrow = (b * io.heads + hq) * io.seq + static_cast<int64_t>(i) * kAttnBlock;
    unsigned* counter = counters + (b * io.heads + hq) * nblocks + i;
    __syncthreads();  // dS^T complete

    if (kMode == 3) continue;
    // The counter, read before the dQ product: its reply comes while the product runs.
    unsigned seen = 0;
    if ((kMode == 0 || kMode == 4) && lane == 0) seen = load_relaxed(counter);
    // This key block's term of dQ: queries 16w..16w+15 x head dims, over the block's 64 keys.
    float dq[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      ldsm_t(sDs + swz(kk * 16 + b_row, warp * 16 + b_col), a);
#pragma unroll
      for (int nd = 0; nd < 4; ++nd) {
        uint32_t bk[4];
        ldsm_t(sK + swz(kk * 16 + bt_row, nd * 16 + bt_col), bk);
        mma(dq[2 * nd], a, bk[0], bk[1]);
        mma(dq[2 * nd + 1], a, bk[2], bk[3]);
      }
    }

    // Add it in order: after key blocks i, i-1, ..., j+1 (block i stores, the others add). Each warp
    // counts itself in: it waits for the 4 (i - j) arrivals of the blocks before, and adds its own one
    // iteration later (a release: its reductions have long landed by then).
    if (kMode == 0 || kMode == 4) {
      __syncwarp();  // the warp's reductions of the previous iteration before its release
      if (lane == 0) {
        if (pending) red_release_add(pending, 1u);
        while (kMode == 0 && seen != 4u * static_cast<unsigned>(i - j)) seen = load_relaxed(counter);
        fence_acquire();
      }
      __syncwarp();
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float* acc = dq_acc + (qrow + warp * 16 + g + h * 8) * kAttnHeadDim + n * 8 + 2 * t;
        if (i == j || kMode == 2) __stcg(reinterpret_cast<float2*>(acc), make_float2(dq[n][2 * h], dq[n][2 * h + 1]));
        else red_add2(acc, dq[n][2 * h], dq[n][2 * h + 1]);
      }
    pending = (kMode == 0 || kMode == 4) && j > 0 ? counter : nullptr;
  }
  if (pending) {
    __syncwarp();
    if (lane == 0) red_release_add(pending, 1u);
  }

  // dK (times the scale) and dV of this key block.
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = static_cast<int64_t>(j) * kAttnBlock + warp * 16 + g + h * 8;
      const int col = n * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(io.dk + b * io.dk_st.batch + kvh * io.dk_st.head + row * io.dk_st.row + col) =
          pack_bf16x2_finite(dk[n][2 * h] * io.scale, dk[n][2 * h + 1] * io.scale);
      *reinterpret_cast<uint32_t*>(io.dv + b * io.dv_st.batch + kvh * io.dv_st.head + row * io.dv_st.row + col) =
          pack_bf16x2_finite(dv[n][2 * h], dv[n][2 * h + 1]);
    }
}

bool aligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool strides_ok(const AttnStrides& s) { return s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0; }
size_t round16(size_t n) { return (n + 15) / 16 * 16; }

// The workspace: delta [B, heads, S], the dQ accumulator [B, heads, S, 64] (FP32), the query blocks'
// counters and the blocks' ticket, at these byte offsets.
struct Workspace {
  size_t rows, acc, counters, n_counters, bytes;
  explicit Workspace(const AttentionBackwardIO& io)
      : rows(static_cast<size_t>(io.batch * io.heads * io.seq)),
        acc(round16(rows * 4)),
        counters(acc + rows * kAttnHeadDim * 4),
        n_counters(static_cast<size_t>(io.batch * io.heads * (io.seq / kAttnBlock)) + 1),
        bytes(counters + round16(n_counters * 4)) {}
};

}  // namespace

bool attention_backward_cuda_applies(const AttentionBackwardIO& io) {
  if (io.batch < 1 || io.heads < 1 || io.kv_heads < 1 || io.heads % io.kv_heads || io.seq < kAttnBlock || io.seq % kAttnBlock) return false;
  if (io.batch * io.kv_heads > 65535 || io.seq / kAttnBlock > 65535) return false;
  for (const void* p : {static_cast<const void*>(io.q), static_cast<const void*>(io.k), static_cast<const void*>(io.v),
                        static_cast<const void*>(io.o), static_cast<const void*>(io.dout), static_cast<const void*>(io.lse),
                        static_cast<const void*>(io.dq), static_cast<const void*>(io.dk), static_cast<const void*>(io.dv)})
    if (!aligned(p)) return false;
  for (const AttnStrides* s : {&io.q_st, &io.k_st, &io.v_st, &io.o_st, &io.dout_st, &io.dq_st, &io.dk_st, &io.dv_st})
    if (!strides_ok(*s)) return false;
  return true;
}

size_t attention_backward_workspace_bytes(const AttentionBackwardIO& io) { return Workspace(io).bytes; }

void cuda_attention_backward(const AttentionBackwardIO& io, cudaStream_t stream) { cuda_attention_backward_mode(io, stream, 0); }

void cuda_attention_backward_mode(const AttentionBackwardIO& io, cudaStream_t stream, int mode) {
  const Workspace w(io);
  const size_t rows = w.rows;
  char* ws = static_cast<char*>(io.workspace);
  float* delta = reinterpret_cast<float*>(ws);
  float* acc = reinterpret_cast<float*>(ws + w.acc);
  unsigned* counters = reinterpret_cast<unsigned*>(ws + w.counters);
  check_cuda(cudaMemsetAsync(counters, 0, w.n_counters * 4, stream), "attention backward (counters and ticket)");
  attention_delta_kernel<<<static_cast<unsigned>((rows + 31) / 32), 256, 0, stream>>>(io, delta);
  check_launch("attention backward (delta)");
  static std::once_flag smem_set;
  std::call_once(smem_set, [] {
    for (auto f : {attention_backward_kernel<0>, attention_backward_kernel<2>, attention_backward_kernel<3>, attention_backward_kernel<4>})
      check_cuda(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "attention backward (shared memory)");
  });
  const dim3 grid(static_cast<unsigned>(io.seq / kAttnBlock), static_cast<unsigned>(io.batch * io.kv_heads));
  auto f = mode == 0 ? attention_backward_kernel<0> : mode == 2 ? attention_backward_kernel<2> : mode == 3 ? attention_backward_kernel<3> : attention_backward_kernel<4>;
  f<<<grid, kThreads, kSmemBytes, stream>>>(io, delta, acc, counters);
  check_launch("attention backward");
  attention_dq_convert_kernel<<<static_cast<unsigned>((rows + 31) / 32), 256, 0, stream>>>(io, acc);
  check_launch("attention backward (dQ)");
}

}  // namespace ufp4
