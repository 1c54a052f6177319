// Causal attention's deterministic backward on the tensor cores (see attention_backward.h): two kernels
// of one design, the warp-MMA one first (any GPU the file is built for), then the warpgroup-MMA one
// (Hopper, sm_90a), which shares its helpers and its order of sums.
//
// One thread block of 4 warps per (batch, KV head, key block j of 64 keys); warp w owns keys
// 16w..16w+15 of the block. Scores are formed transposed, S^T = K Q^T (keys x queries), so P^T and
// dS^T come out of the MMAs in the layout the next products take as their A operand: dV += P^T dO and
// dK += dS^T Q need no trip through shared memory. dQ = dS K needs dS with queries as rows: dS^T goes
// to shared memory once and is read back transposed (ldmatrix .trans). Q and dO tiles of the next
// query block are copied in (cp.async) while the current one is worked on.
//
// dQ of query block i is the sum over key blocks j <= i of their dS K. Block j adds its term after
// block j + 1 has (a per-query-block counter: block j waits until it reads at least 4 (i - j)), into an FP32
// accumulator that block i writes first and a last pass turns into BF16: the same order on every run.
// Blocks take their work in ticket order, last key block first, so the block a block waits on started
// before it, and, walking the query blocks from its own upwards, reaches each query block `group`
// iterations earlier.

#include <mutex>

#include "kernels/attention/attention_backward.h"
#include "kernels/numerics/cuda_check.cuh"
#include "kernels/numerics/float_bits.h"
#include "kernels/fused/fused_device.cuh"

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
// Polls a query block's counter until it reads at least `expected` (the arrivals of the key blocks
// before this one). Not exactly `expected`: a warp of this block that passed the same wait counts itself
// in after its last iteration with no barrier between, so the count can pass `expected` before a sibling
// warp's next read; any count at or above it means every block before has arrived (later arrivals come
// after them). Every block waited on took an earlier ticket, so a correct run waits microseconds; a wait
// of kMaxPolls reads (seconds of the GPU's own time, however many processes share it) means the order
// broke, and the kernel stops with its state printed instead of hanging the process for ever.
constexpr unsigned kMaxPolls = 1u << 24;
__device__ __noinline__ void report_stuck_wait(unsigned seen, unsigned expected, int j, int i, long long hq) {
  printf("ufp4 attention backward: thread block (%u, %u), key block %d, warp %u waited %u polls at query block %d, head %lld: "
         "its counter reads %u, the order needs at least %u; stopping the kernel\n",
         blockIdx.x, blockIdx.y, j, threadIdx.x / 32, kMaxPolls, i, hq, seen, expected);
  __trap();
}
__device__ __forceinline__ void wait_for_arrivals(const unsigned* counter, unsigned seen, unsigned expected, int j, int i, long long hq) {
  for (unsigned polls = 0; static_cast<int>(seen - expected) < 0; seen = load_relaxed(counter))
    if (++polls == kMaxPolls) report_stuck_wait(seen, expected, j, i, hq);
}
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

// delta = rowsum(dO O) per query row: 8 threads a row, 8 elements each, summed in a fixed tree. Rows
// are taken in (batch, position, head) order, the memory order of the model's [B, S, heads, 64]
// tensors; delta is stored [B, heads, S]. The first threads also clear the query blocks' counters and
// the ticket (the backward kernel runs after this one on the stream): no memset of their own.
__global__ void attention_delta_kernel(AttentionBackwardIO io, float* delta, unsigned* counters, int64_t n_counters) {
  const int64_t rows = io.batch * io.heads * io.seq;
  const int64_t gid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid < n_counters) counters[gid] = 0;
  const int64_t r = gid / 8;  // (b, position, head)
  const int part = threadIdx.x & 7;
  const int64_t b = r / (io.heads * io.seq), row = (r / io.heads) % io.seq, h = r % io.heads;
  float s = 0.0f;
  if (r < rows) {
    const uint4 o = *reinterpret_cast<const uint4*>(io.o + b * io.o_st.batch + h * io.o_st.head + row * io.o_st.row + part * 8);
    const uint4 d = *reinterpret_cast<const uint4*>(io.dout + b * io.dout_st.batch + h * io.dout_st.head + row * io.dout_st.row + part * 8);
    const uint32_t ow[4] = {o.x, o.y, o.z, o.w}, dw[4] = {d.x, d.y, d.z, d.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) s = fmaf(bf16_hi(ow[k]), bf16_hi(dw[k]), fmaf(bf16_lo(ow[k]), bf16_lo(dw[k]), s));
  }
  s += __shfl_xor_sync(0xffffffffu, s, 1);
  s += __shfl_xor_sync(0xffffffffu, s, 2);
  s += __shfl_xor_sync(0xffffffffu, s, 4);
  if (r < rows && part == 0) delta[(b * io.heads + h) * io.seq + row] = s;
}

