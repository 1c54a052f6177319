// Fused training ops of the model (RMSNorm, cross entropy with its gradient, SwiGLU, rotary position
// embedding), one pass over memory each where LibTorch's composition makes many. Raw pointers, no LibTorch types;
// the CPU reference follows the CUDA kernels' reduction order, so the two agree bit for bit.
//
// Reduction order (the contract both sides follow; a + b == b + a bitwise, so a tree is well defined):
// - A row of n elements is split over P partners (RMSNorm: the 32 lanes of a warp; cross entropy: the
//   256 threads of a block): element i goes to partner (i / 8) % P, which folds its elements in
//   increasing i. Partners combine by the butterfly tree v[p] += v[p ^ h], h = 1, 2, ..., P/2 (within
//   a warp first, as shuffles go, then across warps).
// - exp and log are our own (fma-only range reduction and polynomials, ~1 ulp), not the platform's,
//   whose results differ between glibc and CUDA.
// - RMSNorm's weight gradient: rows in groups of kRmsGroupRows; a group's sum runs over its rows in
//   order; the group sums of a column are folded by 32 strands (strand s takes groups s, s + 32, ...)
//   and the strands by the butterfly tree.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/numerics/float_bits.h"
#include "kernels/quantize/quant_spec.h"  // DType

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

constexpr int kRmsLanes = 32;        // partners of an RMSNorm row
constexpr int kCeThreads = 256;      // partners of a cross-entropy row
constexpr int kRmsGroupRows = 16;    // rows a weight-gradient group sums (a warp's share)
constexpr int kStrands = 32;         // strands folding the group sums

