// One block's scale and one element's rounding in the reference's exact arithmetic (kernels/quantize/quantize.h),
// compiled for host and device: the CUDA kernels (quantize_device.cuh) and the CPU fast path
// (quantize_cpu.cpp) share them, and the tests hold both to reference_quantize() bit for bit.
#pragma once
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/hd.h"
#include "kernels/quantize/quant_spec.h"
#include "kernels/numerics/rounding.h"

namespace ufp4 {

// One block's scaling, as the chunk's elements need it.
struct ChunkScale {
  int state = 0;         // 0 normal, 1 zero block, 2 NaN block
  bool multiply = false; // nvfp4: v = x * factor; else v = x / factor
  bool fast_div = false; // x / factor through rcp (div_by_scale)
  float factor = 1.0f, rcp = 1.0f, decode = 0.0f;
  int zero_idx = 0;
};

// The scale of a block of amax m (tensor_amax: the tensor's amax after RHT, read for nvfp4 only) and
// its E4M3 / E8M0 code in `bits`. Divisions by a scale in [2^-100, 2^100] go through its reciprocal
// (div_by_scale, exact); others take the IEEE division.
UFP4_HD ChunkScale chunk_scale(const KernelSpec& s, float m, float tensor_amax, uint8_t& bits) {
  const GridParams& g = s.grid;
  ChunkScale cs;
  const float gmax = g.gmax;
  float bm = m;
  if (s.scale_kind == 1 && !is_finite(tensor_amax)) bm = canonical_nan();
  bits = 0;
  if (!is_finite(bm)) {
    cs.state = 2; cs.decode = canonical_nan(); bits = s.scale_kind == 2 ? 0xff : 0x7f;
  } else if (s.scale_kind == 0) {
    float sc = bm / gmax;
    if (sc == 0.0f) cs.state = 1;
    cs.factor = sc; cs.decode = sc;
  } else if (s.scale_kind == 1) {
    float s_enc = fminf(448.0f * gmax / tensor_amax, FLT_MAX);
    if (tensor_amax == 0.0f || s_enc == 0.0f) s_enc = 1.0f;
    float e4m3 = round_to_e4m3(fminf(bm * (s_enc * (1.0f / gmax)), FLT_MAX));
    float s_dec = 1.0f / s_enc;
    cs.multiply = true;
    cs.factor = fminf(1.0f / (e4m3 * s_dec), FLT_MAX);
    cs.decode = e4m3 * s_dec;
    bits = e4m3_code(e4m3);
  } else if (s.scale_kind == 3) {
    cs.factor = 1.0f; cs.decode = 1.0f;
  } else {
    int e = bm == 0.0f ? -127 : floor_log2(bm) - floor_log2(gmax);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    cs.factor = exp2_int(e); cs.decode = cs.factor; bits = e8m0_code(e);
  }
  if (cs.state == 0 && !cs.multiply && cs.factor >= 0x1p-100f && cs.factor <= 0x1p100f) {
    cs.fast_div = true;
    cs.rcp = 1.0f / cs.factor;
  }
  cs.zero_idx = g.symmetric ? 0 : round_nearest(g, 0.0f);
  return cs;
}

// Rounds one element to its dequantized value and code. kClass picks the arithmetic path of
// rounding.h or the threshold search; all give the reference's levels. `sh_level` and `sh_code` are
// g.level and g.code or faster copies of them (shared memory on the GPU).
template <int kClass>
UFP4_HD float round_element(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const ChunkScale& cs, bool sr,
                             bool want_codes, float x, uint32_t k, uint32_t& code_out) {
  const GridParams& g = s.grid;
  const bool neg = (f32_bits(x) >> 31) != 0;
  int idx = cs.zero_idx;
  float dq;
  if (cs.state == 2) {
    dq = canonical_nan();
  } else if (cs.state == 1) {
    dq = 0.0f;
  } else {
    float v;
    if (cs.multiply) {
      v = x * cs.factor;
    } else if (cs.fast_div) {
      v = div_by_scale(x, cs.factor, cs.rcp);
    } else {
      v = rare_div(x, cs.factor);
    }
    const float a = g.symmetric ? fabsf(v) : v;
    float level;
    if (kClass == kGridUniform) {
      const float t = sr ? stochastic_uniform(s.fast, a, k) : nearest_uniform(s.fast, a);
      level = t * s.fast.step;
      idx = static_cast<int>(t);
    } else if (kClass == kGridE2M1) {
      level = sr ? stochastic_e2m1(s.fast, a, k) : nearest_e2m1(s.fast, a);
      if (want_codes) idx = e2m1_index(level);
    } else {
      idx = sr ? round_stochastic(g, sh_level, a, k) : round_nearest(g, a);
      level = sh_level[idx];
    }
    dq = level * cs.decode;
  }
  if (g.symmetric && neg && cs.state != 2) dq = -dq;
  if (want_codes) {
    const uint32_t c = kClass == kGridGeneric || cs.state != 0 ? sh_code[idx] : static_cast<uint32_t>(idx);
    code_out = g.symmetric && cs.state != 2 ? (c | (neg ? 8u : 0u)) : c;
  }
  return dq;
}

}  // namespace ufp4