// dQ elements 8 part .. 8 part + 7 of row r as BF16 words: BF16(scale x the FP32 sum). kSwizzled: the
// warpgroup-MMA kernel's accumulator, whose rows keep their 8-float groups at group ^ (row & 3) (see there).
template <bool kSwizzled>
__device__ __forceinline__ uint4 dq_words(const float* __restrict__ dq_acc, int64_t r, int part, float sc) {
  const int stored = kSwizzled ? part ^ static_cast<int>(r & 3) : part;
  const float4* src = reinterpret_cast<const float4*>(dq_acc + r * kAttnHeadDim + stored * 8);
  const float4 x = __ldcs(src), y = __ldcs(src + 1);
  return make_uint4(pack_bf16x2_finite(x.x * sc, x.y * sc), pack_bf16x2_finite(x.z * sc, x.w * sc), pack_bf16x2_finite(y.x * sc, y.y * sc),
                    pack_bf16x2_finite(y.z * sc, y.w * sc));
}

// dQ in BF16, 8 threads a row.
template <bool kSwizzled>
__global__ void attention_dq_convert_kernel(AttentionBackwardIO io, const float* __restrict__ dq_acc) {
  const int64_t rows = io.batch * io.heads * io.seq;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 8) + threadIdx.x / 8;
  if (r >= rows) return;
  const int part = threadIdx.x & 7;
  const int64_t b = r / (io.heads * io.seq), h = (r / io.seq) % io.heads, row = r % io.seq;
  *reinterpret_cast<uint4*>(io.dq + b * io.dq_st.batch + h * io.dq_st.head + row * io.dq_st.row + part * 8) =
      dq_words<kSwizzled>(dq_acc, r, part, io.scale);
}

// dQ in BF16 rotated back by RoPE (io.rope_cos, io.rope_sin), 4 threads a row: thread p rotates the
// pairs (8 p + e, 32 + 8 p + e) as the fused RoPE's backward does (rope_tables8, rope_pair, store8),
// from the values the conversion above would have stored, so the bits are the two passes' bits.
template <bool kSwizzled>
__global__ void attention_dq_rope_kernel(AttentionBackwardIO io, const float* __restrict__ dq_acc) {
  constexpr int kHalf = kAttnHeadDim / 2;
  const int64_t rows = io.batch * io.heads * io.seq;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 4) + threadIdx.x / 4;
  if (r >= rows) return;
  const int p = threadIdx.x & 3;
  const int64_t b = r / (io.heads * io.seq), h = (r / io.seq) % io.heads, row = r % io.seq;
  Raw8<true> lo_raw, hi_raw;
  lo_raw.q[0] = dq_words<kSwizzled>(dq_acc, r, p, io.scale);
  hi_raw.q[0] = dq_words<kSwizzled>(dq_acc, r, p + kHalf / 8, io.scale);
  float a[8], bb[8], c[8], sn[8];
  unpack8<true>(lo_raw, a);
  unpack8<true>(hi_raw, bb);
  rope_tables8<true>(io.rope_cos, io.rope_sin, kHalf, row, 8 * p, /*inverse=*/true, c, sn);
#pragma unroll
  for (int e = 0; e < 8; ++e) rope_pair(true, a[e], bb[e], c[e], sn[e], a[e], bb[e]);
  uint16_t* dst = io.dq + b * io.dq_st.batch + h * io.dq_st.head + row * io.dq_st.row;
  store8<true>(dst, 8 * p, a);
  store8<true>(dst, kHalf + 8 * p, bb);
}