// Products and sums that must not be contracted into an FMA (the two sides would round differently).
UFP4_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
UFP4_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// e^x: x = n ln2 + r (Cody-Waite, |r| <= ln2 / 2), degree-7 Taylor of e^r, times 2^n. 0 below
// -104 (under the smallest subnormal), inf above 88.8, NaN for NaN.
UFP4_HD float exp_f32(float x) {
  const float kLog2e = 1.44269502f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.42860677e-6f;  // kLn2Hi n is exact for |n| < 2^11
  // 1.5 2^23: adding it rounds |t| < 2^22 to an integer (to nearest even, as rintf) held in the low mantissa bits.
  const float kShift = 12582912.0f;
  float n, shifted = 0.0f;
  const bool common = fabsf(x) <= 86.0f;  // |n| <= 125: p 2^n is normal, so adding n to the exponent field is exact
  if (common) {
    // n without a float-to-integer conversion (a quarter-rate instruction on the GPU); same n as the rintf below.
    shifted = add_rn(mul_rn(x, kLog2e), kShift);
    n = add_rn(shifted, -kShift);
  } else {
    if (!(x > -104.0f)) return x != x ? x : 0.0f;
    if (x > 88.8f) return INFINITY;
    n = rintf(mul_rn(x, kLog2e));
  }
  float r = fmaf(-n, kLn2Hi, x);
  r = fmaf(-n, kLn2Lo, r);
  float p = 1.0f / 5040.0f;
  p = fmaf(p, r, 1.0f / 720.0f);
  p = fmaf(p, r, 1.0f / 120.0f);
  p = fmaf(p, r, 1.0f / 24.0f);
  p = fmaf(p, r, 1.0f / 6.0f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  // p in [0.70, 1.42]. shifted's bits are those of 1.5 2^23 plus n; shifted left by 23 only n's remain.
  if (common) return bits_f32(f32_bits(p) + (f32_bits(shifted) << 23));
  const int ni = static_cast<int>(n);
  if (ni >= -125 && ni <= 127) return bits_f32(f32_bits(p) + (static_cast<uint32_t>(ni) << 23));
  return ldexpf(p, ni);  // correctly rounded where the result is subnormal (or overflows)
}

// ln x for finite x >= 1 (a softmax denominator): x = 2^e m, m in [sqrt(1/2), sqrt(2)),
// ln m = 2 atanh(u), u = (m - 1) / (m + 1), |u| < 0.172, odd series to u^9.
UFP4_HD float log_f32(float x) {
  if (!(x >= 1.0f) || x == INFINITY) return x == INFINITY ? x : NAN;
  int e = static_cast<int>((f32_bits(x) >> 23) & 0xff) - 127;
  float m = bits_f32((f32_bits(x) & 0x007fffffu) | 0x3f800000u);
  if (m > 1.41421356f) { m = mul_rn(m, 0.5f); ++e; }
  const float u = (m - 1.0f) / (m + 1.0f), u2 = mul_rn(u, u);
  float p = 1.0f / 9.0f;
  p = fmaf(p, u2, 1.0f / 7.0f);
  p = fmaf(p, u2, 1.0f / 5.0f);
  p = fmaf(p, u2, 1.0f / 3.0f);
  p = fmaf(p, u2, 1.0f);
  const float lm = mul_rn(2.0f * u, p);
  const float fe = static_cast<float>(e);
  return fmaf(fe, 0.693145751953125f, fmaf(fe, 1.42860677e-6f, lm));
}

// Outputs carry one NaN (the platforms' arithmetic makes NaNs of different sign and payload).
UFP4_HD float canon_nan(float v) { return v != v ? NAN : v; }

// NaN-propagating max (the row max of a softmax); commutative bit for bit (max(-0, +0) = +0).
UFP4_HD float max_nan(float a, float b) {
  if (a != a || b != b) return NAN;
  if (a == b) return bits_f32(f32_bits(a) & f32_bits(b));
  return a > b ? a : b;
}

// --- RMSNorm over the last dimension: y = x r w, r = 1 / sqrt(sum(x^2) / d + eps) ---------------
// x, y, dy, dx: [rows, d] in `dtype` (kF32 or kBF16); w: [d] FP32; r: [rows] FP32. The backward
// writes dx and the weight gradient dw [d] FP32, using `partials` (rms_norm_partials() floats).
struct RmsNormIO {
  DType dtype = DType::kBF16;
  int64_t rows = 0, d = 0;
  float eps = 1e-6f;
  const void* x = nullptr;
  const float* w = nullptr;
  void* y = nullptr;       // forward
  float* r = nullptr;      // forward writes, backward reads
  const void* dy = nullptr;
  void* dx = nullptr;
  float* dw = nullptr;
  float* partials = nullptr;
  // The residual add before the norm (null: none). Forward: x + residual, rounded to dtype as LibTorch's
  // add rounds it, goes to `sum` and is normalized. Backward (x: that sum): dsum, the sum's gradient from
  // its other use, is added to dx rounded to dtype (the sum autograd makes of the two gradients).
  const void* residual = nullptr;
  void* sum = nullptr;
  const void* dsum = nullptr;
};
inline int64_t rms_norm_partials(int64_t rows, int64_t d) { return (rows + kRmsGroupRows - 1) / kRmsGroupRows * d; }

// --- Cross entropy over the last dimension, from logits [rows, V] in `dtype` ----------------------
// Forward: loss[t] = lse[t] - x[t, target[t]] (0 where target == ignore_index), lse = m + ln sum
// exp(x - m), m = the row max; NaN for a target outside [0, V). Backward: dx = (exp(x - lse) - [j == target]) * (*scale), 0 on ignored
// rows; scale is read from device (CUDA) or host (CPU) memory: the upstream gradient over the count
// of counted rows, never copied to the host.
struct CrossEntropyIO {
  DType dtype = DType::kBF16;
  int64_t rows = 0, vocab = 0, ignore_index = -100;
  const void* logits = nullptr;
  const int64_t* targets = nullptr;
  float* loss = nullptr;  // forward
  float* lse = nullptr;   // forward writes, backward reads
  const float* scale = nullptr;
  void* dlogits = nullptr;  // backward (may alias logits)
};

// --- SwiGLU: out = silu(g) u, g and u the two halves of gu [rows, 2h] (gate first) ------------------
// silu(g) = g s, s = 1 / (1 + exp(-g)); backward: dg = dout u s (1 + g (1 - s)), du = dout silu(g).
// Elementwise, so CPU and CUDA agree bit for bit by the operations alone.
struct SwiGluIO {
  DType dtype = DType::kBF16;
  int64_t rows = 0, hidden = 0;
  const void* gu = nullptr;
  void* out = nullptr;        // forward: [rows, h]
  const void* dout = nullptr; // backward: [rows, h]
  void* dgu = nullptr;        // backward: [rows, 2h]
};

UFP4_HD float sigmoid_f32(float g) { return 1.0f / add_rn(1.0f, exp_f32(-g)); }
UFP4_HD float swiglu_forward(float g, float u) { return mul_rn(mul_rn(g, sigmoid_f32(g)), u); }
// (dg, du) for one element.
UFP4_HD void swiglu_backward(float g, float u, float d, float& dg, float& du) {
  const float s = sigmoid_f32(g);
  dg = mul_rn(mul_rn(d, u), mul_rn(s, add_rn(1.0f, mul_rn(g, 1.0f - s))));
  du = mul_rn(d, mul_rn(g, s));
}

// --- Rotary position embedding, rotate-half form, of x [batch, heads, seq, hd] ---------------------
// For j < hd/2, a = x[j], b = x[j + hd/2], c = cos[s, j] and sn = sin[s, j] rounded to the dtype:
//   y[j] = a c - b sn,  y[j + hd/2] = b c + a sn,
// every product and sum rounded to the dtype, as LibTorch's composition (chunk, mul, sub, add, cat)
// rounds them: the fused op equals that composition bit for bit, forward and backward. The backward
// is the same rotation by the opposite angle (inverse: sn negated), which is the composition's
// gradient exactly (negation is exact; a - b == a + (-b)).
struct RopeIO {
  DType dtype = DType::kBF16;
  int64_t batch = 0, heads = 0, seq = 0, head_dim = 0;
  const void* x = nullptr;  // element (b, h, s, j) at b stride_b + h stride_h + s stride_s + j
  int64_t stride_b = 0, stride_h = 0, stride_s = 0;
  const float* cos = nullptr;  // [seq, hd / 2] FP32 (rows past seq are not read)
  const float* sin = nullptr;
  bool inverse = false;  // the backward: rotate by -angle
  void* y = nullptr;     // element (b, h, s, j) at b y_stride_b + h y_stride_h + s y_stride_s + j
  int64_t y_stride_b = 0, y_stride_h = 0, y_stride_s = 0;
};

UFP4_HD float round_to_dtype(bool bf16, float v) { return bf16 ? round_to_bf16(v) : v; }
// One rotated pair (ya, yb) from (a, b), with c and sn already in the dtype.
UFP4_HD void rope_pair(bool bf16, float a, float b, float c, float sn, float& ya, float& yb) {
  ya = round_to_dtype(bf16, add_rn(round_to_dtype(bf16, mul_rn(a, c)), -round_to_dtype(bf16, mul_rn(b, sn))));
  yb = round_to_dtype(bf16, add_rn(round_to_dtype(bf16, mul_rn(b, c)), round_to_dtype(bf16, mul_rn(a, sn))));
}

// RoPE of a packed QKV projection in one pass, for attention's inputs (forward) and from its gradients
// (backward): q's and k's heads rotated as reference_rope rotates them, v's heads copied bit for bit.
// One thread takes 8 pairs of a token for all its heads, so the token's cos and sin are read once.
// Forward: in = q, k and v views of the projection [B, S, (H + 2 KV) hd], out = attention's inputs;
// backward (inverse): in = attention's gradients, out = views of the projection's gradient.
struct HeadsView {
  void* p = nullptr;  // element (b, h, s, j) at b stride_b + h stride_h + s stride_s + j (read only in `in`)
  int64_t stride_b = 0, stride_h = 0, stride_s = 0;
};
struct QkvRopeIO {
  DType dtype = DType::kBF16;
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  const float* cos = nullptr;  // [>= seq, hd / 2] FP32
  const float* sin = nullptr;
  bool inverse = false;
  HeadsView in[3], out[3];  // q (heads), k and v (kv_heads each)
  int64_t heads_of(int part) const { return part == 0 ? heads : kv_heads; }
};

// --- MoE combine: each token's weighted sum of its k expert rows, and the dispatch's backward -------
// y [A, d] BF16, A = T k expert rows in expert-sorted order; slot s = t k + j is token t's j-th
// assignment (experts ascending), its row inverse[s] (order[a]: the slot of row a); kept [A] or null:
// rows past an expert's capacity count as zeros; w [T, k] BF16. Every product and sum is rounded to
// BF16 in slot order, as LibTorch's composition (gather, k products, k - 1 sums) rounds it:
//   forward  out[t] = (((y_s0 w0) + y_s1 w1) + ...) + y_s(k-1) w(k-1),   y_s = kept ? y[inverse[s]] : +0
//   backward dy[a] = kept[a] ? dout[t] w[t, j] : +0 for (t, j) of slot order[a] (with k > 1 a -0 becomes
//            +0, as the composition's sum of the slots' zero-filled gradients makes it), and
//            dw[t, j] = the sum over i of BF16(dout[t, i] y_s[i]), folded by kRmsLanes partners in the
//            row order above, rounded to BF16 (the composition's sum runs in LibTorch's own order);
//   dispatch backward  dx[t] = ((g[inverse[t k]] + g[inverse[t k + 1]]) + ...), g [A, d]: each token's
//            k row gradients summed in slot order (the gradient of the gather that dispatched it).
constexpr int kMoeMaxTopK = 8;
struct MoeCombineIO {
  int64_t tokens = 0, top_k = 0, d = 0;
  const uint16_t* y = nullptr;
  const int64_t* inverse = nullptr;  // [A]
  const int64_t* order = nullptr;    // [A] (backward)
  const bool* kept = nullptr;        // [A] or null
  const uint16_t* w = nullptr;       // [T, k]
  uint16_t* out = nullptr;           // forward [T, d]
  const uint16_t* dout = nullptr;    // backward [T, d]
  uint16_t* dy = nullptr;            // backward [A, d]
  uint16_t* dw = nullptr;            // backward [T, k]
};
struct MoeDispatchBackwardIO {
  int64_t tokens = 0, top_k = 0, d = 0;
  const uint16_t* g = nullptr;       // [A, d]
  const int64_t* inverse = nullptr;  // [A]
  uint16_t* dx = nullptr;            // [T, d]
};
// One element of a slot's gradient: BF16(dout w), a -0 made +0 when the token has more than one slot.
UFP4_HD float moe_slot_grad(float dout, float w, int64_t top_k) {
  const float v = round_to_bf16(mul_rn(dout, w));
  return top_k > 1 ? add_rn(v, 0.0f) : v;
}

// CPU reference (the order above); any d and vocab.
void reference_rms_norm_forward(const RmsNormIO& io);
void reference_rms_norm_backward(const RmsNormIO& io);
void reference_cross_entropy_forward(const CrossEntropyIO& io);
void reference_cross_entropy_backward(const CrossEntropyIO& io);
void reference_swiglu_forward(const SwiGluIO& io);
void reference_swiglu_backward(const SwiGluIO& io);
void reference_rope(const RopeIO& io);
void reference_qkv_rope(const QkvRopeIO& io);
void reference_moe_combine_forward(const MoeCombineIO& io);
void reference_moe_combine_backward(const MoeCombineIO& io);
void reference_moe_dispatch_backward(const MoeDispatchBackwardIO& io);

// CUDA (kernels/fused/fused_kernels_cuda.cu): d, vocab and h multiples of 8, 16-byte aligned rows; the
// caller's stream. What the CUDA kernels accept:
inline bool fused_cuda_applies(int64_t last_dim, const void* p) {
  return last_dim % 8 == 0 && last_dim > 0 && (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
void cuda_rms_norm_forward(const RmsNormIO& io, cudaStream_t stream);
void cuda_rms_norm_backward(const RmsNormIO& io, cudaStream_t stream);
// Timing probe (dev/): the backward with 1, 2 or 4 rows in flight a warp (BF16, d <= 1024; 0: the production
// choice). The same bits for each.
void cuda_rms_norm_backward_rows(const RmsNormIO& io, int rows_in_flight, cudaStream_t stream);
void cuda_cross_entropy_forward(const CrossEntropyIO& io, cudaStream_t stream);
void cuda_cross_entropy_backward(const CrossEntropyIO& io, cudaStream_t stream);
void cuda_swiglu_forward(const SwiGluIO& io, cudaStream_t stream);
void cuda_swiglu_backward(const SwiGluIO& io, cudaStream_t stream);
// RoPE: hd / 2 a multiple of 8; x's and y's strides multiples of 16 bytes and x, y 16-byte aligned (rope_cuda_applies).
inline bool rope_cuda_applies(const RopeIO& io) {
  const int64_t a = io.dtype == DType::kBF16 ? 8 : 4;  // elements in 16 bytes
  return io.head_dim % 16 == 0 && io.head_dim > 0 && io.stride_b % a == 0 && io.stride_h % a == 0 && io.stride_s % a == 0 &&
         io.y_stride_b % a == 0 && io.y_stride_h % a == 0 && io.y_stride_s % a == 0 &&
         (reinterpret_cast<uintptr_t>(io.x) & 15u) == 0 && (reinterpret_cast<uintptr_t>(io.y) & 15u) == 0 &&
         (reinterpret_cast<uintptr_t>(io.cos) & 15u) == 0 && (reinterpret_cast<uintptr_t>(io.sin) & 15u) == 0;
}
void cuda_rope(const RopeIO& io, cudaStream_t stream);
// Packed QKV RoPE: hd a multiple of 16; every view's strides multiples of 16 bytes, its pointer and the tables 16-byte aligned.
inline bool qkv_rope_cuda_applies(const QkvRopeIO& io) {
  const int64_t a = io.dtype == DType::kBF16 ? 8 : 4;  // elements in 16 bytes
  if (io.head_dim % 16 != 0 || io.head_dim <= 0 || (reinterpret_cast<uintptr_t>(io.cos) & 15u) || (reinterpret_cast<uintptr_t>(io.sin) & 15u))
    return false;
  for (const HeadsView* v : {&io.in[0], &io.in[1], &io.in[2], &io.out[0], &io.out[1], &io.out[2]})
    if (v->stride_b % a || v->stride_h % a || v->stride_s % a || (reinterpret_cast<uintptr_t>(v->p) & 15u)) return false;
  return true;
}
void cuda_qkv_rope(const QkvRopeIO& io, cudaStream_t stream);
// MoE combine and dispatch backward (kernels/fused/moe_combine_cuda.cu): d a multiple of 8, top_k at most
// kMoeMaxTopK, 16-byte aligned rows (moe_combine_cuda_applies on y, dout, g and the outputs).
inline bool moe_combine_cuda_applies(int64_t d, int64_t top_k) { return d % 8 == 0 && d > 0 && top_k >= 1 && top_k <= kMoeMaxTopK; }
void cuda_moe_combine_forward(const MoeCombineIO& io, cudaStream_t stream);
void cuda_moe_combine_backward(const MoeCombineIO& io, cudaStream_t stream);
void cuda_moe_dispatch_backward(const MoeDispatchBackwardIO& io, cudaStream_t stream);

}  // namespace ufp4
