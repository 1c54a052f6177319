// Bit-exact conversions used identically by the CPU reference and the CUDA kernels:
// FP32 <-> BF16 (round to nearest even), FP32 -> E4M3 (OCP "fn", satfinite, RNE),
// E8M0 powers of two, and floor(log2|x|). No intrinsics (host and device agree bit for bit), except the
// hardware BF16 pair conversion of pack_bf16x2_finite, which agrees for every non-NaN value.
#pragma once
#include <cstdint>
#include <cstring>
#include <cmath>
#include "kernels/numerics/hd.h"
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

namespace ufp4 {

UFP4_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u; std::memcpy(&u, &f, 4); return u;
#endif
}
UFP4_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f; std::memcpy(&f, &u, 4); return f;
#endif
}
UFP4_HD bool is_nan(float f) { return (f32_bits(f) & 0x7fffffffu) > 0x7f800000u; }
UFP4_HD bool is_finite(float f) { return (f32_bits(f) & 0x7f800000u) != 0x7f800000u; }

// FP32 -> BF16 bits, round to nearest even; NaN becomes the canonical quiet NaN with its sign.
UFP4_HD uint16_t f32_to_bf16_bits(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7fc0u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
// Two values to a BF16 pair (lo in the low half), RNE. For non-NaN values only: the device uses the
// hardware conversion, which agrees with f32_to_bf16_bits except in NaN payloads.
UFP4_HD uint32_t pack_bf16x2_finite(float lo, float hi) {
#if defined(__CUDA_ARCH__)
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
#else
  return static_cast<uint32_t>(f32_to_bf16_bits(lo)) | (static_cast<uint32_t>(f32_to_bf16_bits(hi)) << 16);
#endif
}
UFP4_HD float bf16_bits_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
UFP4_HD float round_to_bf16(float f) { return bf16_bits_to_f32(f32_to_bf16_bits(f)); }

// floor(log2(a)) for finite a > 0, normals and subnormals.
UFP4_HD int floor_log2(float a) {
  uint32_t u = f32_bits(a) & 0x7fffffffu;
  int e = static_cast<int>(u >> 23);
  if (e > 0) return e - 127;
  uint32_t m = u & 0x7fffffu;  // subnormal: a = m * 2^-149
#if defined(__CUDA_ARCH__)
  int msb = 31 - __clz(m);
#else
  int msb = 31 - __builtin_clz(m);
#endif
  return msb - 149;
}

// Canonical quiet NaN, so NaN results are bitwise reproducible across host and device.
// fminf / fmaxf (a NaN operand yields the other): the intrinsics on the GPU; inline selects on the
// host, where libm's are out-of-line calls that dominate per-element loops.
UFP4_HD float min_hd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fminf(a, b);
#else
  const float m = b < a ? b : a;  // minss: branch-free
  return a != a ? b : m;
#endif
}
UFP4_HD float max_hd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return fmaxf(a, b);
#else
  const float m = b > a ? b : a;  // maxss
  return a != a ? b : m;
#endif
}
UFP4_HD float canonical_nan() { return bits_f32(0x7fc00000u); }

// Max of non-negative values that propagates NaN (as the canonical NaN): exact, associative
// and commutative, so any reduction order gives the same bits.
UFP4_HD float nan_max(float a, float b) {
  if (is_nan(a) || is_nan(b)) return canonical_nan();
  return b > a ? b : a;
}

// 2^e as FP32 for e in [-149, 127].
UFP4_HD float exp2_int(int e) {
  if (e >= -126) return bits_f32(static_cast<uint32_t>(e + 127) << 23);
  return bits_f32(1u << (e + 149));
}

// Round-half-even of a float that is an exact multiple of 0.5 or any float: exact RNE to integer.
UFP4_HD float rint_even(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  // Below 2^23, adding and subtracting 2^23 rounds to an integer, ties to even (FE_TONEAREST); at or
  // above it (and for inf, NaN) x is already integral. Inline: libm's nearbyintf is a call.
  const float m = std::fabs(x);
  return m < 0x1p23f ? std::copysign((m + 0x1p23f) - 0x1p23f, x) : x;
#endif
}

// E4M3 (OCP fn: bias 7, no inf, max 448, subnormal quantum 2^-9). Returns the decoded value of
// the nearest E4M3 number (ties to even), saturated to +-448; NaN stays NaN.
UFP4_HD float round_to_e4m3(float x) {
  if (is_nan(x)) return x;
  float a = fabsf(x);
  float r;
  if (a >= 464.0f) {  // 448 + half step (32/2): saturate
    r = 448.0f;
  } else if (a < 0.015625f) {  // below 2^-6: subnormal quantum 2^-9
    r = rint_even(a * 512.0f) * (1.0f / 512.0f);
  } else {
    int e = floor_log2(a);
    float q = exp2_int(e - 3);  // three mantissa bits
    r = rint_even(a / q) * q;
    if (r > 448.0f) r = 448.0f;
  }
  return x < 0.0f ? -r : r;
}
// Encoding byte of an E4M3 value that is exactly representable (as produced above).
UFP4_HD uint8_t e4m3_code(float v) {
  if (is_nan(v)) return 0x7f;
  uint8_t s = v < 0.0f || (f32_bits(v) >> 31) ? 0x80 : 0x00;
  float a = fabsf(v);
  if (a == 0.0f) return s;
  if (a < 0.015625f) return static_cast<uint8_t>(s | static_cast<uint8_t>(a * 512.0f));
  int e = floor_log2(a);
  int mant = static_cast<int>(a / exp2_int(e - 3)) - 8;
  return static_cast<uint8_t>(s | ((e + 7) << 3) | mant);
}

// E8M0 code of the power of two 2^e (e in [-127, 127]); 0xff is NaN.
UFP4_HD uint8_t e8m0_code(int e) { return static_cast<uint8_t>(e + 127); }

}  // namespace ufp4