// 2^x by the special-function unit alone (relative error about 2^-22, flushes subnormals): P is
// rounded to BF16 right after.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// A thread block's work: key block j of KV head kvh of batch b, from a ticket taken as it starts, not
// from blockIdx (whose dispatch order CUDA does not promise): every block this one waits on took an
// earlier ticket, so it is running or done. The last key block first.
struct BlockWork {
  int j, group, iterations;
  int64_t b, kvh;
};
__device__ __forceinline__ BlockWork take_work(const AttentionBackwardIO& io, unsigned* counters, int nblocks) {
  __shared__ unsigned ticket_s;
  if (threadIdx.x == 0) ticket_s = atomicAdd(counters + io.batch * io.heads * nblocks, 1u);
  __syncthreads();
  BlockWork w;
  w.j = nblocks - 1 - static_cast<int>(ticket_s % nblocks);
  const int64_t bkv = ticket_s / nblocks;
  w.b = bkv / io.kv_heads, w.kvh = bkv % io.kv_heads;
  w.group = static_cast<int>(io.heads / io.kv_heads);
  // Iteration it: query block j + it / group, query head kvh * group + it % group. Query blocks outside,
  // so the key block after this one, which adds into each query block's dQ first, is `group`
  // iterations ahead of it.
  w.iterations = w.group * (nblocks - w.j);
  return w;
}

// Iteration it's Q and dO tiles into shared memory, its lse and delta into stats[buf] (lse at
// stats + 64 buf, delta at stats + 128 + 64 buf floats).
__device__ __forceinline__ void load_query_block(const AttentionBackwardIO& io, const float* delta, const BlockWork& w, int it, uint32_t sQ,
                                                 uint32_t sDo, uint32_t stats, int buf, int tid) {
  const int64_t hq = w.kvh * w.group + it % w.group, row0 = static_cast<int64_t>(w.j + it / w.group) * kAttnBlock;
  load_tile(sQ, io.q + w.b * io.q_st.batch + hq * io.q_st.head + row0 * io.q_st.row, io.q_st.row, tid);
  load_tile(sDo, io.dout + w.b * io.dout_st.batch + hq * io.dout_st.head + row0 * io.dout_st.row, io.dout_st.row, tid);
  const int64_t r = (w.b * io.heads + hq) * io.seq + row0;
  if (tid < 16) cp_async16(stats + (buf * 64 + tid * 4) * 4, io.lse + r + tid * 4);
  else if (tid < 32) cp_async16(stats + (128 + buf * 64 + (tid - 16) * 4) * 4, delta + r + (tid - 16) * 4);
}

// The block's K and V tiles, then iteration 0's query block into buffer 0: two copy groups.
__device__ __forceinline__ void load_first(const AttentionBackwardIO& io, const float* delta, const BlockWork& w, uint32_t sK, uint32_t sV,
                                           uint32_t sQ0, uint32_t sDo0, uint32_t stats, int tid) {
  const int64_t key0 = static_cast<int64_t>(w.j) * kAttnBlock;
  load_tile(sK, io.k + w.b * io.k_st.batch + w.kvh * io.k_st.head + key0 * io.k_st.row, io.k_st.row, tid);
  load_tile(sV, io.v + w.b * io.v_st.batch + w.kvh * io.v_st.head + key0 * io.v_st.row, io.v_st.row, tid);
  cp_async_commit();
  load_query_block(io, delta, w, 0, sQ0, sDo0, stats, 0, tid);
  cp_async_commit();
}

// P^T = exp(scale S^T - lse) (zero above the diagonal), dS^T = P^T (dP^T - delta), in place on this
// warp's 16 keys x 64 queries (mma's C layout).
__device__ __forceinline__ void scores_to_grads(float (&s)[8][4], float (&dp)[8][4], const float* lse, const float* dlt, bool diagonal,
                                                float sl2, int warp, int g, int t) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = n * 8 + 2 * t + (e & 1), row = warp * 16 + g + (e >> 1) * 8;
      float p = ex2_approx(fmaf(s[n][e], sl2, -lse[col] * kLog2e));
      if (diagonal && row > col) p = 0.0f;
      s[n][e] = p;
      dp[n][e] = p * (dp[n][e] - dlt[col]);
    }
}

