// The training path's quantizer at memory speed: BF16 in and out, 1x16 blocks, FP32 block scales,
// RHT off or 16, E2M1 or uniform grids (E1M2, INT4), RTNE or SR, dequantized values only. The pair
// kernel (kernels/quantize/quantize_pair.h) also feeds it FP32 inputs (hot_chunk_f32).
// hot_chunk() is one chunk's arithmetic, compiled for host and device so the CPU tests hold it to
// reference_quantize() bit for bit. It returns false for chunks outside the range where its shortcuts
// are proven exact (zero, non-finite, tiny or huge blocks); the kernel sends those to the general code.
//
// Shortcuts, each exact in the accepted range (d = block scale, times the step for uniform grids,
// in [2^-60, 2^12]; nonzero BF16-derived |x| >= 2^-135):
// - RHT signs are applied as the values are widened (the sign bit added or xored in: one integer op,
//   as the widening alone). The butterflies are unnormalized: y' is a sum of BF16 values, a multiple of
//   2^-133, so the reference's y = RN(y'/4) is y'/4 exactly. The 1/4 moves into the block scale:
//   RN(4m/gmax) = 4 RN(m/gmax) and hot_div(y', 4d) = hot_div(y, d) for the accepted scales (4d <= 2^14
//   also keeps y' far from overflow). FP32 inputs: the butterflies add the same pairs as the
//   reference's, so y' = 4y except where y'/4 lies below FP32's normal range (|y'| < 2^-124); with
//   d >= 2^-58 both sides round such an element to level 0 with its sign.
// - amax propagates NaN (max.NaN), so one finiteness test covers every element.
// - x / d is Markstein's q + (x - q d) r with r = RN(1/d): exact when |q| >= 2^-43 (the FMA remainder
//   is representable); below that the exact and the corrected quotient both lie below the first
//   decision point of either rounding (both round to level 0).
// - Uniform grids divide by d = s * step directly (a power-of-two rescaling of the reference's x / s).
//   RTNE: |q| + 2^23 is 2^23 + idx exactly (idx = rint(|q|), |q| < 2^22), and fma(2^23 + idx, dd,
//   -2^23 dd) rounds idx dd once, as the product idx * dd does (-2^23 dd is exact).
// - SR (rounding.h's sr_up: up iff rint(256 p) + k >= 256) in the float's low bits: adding c, a
//   power of two whose ulp is 1/256 of the gap, rounds |v| to rint(256 v / gap) of those ulps (ties
//   even, as rint); adding the 8-bit draw k and clearing the low 8 bits carries into the level exactly
//   when sr_up says up. Uniform grids: c = 2^23 on 256 v / step. E2M1: c = 2^(E+14), E = max(floor(log2 |v|), 0).
//   The top level needs no clamp: |v| <= gmax (1 + 2^-23) rounds to 256 top / gap ulps.
// - No saturation under RTNE either: with max scaling |x / s| <= gmax (1 + 2^-23), which rounds to gmax.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/philox.h"
#include "kernels/quantize/quant_spec.h"
#include "kernels/quantize/quantize.h"
#include "kernels/numerics/rounding.h"

