// Causal attention's backward for deterministic training: dQ, dK, dV of softmax(scale Q K^T) V with
// grouped KV heads, given the forward's output O and its log-sum-exp, head dimension 64, BF16.
// Raw pointers, no LibTorch types.
//
// The GPU kernels (attention_backward_cuda.cu) give each (batch, KV head, block of 64 keys) one thread
// block: it walks its KV head's query heads and the query blocks at and after its keys, recomputes
// P = exp(scale S - lse) and forms dV += P^T dO, dK += dS^T Q in registers (dS = P (dP - delta),
// dP = dO V^T, delta = rowsum(dO O)), and dQ of the query block as dS K. dQ of a query block has one
// term per key block at or before it; the blocks add their terms in a fixed order, the last key block
// first, through an FP32 accumulator and a counter each query block waits on (no floating-point
// atomics in an unfixed order), and a last pass writes dQ in BF16 (dK and dV are written by the
// blocks; dQ and dK rotated back by RoPE where asked). Reruns are therefore bit-identical. Products run
// on the tensor cores (BF16 operands, FP32 sums), P and dS rounded to BF16 before their products, as
// flash attention does. On Hopper (built for sm_90a) the products are warpgroup MMAs and the dQ terms
// bulk asynchronous reductions; elsewhere warp MMAs (mma.sync) and FP32 reductions in L2. The two sum
// in different orders: each is deterministic, not equal to the other.
//
// The CPU reference (attention_backward_reference.cpp) computes the same gradients in double from the
// same inputs: the tests hold the kernel to it within BF16's rounding of P, dS and the outputs.
#pragma once
#include <cstddef>
#include <cstdint>

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

constexpr int kAttnHeadDim = 64;  // the one head dimension the kernel takes
constexpr int kAttnBlock = 64;    // keys and queries a tile

// Element (b, h, s, d) of a [B, heads, S, 64] tensor at ptr + b * batch + h * head + s * row + d.
struct AttnStrides {
  int64_t batch = 0, head = 0, row = 0;
};

struct AttentionBackwardIO {
  int64_t batch = 0, heads = 0, kv_heads = 0, seq = 0;
  float scale = 0.125f;  // the softmax's scale of Q K^T
  // BF16 inputs: q, o, dout [B, heads, S, 64]; k, v [B, kv_heads, S, 64]. Query head h reads KV head
  // h / (heads / kv_heads).
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dout = nullptr;
  AttnStrides q_st, k_st, v_st, o_st, dout_st;
  const float* lse = nullptr;  // [B, heads, S] contiguous: natural log of sum_k exp(scale q.k) over the causal keys
  // BF16 outputs, shaped as q, k, v.
  uint16_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  AttnStrides dq_st, dk_st, dv_st;
  // Optional RoPE tables cos, sin [>= seq, 32] FP32, 16-byte aligned: dQ and dK are then written
  // rotated back (the gradients of the rotations' inputs), bit for bit what the fused RoPE's backward
  // (kernels/fused/fused_kernels.h, cuda_rope with inverse) makes of the plain ones, in the same passes.
  const float *rope_cos = nullptr, *rope_sin = nullptr;
  void* workspace = nullptr;  // attention_backward_workspace_bytes(io), 16-byte aligned
};

// What the CUDA kernel takes: S a multiple of 64, kv_heads dividing heads, every row 16-byte aligned
// (strides multiples of 8 elements, 16-byte aligned pointers).
bool attention_backward_cuda_applies(const AttentionBackwardIO& io);

// delta [B, heads, S] and the dQ accumulator [B, heads, S, 64] (FP32), then the query blocks' counters
// and the blocks' ticket.
size_t attention_backward_workspace_bytes(const AttentionBackwardIO& io);

// The backward on `stream` (the caller's); clears the counters itself (in its first pass, no memset).
void cuda_attention_backward(const AttentionBackwardIO& io, cudaStream_t stream);
// Timing probes (dev/), not deterministic: 2 dQ terms stored unordered, 3 no dQ, 4 no waiting; plus 8:
// the warp-MMA kernel on Hopper too (8 alone: deterministic).
void cuda_attention_backward_mode(const AttentionBackwardIO& io, cudaStream_t stream, int mode);

// CPU reference on FP32 values (each an exact BF16 value in the tests), dense [B, heads or kv_heads,
// S, 64] arrays, sums in double; lse [B, heads, S].
void reference_attention_backward(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, float scale, const float* q, const float* k,
                                  const float* v, const float* o, const float* dout, const float* lse, float* dq, float* dk, float* dv);

// CPU reference of the forward, for the tests' inputs: o and lse of causal attention, in double.
void reference_attention_forward(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, float scale, const float* q, const float* k,
                                 const float* v, float* o, float* lse);

}  // namespace ufp4