// k16 step kq over queries of P^T and dS^T as A operands (BF16; two score tiles make one step), and
// dS^T's part to shared memory for dQ, as the values the dK product takes.
__device__ __forceinline__ void pack_step(const float (&s)[8][4], const float (&dp)[8][4], int kq, uint32_t (&ap)[4], uint32_t (&ad)[4],
                                          uint32_t sDs, int warp, int g, int t) {
  ap[0] = pack_bf16x2_finite(s[2 * kq][0], s[2 * kq][1]);
  ap[1] = pack_bf16x2_finite(s[2 * kq][2], s[2 * kq][3]);
  ap[2] = pack_bf16x2_finite(s[2 * kq + 1][0], s[2 * kq + 1][1]);
  ap[3] = pack_bf16x2_finite(s[2 * kq + 1][2], s[2 * kq + 1][3]);
  ad[0] = pack_bf16x2_finite(dp[2 * kq][0], dp[2 * kq][1]);
  ad[1] = pack_bf16x2_finite(dp[2 * kq][2], dp[2 * kq][3]);
  ad[2] = pack_bf16x2_finite(dp[2 * kq + 1][0], dp[2 * kq + 1][1]);
  ad[3] = pack_bf16x2_finite(dp[2 * kq + 1][2], dp[2 * kq + 1][3]);
  const int r0 = warp * 16 + g, c0 = kq * 16 + 2 * t;
  st_shared(sDs + swz(r0, c0), ad[0]);
  st_shared(sDs + swz(r0 + 8, c0), ad[1]);
  st_shared(sDs + swz(r0, c0 + 8), ad[2]);
  st_shared(sDs + swz(r0 + 8, c0 + 8), ad[3]);
}

// Two values as the fused ops' store8 writes them (kernels/fused/fused_device.cuh): round to nearest even,
// NaNs made canonical.
__device__ __forceinline__ uint32_t pack_bf16x2_stored(float lo, float hi) {
  if (lo == lo && hi == hi) return pack_bf16x2_finite(lo, hi);
  return static_cast<uint32_t>(f32_to_bf16_bits(canon_nan(lo))) | (static_cast<uint32_t>(f32_to_bf16_bits(canon_nan(hi))) << 16);
}