namespace ufp4 {

struct HotParams {
  float gmax, rgmax;   // block scale s = RN(amax / gmax), via rgmax = RN(1 / gmax)
  float step;          // uniform: level spacing (a power of two); E2M1: 1
  float top;           // the largest level: E2M1 magnitude, uniform index
  uint32_t rht_flip[16];  // RHT-16: the sign bit per position where the RHT negates, else 0
  PhiloxKeys keys;     // SR: the generator's round keys (from the seed)
  uint64_t offset;
  const uint64_t* offset_add;  // KernelSpec::offset_add
};

// 16-byte aligned (or null): what the vectorized kernels need.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether the hot arithmetic covers this spec: E2M1 or uniform grids, 1x16 blocks, FP32 scales, RHT off or 16.
inline bool hot_spec_applies(const KernelSpec& s) {
  const bool grid_ok = (s.fast.kind == kGridE2M1 || s.fast.kind == kGridUniform) && s.grid.gmax == s.fast.top;
  return grid_ok && s.block == 16 && !s.block_2d && s.scale_kind == 0 && (s.rht == 0 || (s.rht == 16 && s.rht_scale == 0.25f));
}

// Whether the hot kernel covers this call (the GPU dispatch and the tests ask the same question).
inline bool hot_path_applies(const KernelSpec& s, const QuantizeIO& io) {
  const int64_t L = io.columnwise ? io.rows : io.cols;
  return hot_spec_applies(s) && io.in_dtype == DType::kBF16 && io.out_dtype == DType::kBF16 && io.dequant && !io.codes && !io.scales && !io.amax &&
         !io.scale_bits && !io.tensor_amax && L % 16 == 0 && (!io.columnwise || io.cols % 8 == 0) && aligned16(io.in) &&
         aligned16(io.dequant);
}

inline HotParams make_hot_params(const KernelSpec& s) {
  HotParams h{};
  h.gmax = s.grid.gmax;
  h.rgmax = 1.0f / s.grid.gmax;
  const bool uniform = s.fast.kind == kGridUniform;
  h.step = uniform ? s.fast.step : 1.0f;
  h.top = uniform ? s.fast.top * s.fast.inv_step : s.fast.top;
  for (int i = 0; i < 16; ++i) h.rht_flip[i] = ((s.rht_signs[0] >> i) & 1u) ? 0x80000000u : 0u;
  h.keys = philox_keys(s.seed);
  h.offset = s.offset;
  h.offset_add = s.offset_add;
  return h;
}

// max(a, |b|), NaN if either is NaN.
UFP4_HD float max_abs_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(fabsf(b)));
  return r;
#else
  return nan_max(a, std::fabs(b));
#endif
}

// x / d for the hot path (see the header comment for when it equals IEEE division).
UFP4_HD float hot_div(float x, float d, float rd) {
  const float q = x * rd;
  return fmaf(fmaf(-q, d, x), rd, q);
}

// SR's draws for the chunk whose first output element is out_index (a multiple of 16): one Philox
// call, element i takes byte i. `offset`: the stream's offset, sr_offset(h.offset, h.offset_add).
UFP4_HD U32x4 hot_draws_at(const HotParams& h, uint64_t offset, uint64_t out_index) {
  const uint64_t group = out_index >> 4;
  return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(offset >> 32), h.keys);
}

// The same, reading the offset (device memory under a CUDA graph) for this chunk.
UFP4_HD U32x4 hot_draws(const HotParams& h, uint64_t out_index) { return hot_draws_at(h, sr_offset(h.offset, h.offset_add), out_index); }

// Chunk element i from the low or high BF16 half of a packed word, widened to FP32 with the RHT's
// sign of position i applied (kRht).
template <bool kRht>
UFP4_HD float hot_widen(const HotParams& h, uint32_t word, bool high, int i) {
  const uint32_t flip = kRht ? h.rht_flip[i] : 0u;
  return bits_f32(high ? (word & 0xffff0000u) ^ flip : (word << 16) + flip);  // + flip: one shift-add
}

// The same for an FP32 input word (the weights' master copy).
template <bool kRht>
UFP4_HD float hot_widen_f32(const HotParams& h, uint32_t word, int i) {
  return bits_f32(word ^ (kRht ? h.rht_flip[i] : 0u));
}

