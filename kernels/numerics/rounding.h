// The kernels' rounding: decision thresholds instead of a level search. Host-compiled too, so the
// CPU tests check it exhaustively against the reference's distance-based search.
#pragma once
#include <cmath>

#include "kernels/numerics/float_bits.h"
#include "kernels/quantize/grid.h"
#include "kernels/numerics/hd.h"

namespace ufp4 {

// RTNE: the number of thresholds below a (a tie counts when up_at_mid says so). NaN gives 0.
UFP4_HD int round_nearest(const GridParams& g, float a) {
  int idx = 0;
UFP4_UNROLL
  for (int k = 0; k < 15; ++k)
    if (k < g.n - 1) idx += (a > g.mid[k]) || (a == g.mid[k] && ((g.up_at_mid >> k) & 1u));
  return idx;
}

// SR's decision for the fraction p in [0, 1) of the way from the lower to the upper neighbour and
// the element's 8-bit draw k: up iff rint(256 p) + k >= 256, so P(up) = rint(256 p) / 256 (ties to
// even) and the bias is at most 1/512 of the gap either way, zero on average over p.
UFP4_HD bool sr_up(float p, uint32_t k) { return rint_even(p * 256.0f) + static_cast<float>(k) >= 256.0f; }

// SR between neighbours level[lo] <= a < level[lo+1] with draw k (sr_up). `level` may point to a
// faster copy of g.level (shared memory).
UFP4_HD int round_stochastic(const GridParams& g, const float* level, float a, uint32_t k) {
  int cnt = 0;
UFP4_UNROLL
  for (int i = 0; i < 16; ++i)
    if (i < g.n) cnt += a >= g.level[i];
  const int lo = cnt - 1;
  if (lo >= g.n - 1) return g.n - 1;  // saturate
  if (lo < 0) return 0;               // below the grid, or NaN
  const float p = (a - level[lo]) / (level[lo + 1] - level[lo]);
  return sr_up(p, k) ? lo + 1 : lo;
}

// ---- Arithmetic fast paths ---------------------------------------------------------------------
// For grids whose levels are dyadic and evenly structured the threshold search becomes a few float
// operations. classify_grid() picks the path on the host; each path returns exactly what
// round_nearest / round_stochastic return for finite a >= 0 (tested near every threshold).
enum GridClass { kGridGeneric = 0, kGridUniform = 1, kGridE2M1 = 2 };

struct FastGrid {
  int kind;        // GridClass
  float step;      // uniform: level i = i * step (a power of two)
  float inv_step;  // 1 / step, exact
  float top;       // the largest level (saturation)
};

// Sign-magnitude grids only; codes must equal level indices and every midpoint must be a tie to the even code.
inline FastGrid classify_grid(const GridParams& g) {
  FastGrid f{kGridGeneric, 1.0f, 1.0f, g.level[g.n - 1]};
  if (!g.symmetric || g.n < 2) return f;
  for (int i = 0; i < g.n; ++i)
    if (g.code[i] != i) return f;
  for (int i = 0; i + 1 < g.n; ++i)
    if (static_cast<double>(g.mid[i]) != 0.5 * (static_cast<double>(g.level[i]) + g.level[i + 1]) ||
        (((g.up_at_mid >> i) & 1u) != static_cast<uint32_t>(i & 1)))
      return f;
  const float step = g.level[1];
  int e = 0;
  const double mant = std::frexp(static_cast<double>(step), &e);
  bool uniform = mant == 0.5 && e > -100 && e < 100;
  for (int i = 0; i < g.n && uniform; ++i) uniform = g.level[i] == static_cast<float>(i) * step;
  if (uniform) return FastGrid{kGridUniform, step, 1.0f / step, f.top};
  const float e2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  bool is_e2m1 = g.n >= 2 && g.n <= 8;
  for (int i = 0; i < g.n && is_e2m1; ++i) is_e2m1 = g.level[i] == e2m1[i];
  if (is_e2m1) f.kind = kGridE2M1;
  return f;
}

// RTNE on a uniform grid: a * inv_step is exact, rint rounds ties to the even index (= even code).
UFP4_HD float nearest_uniform(const FastGrid& f, float a) {
  return min_hd(rint_even(a * f.inv_step), f.top * f.inv_step);  // the level's index, as a float
}

// RNE of 0 <= a < 2^100 to E2M1's spacing 2^(E-1), E = max(floor(log2 a), 0), without saturation:
// adding c = 2^(E+22) leaves exactly that spacing, ties go to the even multiple (= the even code), and
// subtracting c again is exact.
UFP4_HD float round_e2m1_spacing(float a) {
  const float c = max_hd(bits_f32(f32_bits(a) & 0x7f800000u), 1.0f);
#if defined(__CUDA_ARCH__)
  return fmaf(c, -0x1p22f, fmaf(c, 0x1p22f, a));
#else
  const float k = c * 0x1p22f;  // exact (a power of two), so each FMA above is this one rounded add
  return (a + k) - k;
#endif
}

// RTNE to E2M1 magnitudes (ties to even code), saturated at f.top (<= 6, so a >= 16 may be clamped first).
UFP4_HD float nearest_e2m1(const FastGrid& f, float a) { return min_hd(round_e2m1_spacing(min_hd(a, 16.0f)), f.top); }

// Index (= code) of an E2M1 magnitude level.
UFP4_HD int e2m1_index(float level) {
  if (level < 1.0f) return static_cast<int>(level * 2.0f);
  const uint32_t u = f32_bits(level);
  return 2 + 2 * (static_cast<int>(u >> 23) - 127) + static_cast<int>((u >> 22) & 1u);
}

// SR on a uniform grid; returns the index as a float. (a - level[lo]) / step == t - floor(t) exactly.
UFP4_HD float stochastic_uniform(const FastGrid& f, float a, uint32_t k) {
  const float t = a * f.inv_step, lo = floorf(t), last = f.top * f.inv_step;
  if (lo >= last) return last;
  return sr_up(t - lo, k) ? lo + 1.0f : lo;
}

// SR between E2M1 neighbours; the gap is a power of two, so the probability is exact. Returns the level.
UFP4_HD float stochastic_e2m1(const FastGrid& f, float a, uint32_t k) {
  float lo, w, inv_w;
  if (a < 1.0f) {
    lo = floorf(a * 2.0f) * 0.5f;
    w = 0.5f;
    inv_w = 2.0f;
  } else {
    const uint32_t b = f32_bits(a), e = b & 0x7f800000u;
    lo = bits_f32(b & 0xffc00000u);
    w = bits_f32(e - 0x00800000u);       // 2^(e-1)
    inv_w = bits_f32(0x7f800000u - e);   // 2^(1-e)
  }
  if (lo >= f.top) return f.top;
  return sr_up((a - lo) * inv_w, k) ? lo + w : lo;
}

// IEEE division, out of line on the GPU: rare paths must not bloat the unrolled element code.
#if defined(__CUDACC__)
__host__ __device__ __noinline__ inline float rare_div(float x, float y) { return x / y; }
#else
inline float rare_div(float x, float y) { return x / y; }
#endif

// x / sc correctly rounded from r = RN(1/sc): Markstein's correction, q + (x - q sc) r with an exact
// FMA remainder, valid while nothing is subnormal; sc must lie in [2^-100, 2^100] (the caller checks),
// tiny operands take the division.
UFP4_HD float div_by_scale(float x, float sc, float r) {
  float q = x * r;
  const float rem = fmaf(-q, sc, x);
  q = fmaf(rem, r, q);
  if (!(fabsf(x) >= 0x1p-100f && fabsf(q) >= 0x1p-100f)) q = x == 0.0f ? x : rare_div(x, sc);
  return q;
}

}  // namespace ufp4