// The block's dK (times the scale) and dV in BF16. With RoPE's tables dK is rotated back: the pairs
// (c, c + 32) of a key row sit in this thread's column blocks n and n + 4, rotated from their BF16 values
// as the fused RoPE's backward rotates them (rope_tables8, rope_pair, store8), so the bits are those of
// the two passes.
__device__ __forceinline__ void store_dk_dv(const AttentionBackwardIO& io, const BlockWork& w, const float (&dk)[8][4], const float (&dv)[8][4],
                                            int warp, int g, int t) {
  constexpr int kHalf = kAttnHeadDim / 2;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = static_cast<int64_t>(w.j) * kAttnBlock + warp * 16 + g + h * 8;
      const int col = n * 8 + 2 * t;
      uint32_t* dk_row = reinterpret_cast<uint32_t*>(io.dk + w.b * io.dk_st.batch + w.kvh * io.dk_st.head + row * io.dk_st.row);
      *reinterpret_cast<uint32_t*>(io.dv + w.b * io.dv_st.batch + w.kvh * io.dv_st.head + row * io.dv_st.row + col) =
          pack_bf16x2_finite(dv[n][2 * h], dv[n][2 * h + 1]);
      if (!io.rope_cos) {
        dk_row[col / 2] = pack_bf16x2_finite(dk[n][2 * h] * io.scale, dk[n][2 * h + 1] * io.scale);
      } else if (n < 4) {
        const uint32_t lo = pack_bf16x2_finite(dk[n][2 * h] * io.scale, dk[n][2 * h + 1] * io.scale);
        const uint32_t hi = pack_bf16x2_finite(dk[n + 4][2 * h] * io.scale, dk[n + 4][2 * h + 1] * io.scale);
        float a[2] = {bits_f32(lo << 16), bits_f32(lo & 0xffff0000u)}, b[2] = {bits_f32(hi << 16), bits_f32(hi & 0xffff0000u)};
        const float2 c = *reinterpret_cast<const float2*>(io.rope_cos + row * kHalf + col);
        const float2 sn = *reinterpret_cast<const float2*>(io.rope_sin + row * kHalf + col);
        rope_pair(true, a[0], b[0], round_to_bf16(c.x), -round_to_bf16(sn.x), a[0], b[0]);
        rope_pair(true, a[1], b[1], round_to_bf16(c.y), -round_to_bf16(sn.y), a[1], b[1]);
        dk_row[col / 2] = pack_bf16x2_stored(a[0], a[1]);
        dk_row[(kHalf + col) / 2] = pack_bf16x2_stored(b[0], b[1]);
      }
    }
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 2)
    attention_backward_kernel(AttentionBackwardIO io, const float* __restrict__ delta, float* __restrict__ dq_acc, unsigned* counters) {
  extern __shared__ __align__(128) unsigned char smem[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int nblocks = static_cast<int>(io.seq / kAttnBlock);
  const BlockWork w = take_work(io, counters, nblocks);
  const int j = w.j, group = w.group, iterations = w.iterations;
  const int64_t b = w.b, kvh = w.kvh;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sK = base + kOffK, sDs = base + kOffDs;
  float* stats = reinterpret_cast<float*>(smem + kOffStats);  // lse[2][64], then delta[2][64]

  load_first(io, delta, w, sK, sDs, base + kOffQ, base + kOffDo, base + kOffStats, tid);  // V's tile in dS^T's place
  auto issue = [&](int it, int buf) {
    load_query_block(io, delta, w, it, base + kOffQ + buf * kTile, base + kOffDo + buf * kTile, base + kOffStats, buf, tid);
  };
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
    scores_to_grads(s, dp, lse, dlt, i == j, sl2, warp, g, t);
    // dV += P^T dO, dK += dS^T Q: A from the registers (two score tiles make one k16 step over queries).
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) {
      uint32_t ap[4], ad[4];
      pack_step(s, dp, kq, ap, ad, sDs, warp, g, t);
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
        if (kMode == 0) wait_for_arrivals(counter, seen, 4u * static_cast<unsigned>(i - j), j, i, hq);
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

  store_dk_dv(io, w, dk, dv, warp, g, t);
}

// ---- The same backward on Hopper's warpgroup MMAs (wgmma, sm_90a) ----
//
// The thread block's 4 warps are one warpgroup and each product is one 64 x 64 x 64 warpgroup MMA
// (4 of k16): its shared-memory operands are read once for the 4 warps, where each warp of the
// kernel above reads every Q and dO tile itself (that kernel is bound by shared-memory reads). The
// tiles keep the layout above, which is the MMAs' 128-byte swizzle when a tile starts on 1024 bytes.
// S^T = K Q^T and dP^T = V dO^T take K and V (keys x head dims) and Q and dO (queries x head dims)
// from shared memory, all K-major; dV += P^T dO and dK += dS^T Q take P^T and dS^T from registers
// (the warp's rows, the layout the score MMAs leave them in) and dO and Q N-major; dQ = dS K takes
// dS^T from shared memory M-major and K N-major.
//
// dQ's terms go through shared memory to the accumulator as bulk asynchronous reductions (one
// instruction a warp for its 16 rows, 4 KB), in the order and with the counters above: a warp adds
// once the blocks before it have counted themselves in, and counts itself in after its own reduction
// has completed. Each accumulator row keeps its 8-float groups at group ^ (row & 3), which spreads a
// warp's staging writes over the shared-memory banks; the conversion to BF16 undoes it.

// Shared memory: K, V, two Q and two dO buffers, dS^T, the dQ staging tile (FP32, 16 KB), then lse and
// delta for two query blocks, and the slack to a 1024-byte start.
constexpr int kWgSmemBytes = 7 * kTile + kAttnBlock * kAttnHeadDim * 4 + 4 * kAttnBlock * 4 + 1024;

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define UFP4_WGMMA 1
#endif

#ifdef UFP4_WGMMA
constexpr int kWgOffV = kTile, kWgOffQ = 2 * kTile, kWgOffDo = 4 * kTile, kWgOffDs = 6 * kTile, kWgOffDq = 7 * kTile;
constexpr int kWgOffStats = kWgOffDq + kAttnBlock * kAttnHeadDim * 4;

// A shared-memory matrix descriptor of a 128-byte-swizzled operand: start address, the strides
// between 8-row groups (1024 bytes) in both fields (the MN- or K-direction repeat is never used here:
// every operand is 64 elements wide), swizzle mode 1.
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(1024 >> 4) << 16) | (static_cast<uint64_t>(1024 >> 4) << 32) |
         (1ull << 62);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
