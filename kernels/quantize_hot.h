// The training path's quantizer at memory speed: BF16 in and out, 1x16 blocks, FP32 block scales,
// RHT off or 16, E2M1 or uniform grids (E1M2, INT4), RTNE or SR, dequantized values only.
// hot_chunk() is one chunk's arithmetic, compiled for host and device so the CPU tests hold it to
// reference_quantize() bit for bit. It returns false for chunks outside the range where its shortcuts
// are proven exact (zero, non-finite, tiny or huge blocks); the kernel sends those to the general code.
//
// Shortcuts, each exact in the accepted range (d = block scale, times the step for uniform grids,
// in [2^-60, 2^12]; nonzero BF16-derived |x| >= 2^-135):
// - RHT signs and the 1/4 are folded into the first butterfly stage (x * +-1/4 is exact, and
//   RN(a/4 + b/4) = RN(a + b)/4 away from overflow, which a finite amax rules out).
// - amax propagates NaN (max.NaN), so one finiteness test covers every element.
// - x / d is Markstein's q + (x - q d) r with r = RN(1/d): exact when |q| >= 2^-43 (the FMA remainder
//   is representable); below that every rounding decision depends only on q > 0, which holds for
//   both the exact and the corrected quotient of a nonzero x.
// - Uniform grids divide by d = s * step directly (a power-of-two rescaling of the reference's x / s).
// - SR compares the 24-bit draw k with the fraction in fixed point: up iff k < ceil(frac * 2^24), so
//   idx = (ceil(t * 2^24) + 2^24 - 1 - k) >> 24; for E2M1 above 1 the fraction is the low 22
//   mantissa bits and the carry of (bits + (2^22 - 1 - k/4)) into bit 22 rounds up.
// - No saturation under RTNE: with max scaling |x / s| <= gmax (1 + 2^-23), which rounds to gmax.
#pragma once
#include <cmath>
#include <cstdint>

#include "kernels/float_bits.h"
#include "kernels/philox.h"
#include "kernels/quant_spec.h"
#include "kernels/quantize.h"
#include "kernels/rounding.h"