// One 16-element chunk from its values widened by hot_widen (x is overwritten). out: element 2k in
// the low half of word k, 2k + 1 in the high half. rnd: the chunk's draws (SR only; see hot_draws).
template <int kClass, bool kSR, bool kRht>
UFP4_HD bool hot_chunk_values(const HotParams& h, float (&x)[16], const U32x4& rnd, uint32_t* out) {
  if (kRht) {
UFP4_UNROLL
    for (int s = 1; s < 16; s <<= 1)
UFP4_UNROLL
      for (int i = 0; i < 16; ++i)
        if ((i & s) == 0) {
          const float a = x[i], b = x[i + s];
          x[i] = a + b;
          x[i + s] = a - b;
        }
  }
  // amax as a tree (max is exact in any order): 4 dependent steps instead of 15.
  float t[8];
UFP4_UNROLL
  for (int i = 0; i < 8; ++i) t[i] = max_abs_nan(fabsf(x[i]), x[i + 8]);
UFP4_UNROLL
  for (int w = 4; w >= 1; w >>= 1)
UFP4_UNROLL
    for (int i = 0; i < w; ++i) t[i] = max_abs_nan(t[i], t[i + w]);
  const float m = t[0];

  // Block scale s = RN(m / gmax) (Markstein, exact for the accepted m); d = s * step, times 4 with the
  // RHT (unnormalized values); dd = s * step, what a level is multiplied by.
  const float sc = hot_div(m, h.gmax, h.rgmax);
  const float d = sc * h.step;
  constexpr float kDMin = kRht ? 0x1p-58f : 0x1p-60f, kDMax = kRht ? 0x1p14f : 0x1p12f;
  if (!(d >= kDMin && d <= kDMax)) return false;  // also rejects NaN and infinite amax
  const float rd = 1.0f / d, dd = kRht ? d * 0.25f : d;

  float y[16];
  if (!kSR) {
    const float dd_off = dd * -0x1p23f;  // uniform: (2^23 + idx) dd - 2^23 dd = idx dd, exactly, in one rounding
UFP4_UNROLL
    for (int i = 0; i < 16; ++i) {
      const float a = fabsf(hot_div(x[i], d, rd));
      // RNE to an integer (a < 2^22: 2^23 + idx), or to E2M1's spacing (rounding.h)
      const float level_d = kClass == kGridUniform ? fmaf(a + 0x1p23f, dd, dd_off) : round_e2m1_spacing(a) * dd;
      y[i] = bits_f32(f32_bits(level_d) | (f32_bits(x[i]) & 0x80000000u));
    }
  } else {
UFP4_UNROLL
    for (int i = 0; i < 16; ++i) {
      const uint32_t k = sr_byte(rnd, i);
      float level_d;
      if (kClass == kGridUniform) {
        // 256 |x| / d (an exact rescaling of the quotient); 2^23 + 256 idx after the carry; then
        // (2^23 + 256 idx) dd / 256 - 2^15 dd = idx dd in one rounding.
        const float v = fabsf(hot_div(x[i], d * 0x1p-8f, rd * 0x1p8f));
        const float m = bits_f32((f32_bits(v + 0x1p23f) + k) & 0xffffff00u);
        level_d = fmaf(m, dd * 0x1p-8f, dd * -0x1p15f);
      } else {
        // The exponent mask drops the sign, so c comes from the signed quotient (no separate |q|).
        const float q = hot_div(x[i], d, rd);
        const float c = fmaxf(bits_f32(f32_bits(q) & 0x7f800000u), 1.0f);
        const float m = bits_f32((f32_bits(fmaf(c, 0x1p14f, fabsf(q))) + k) & 0xffffff00u);
        level_d = fmaf(c, -0x1p14f, m) * dd;
      }
      y[i] = bits_f32(f32_bits(level_d) | (f32_bits(x[i]) & 0x80000000u));
    }
  }
UFP4_UNROLL
  for (int k = 0; k < 8; ++k) out[k] = pack_bf16x2_finite(y[2 * k], y[2 * k + 1]);
  return true;
}

// The same from packed BF16 input: element 2k in the low half of word k, 2k + 1 in the high half;
// out_index: the chunk's first element in the output layout (the SR stream position).
template <int kClass, bool kSR, bool kRht>
UFP4_HD bool hot_chunk(const HotParams& h, const uint32_t* in, uint64_t out_index, uint32_t* out) {
  float x[16];
UFP4_UNROLL
  for (int i = 0; i < 16; ++i) x[i] = hot_widen<kRht>(h, in[i / 2], i % 2 == 1, i);
  return hot_chunk_values<kClass, kSR, kRht>(h, x, kSR ? hot_draws(h, out_index) : U32x4{}, out);
}

// The same from FP32 input: element i in word i.
template <int kClass, bool kSR, bool kRht>
UFP4_HD bool hot_chunk_f32(const HotParams& h, const uint32_t* in, uint64_t out_index, uint32_t* out) {
  float x[16];
UFP4_UNROLL
  for (int i = 0; i < 16; ++i) x[i] = hot_widen_f32<kRht>(h, in[i], i);
  return hot_chunk_values<kClass, kSR, kRht>(h, x, kSR ? hot_draws(h, out_index) : U32x4{}, out);
}

}  // namespace ufp4