// Bulk asynchronous copy / FP32 add of `bytes` from shared to global memory, and the waits on them.
__device__ __forceinline__ void bulk_store(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_add(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_done() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void st_shared2(uint32_t addr, float a, float b) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b));
}
// Keeps the compiler from moving reads or writes of an accumulator across the asynchronous MMAs.
__device__ __forceinline__ void fence_acc(float (&d)[8][4]) {
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+f"(d[n][e])::"memory");
}

#define UFP4_WG_ACC                                                                                                                            \
  "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]),       \
      "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]),  \
      "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]),  \
      "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
#define UFP4_WG_OUT                                                                                                                            \
  "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]),       \
      "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]),  \
      "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]),  \
      "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3])
#define UFP4_WG_D                                                                                                                     \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, " \
  "%28, %29, %30, %31}"

// d += A B (kFirst: d = A B, d's earlier values dead to the compiler), 64 x 64 x 16, both operands in
// shared memory; kTA / kTB: A M-major / B N-major.
template <int kTA, int kTB, bool kFirst>
__device__ __forceinline__ void wgmma_ss(float (&d)[8][4], uint64_t a, uint64_t b) {
  if constexpr (kFirst)
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 0, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " UFP4_WG_D ", %32, %33, p, 1, 1, %34, %35;\n}\n"
        : UFP4_WG_OUT
        : "l"(a), "l"(b), "n"(kTA), "n"(kTB));
  else
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " UFP4_WG_D ", %32, %33, 1, 1, 1, %34, %35;\n"
                 : UFP4_WG_ACC
                 : "l"(a), "l"(b), "n"(kTA), "n"(kTB));
}
// d = A B over k = 64 (four k16 steps), both operands in shared memory from a and b, a step a_step and
// b_step bytes on.
template <int kTA, int kTB>
__device__ __forceinline__ void wgmma_product(float (&d)[8][4], uint32_t a, uint32_t b, uint32_t a_step, uint32_t b_step) {
  wgmma_ss<kTA, kTB, true>(d, wg_desc(a), wg_desc(b));
#pragma unroll
  for (uint32_t k = 1; k < 4; ++k) wgmma_ss<kTA, kTB, false>(d, wg_desc(a + k * a_step), wg_desc(b + k * b_step));
}
// d += A B, 64 x 64 x 16, A from registers (each warp its 16 rows, mma.sync's A layout); kTB: B N-major.
template <int kTB>
__device__ __forceinline__ void wgmma_rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " UFP4_WG_D ", {%32, %33, %34, %35}, %36, 1, 1, 1, %37;\n"
               : UFP4_WG_ACC
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTB));
}
#endif