namespace ufp4 {

struct HotParams {
  float gmax, rgmax;   // block scale s = RN(amax / gmax), via rgmax = RN(1 / gmax)
  float step;          // uniform: level spacing (a power of two); E2M1: 1
  float top;           // the largest level: E2M1 magnitude, uniform index
  float rht_sign[16];  // RHT-16: +-1/4 per position
  PhiloxKeys keys;     // SR: the generator's round keys (from the seed)
  uint64_t offset;
};

// 16-byte aligned (or null): what the vectorized kernels need.
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Whether the hot kernel covers this call (the GPU dispatch and the tests ask the same question).
inline bool hot_path_applies(const KernelSpec& s, const QuantizeIO& io) {
  const int64_t L = io.columnwise ? io.rows : io.cols;
  const bool grid_ok = (s.fast.kind == kGridE2M1 || s.fast.kind == kGridUniform) && s.grid.gmax == s.fast.top;
  return grid_ok && s.block == 16 && !s.block_2d && s.scale_kind == 0 && (s.rht == 0 || (s.rht == 16 && s.rht_scale == 0.25f)) &&
         io.in_dtype == DType::kBF16 && io.out_dtype == DType::kBF16 && io.dequant && !io.codes && !io.scales && !io.amax &&
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
  for (int i = 0; i < 16; ++i) h.rht_sign[i] = ((s.rht_signs[0] >> i) & 1u) ? -0.25f : 0.25f;
  h.keys = philox_keys(s.seed);
  h.offset = s.offset;
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

// ceil(a) as an unsigned integer, for 0 <= a < 2^32.
UFP4_HD uint32_t ceil_u32(float a) {
#if defined(__CUDA_ARCH__)
  return __float2uint_ru(a);
#else
  return static_cast<uint32_t>(std::ceil(a));
#endif
}

// x / d for the hot path (see the header comment for when it equals IEEE division).
UFP4_HD float hot_div(float x, float d, float rd) {
  const float q = x * rd;
  return fmaf(fmaf(-q, d, x), rd, q);
}

// One 16-element chunk. in/out: element 2k in the low half of word k, 2k + 1 in the high half.
// out_index: the chunk's first element in the output layout (the SR stream position).
template <int kClass, bool kSR, bool kRht>
UFP4_HD bool hot_chunk(const HotParams& h, const uint32_t* in, uint64_t out_index, uint32_t* out) {
  float x[16];
UFP4_UNROLL
  for (int k = 0; k < 8; ++k) {
    x[2 * k] = bits_f32(in[k] << 16);
    x[2 * k + 1] = bits_f32(in[k] & 0xffff0000u);
  }
  if (kRht) {
UFP4_UNROLL
    for (int i = 0; i < 16; i += 2) {
      const float a = x[i] * h.rht_sign[i], b = x[i + 1];
      x[i] = fmaf(b, h.rht_sign[i + 1], a);
      x[i + 1] = fmaf(b, -h.rht_sign[i + 1], a);
    }
UFP4_UNROLL
    for (int s = 2; s < 16; s <<= 1)
UFP4_UNROLL
      for (int i = 0; i < 16; ++i)
        if ((i & s) == 0) {
          const float a = x[i], b = x[i + s];
          x[i] = a + b;
          x[i + s] = a - b;
        }
  }
  float m = fabsf(x[0]);
UFP4_UNROLL
  for (int i = 1; i < 16; ++i) m = max_abs_nan(m, x[i]);

  // Block scale s = RN(m / gmax) (Markstein, exact for the accepted m); d = s * step.
  const float sc = hot_div(m, h.gmax, h.rgmax);
  const float d = sc * h.step;
  if (!(d >= 0x1p-60f && d <= 0x1p12f)) return false;  // also rejects NaN and infinite amax
  const float rd = 1.0f / d;

  float y[16];
  if (!kSR) {
UFP4_UNROLL
    for (int i = 0; i < 16; ++i) {
      const float a = fabsf(hot_div(x[i], d, rd));
      // RNE to an integer (a < 2^22), or to E2M1's spacing (rounding.h)
      const float level = kClass == kGridUniform ? (a + 0x1p23f) - 0x1p23f : round_e2m1_spacing(a);
      y[i] = bits_f32(f32_bits(level * d) | (f32_bits(x[i]) & 0x80000000u));
    }
  } else {
    // The chunk's four Philox groups differ only in the low counter word (out_index is a multiple of
    // 16, so adding q < 4 never carries): the first round's shared half is computed once.
    const uint64_t group0 = out_index >> 2;
    const uint32_t g_lo = static_cast<uint32_t>(group0), g_hi = static_cast<uint32_t>(group0 >> 32);
UFP4_UNROLL
    for (int q = 0; q < 4; ++q) {
      const U32x4 rnd = philox4x32_10(g_lo + q, g_hi, static_cast<uint32_t>(h.offset), static_cast<uint32_t>(h.offset >> 32), h.keys);
      uint32_t inv[4];  // ~draw: 2^24 - 1 - k in the top 24 bits (the NOT folds into the last round's XORs)
UFP4_UNROLL
      for (int e = 0; e < 4; ++e) inv[e] = ~rnd.v[e];
UFP4_UNROLL
      for (int e = 0; e < 4; ++e) {
        const int i = 4 * q + e;
        const uint32_t noise24 = inv[e] >> 8;  // 2^24 - 1 - k, k the 24-bit draw
        float level;
        if (kClass == kGridUniform) {
          // t * 2^24 directly: divide by d * 2^-24 (exact rescaling).
          const float t24 = fabsf(hot_div(x[i], d * 0x1p-24f, rd * 0x1p24f));
          uint32_t idx = (ceil_u32(t24) + noise24) >> 24;
          if (idx > static_cast<uint32_t>(h.top)) idx = static_cast<uint32_t>(h.top);
          level = static_cast<float>(idx);
        } else {
          const float a = fabsf(hot_div(x[i], d, rd));
          const uint32_t half_steps = (ceil_u32(a * 0x1p25f) + noise24) >> 24;  // a < 1: levels 0, 1/2, 1
          const float small = static_cast<float>(half_steps) * 0.5f;
          const float big = bits_f32((f32_bits(a) + (noise24 >> 2)) & 0xffc00000u);
          level = fminf(a < 1.0f ? small : big, h.top);
        }
        y[i] = bits_f32(f32_bits(level * d) | (f32_bits(x[i]) & 0x80000000u));
      }
    }
  }
UFP4_UNROLL
  for (int k = 0; k < 8; ++k) out[k] = pack_bf16x2_finite(y[2 * k], y[2 * k + 1]);
  return true;
}

}  // namespace ufp4