// Three blocks an SM (at most 168 registers a thread): 3% faster than two at dense-113m's shape.
template <int kMode>
__global__ void __launch_bounds__(kThreads, 3)
    attention_backward_wgmma_kernel(AttentionBackwardIO io, const float* __restrict__ delta, float* __restrict__ dq_acc, unsigned* counters) {
#ifdef UFP4_WGMMA
  extern __shared__ __align__(128) unsigned char smem_raw[];
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int nblocks = static_cast<int>(io.seq / kAttnBlock);
  const BlockWork w = take_work(io, counters, nblocks);
  const int j = w.j, group = w.group, iterations = w.iterations;
  const int64_t b = w.b, kvh = w.kvh;
  const uint32_t raw = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  const uint32_t base = (raw + 1023u) & ~1023u;  // the swizzle's atoms start on 1024 bytes
  const uint32_t sK = base, sV = base + kWgOffV, sDs = base + kWgOffDs;
  const uint32_t sDqw = base + kWgOffDq + warp * 16 * kAttnHeadDim * 4;  // this warp's 16 staging rows
  float* stats = reinterpret_cast<float*>(smem_raw + (base - raw) + kWgOffStats);  // lse[2][64], then delta[2][64]

  load_first(io, delta, w, sK, sV, base + kWgOffQ, base + kWgOffDo, base + kWgOffStats, tid);
  auto issue = [&](int it, int buf) {
    load_query_block(io, delta, w, it, base + kWgOffQ + buf * kTile, base + kWgOffDo + buf * kTile, base + kWgOffStats, buf, tid);
  };

  float dk[8][4], dv[8][4], s[8][4], dp[8][4], dq[8][4];  // s, dp and dq: each product's first step writes them
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.0f;
  const float sl2 = io.scale * kLog2e;

  unsigned* pending = nullptr;  // the counter this warp counts itself into once its reduction has completed
  for (int it = 0; it < iterations; ++it) {
    const int buf = it & 1;
    // The other buffer's last readers (the previous iteration's MMAs) have completed.
    if (it + 1 < iterations) issue(it + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    fence_proxy_async_smem();  // the copies, seen by the MMAs' (asynchronous) reads
    __syncthreads();
    const int64_t hq = kvh * group + it % group;
    const int i = j + it / group;
    const uint32_t sQ = base + kWgOffQ + buf * kTile, sDo = base + kWgOffDo + buf * kTile;
    const float* lse = stats + buf * 64;
    const float* dlt = stats + 128 + buf * 64;

    // S^T = K Q^T and dP^T = V dO^T: K-major operands, a k16 step 32 bytes along the swizzled rows.
    wg_fence();
    wgmma_product<0, 0>(s, sK, sQ, 32, 32);
    wgmma_product<0, 0>(dp, sV, sDo, 32, 32);
    wg_commit();
    wg_wait0();
    fence_acc(s);
    fence_acc(dp);

    scores_to_grads(s, dp, lse, dlt, i == j, sl2, warp, g, t);
    uint32_t ap[4][4], ad[4][4];
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) pack_step(s, dp, kq, ap[kq], ad[kq], sDs, warp, g, t);
    // dV += P^T dO, dK += dS^T Q: a k16 step over queries is 16 rows, 2048 bytes.
    fence_acc(dv);
    fence_acc(dk);
    wg_fence();
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) wgmma_rs<1>(dv, ap[kq], wg_desc(sDo + kq * 2048));
#pragma unroll
    for (int kq = 0; kq < 4; ++kq) wgmma_rs<1>(dk, ad[kq], wg_desc(sQ + kq * 2048));
    wg_commit();
    const int64_t qrow = (b * io.heads + hq) * io.seq + static_cast<int64_t>(i) * kAttnBlock;
    unsigned* counter = counters + (b * io.heads + hq) * nblocks + i;
    fence_proxy_async_smem();  // dS^T, seen by the dQ product
    __syncthreads();           // dS^T complete

    if (kMode == 3) {
      wg_wait0();
      fence_acc(dv);
      fence_acc(dk);
      continue;
    }
    // The counter, read before the dQ product: its reply comes while the product runs.
    unsigned seen = 0;
    if ((kMode == 0 || kMode == 4) && lane == 0) seen = load_relaxed(counter);
    // This key block's term of dQ = dS K: dS^T M-major, K N-major, a k16 step over keys 2048 bytes.
    wg_fence();
    wgmma_product<1, 1>(dq, sDs, sK, 2048, 2048);
    wg_commit();
    wg_wait0();
    fence_acc(dq);
    fence_acc(dv);
    fence_acc(dk);

    // Stage the warp's 16 rows (the previous reduction has read them out by now), float pair 4n + t
    // of row 8h + g at (4n + t) ^ 4(g & 3).
    if (lane == 0 && it > 0) bulk_wait_read();
    __syncwarp();
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        st_shared2(sDqw + (g + 8 * h) * kAttnHeadDim * 4 + (((4 * n + t) ^ ((g & 3) << 2)) << 3), dq[n][2 * h], dq[n][2 * h + 1]);
    fence_proxy_async_smem();  // the staged rows, seen by the bulk reduction's reads
    __syncwarp();
    if (lane == 0) {
      // After key blocks i, i-1, ..., j+1 (block i stores, the others add): wait for their 4 (i - j)
      // arrivals; count the previous iteration's reduction in once it has completed.
      if (kMode == 0 || kMode == 4) {
        if (pending) {
          bulk_wait_done();
          fence_proxy_async_global();
          red_release_add(pending, 1u);
        }
        if (kMode == 0) wait_for_arrivals(counter, seen, 4u * static_cast<unsigned>(i - j), j, i, hq);
        fence_acquire();
        fence_proxy_async_global();
      }
      float* dst = dq_acc + (qrow + warp * 16) * kAttnHeadDim;
      if (i == j || kMode == 2) bulk_store(dst, sDqw, 16 * kAttnHeadDim * 4);
      else bulk_add(dst, sDqw, 16 * kAttnHeadDim * 4);
      bulk_commit();
    }
    // The warp whole again before the next iteration's barrier and warpgroup MMAs, which are
    // .aligned: all 32 lanes must execute them together, and lane 0 may have waited above.
    __syncwarp();
    pending = (kMode == 0 || kMode == 4) && j > 0 ? counter : nullptr;
  }
  if (lane == 0) {
    bulk_wait_done();  // also: no reduction reads the staging rows after the block has exited
    if (pending) {
      fence_proxy_async_global();
      red_release_add(pending, 1u);
    }
  }
  __syncwarp();

  store_dk_dv(io, w, dk, dv, warp, g, t);
#else
  (void)io, (void)delta, (void)dq_acc, (void)counters;
  __trap();  // never launched: the host takes this kernel only where it was built (wgmma_device)
#endif
}

// Whether the warpgroup-MMA kernel runs: this file built for sm_90a (CMake defines UFP4_SM90A_BUILT when
// TORCH_CUDA_ARCH_LIST has 9.0a) and the current device of compute capability 9.0.
bool wgmma_device() {
#ifdef UFP4_SM90A_BUILT
  int dev = 0, major = 0, minor = 0;
  check_cuda(cudaGetDevice(&dev), "attention backward (device)");
  check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "attention backward (device)");
  check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "attention backward (device)");
  return major == 9 && minor == 0;
#else
  return false;
#endif
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
  if ((io.rope_cos == nullptr) != (io.rope_sin == nullptr)) return false;
  return io.rope_cos == nullptr || (aligned(io.rope_cos) && aligned(io.rope_sin));
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
  attention_delta_kernel<<<static_cast<unsigned>((rows + 31) / 32), 256, 0, stream>>>(io, delta, counters, static_cast<int64_t>(w.n_counters));
  check_launch("attention backward (delta)");
  static std::once_flag smem_set;
  std::call_once(smem_set, [] {
    for (auto f : {attention_backward_kernel<0>, attention_backward_kernel<2>, attention_backward_kernel<3>, attention_backward_kernel<4>})
      check_cuda(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), "attention backward (shared memory)");
    if (wgmma_device())  // (75 KB: more than some GPUs that run the other kernel allow)
      for (auto f : {attention_backward_wgmma_kernel<0>, attention_backward_wgmma_kernel<2>, attention_backward_wgmma_kernel<3>,
                     attention_backward_wgmma_kernel<4>})
        check_cuda(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgSmemBytes), "attention backward (shared memory)");
  });
  const dim3 grid(static_cast<unsigned>(io.seq / kAttnBlock), static_cast<unsigned>(io.batch * io.kv_heads));
  const int probe = mode & 7;
  const bool wgmma = !(mode & 8) && wgmma_device();  // mode 8 + probe: the mma.sync kernel on Hopper too
  if (wgmma) {
    auto f = probe == 0 ? attention_backward_wgmma_kernel<0>
             : probe == 2 ? attention_backward_wgmma_kernel<2>
             : probe == 3 ? attention_backward_wgmma_kernel<3>
                          : attention_backward_wgmma_kernel<4>;
    f<<<grid, kThreads, kWgSmemBytes, stream>>>(io, delta, acc, counters);
  } else {
    auto f = probe == 0 ? attention_backward_kernel<0> : probe == 2 ? attention_backward_kernel<2> : probe == 3 ? attention_backward_kernel<3> : attention_backward_kernel<4>;
    f<<<grid, kThreads, kSmemBytes, stream>>>(io, delta, acc, counters);
  }
  check_launch("attention backward");
  if (io.rope_cos) {
    const unsigned blocks = static_cast<unsigned>((rows + 63) / 64);
    if (wgmma) attention_dq_rope_kernel<true><<<blocks, 256, 0, stream>>>(io, acc);
    else attention_dq_rope_kernel<false><<<blocks, 256, 0, stream>>>(io, acc);
  } else {
    const unsigned blocks = static_cast<unsigned>((rows + 31) / 32);
    if (wgmma) attention_dq_convert_kernel<true><<<blocks, 256, 0, stream>>>(io, acc);
    else attention_dq_convert_kernel<false><<<blocks, 256, 0, stream>>>(io, acc);
  }
  check_launch("attention backward (dQ)");
}

}  // namespace ufp4
