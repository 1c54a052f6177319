// Device pieces of the fused kernels: row vectors of 16 bytes, 8 BF16 or 8 FP32 values (two float4),
// widened to FP32 on load and rounded to nearest even on store (NaNs made canonical, as the CPU
// reference stores them); the butterfly over a warp (kernels/fused/fused_kernels.h's reduction order).
#pragma once
#include <cstdint>

#include "kernels/numerics/float_bits.h"
#include "kernels/fused/fused_kernels.h"

namespace ufp4 {
namespace {

constexpr unsigned kFull = 0xffffffffu;

// The butterfly over a warp, h = 1, ..., 16.
__device__ __forceinline__ float warp_tree_sum(float v) {
#pragma unroll
  for (int h = 1; h < 32; h *= 2) v = add_rn(v, __shfl_xor_sync(kFull, v, h));
  return v;
}

// A row vector's 16 (BF16) or 32 (FP32) bytes as loaded, widened later by unpack8: a kernel can keep
// several rows' vectors in flight in registers before it needs their values.
template <bool kBf16>
struct Raw8 {
  uint4 q[kBf16 ? 1 : 2];
};

template <bool kBf16>
__device__ __forceinline__ Raw8<kBf16> load_raw8(const void* base, int64_t elem) {
  Raw8<kBf16> r;
  const uint4* p = reinterpret_cast<const uint4*>(static_cast<const char*>(base) + elem * (kBf16 ? 2 : 4));
#pragma unroll
  for (int i = 0; i < (kBf16 ? 1 : 2); ++i) r.q[i] = p[i];
  return r;
}

template <bool kBf16>
__device__ __forceinline__ void unpack8(const Raw8<kBf16>& r, float (&v)[8]) {
  if constexpr (kBf16) {
    const uint32_t w[4] = {r.q[0].x, r.q[0].y, r.q[0].z, r.q[0].w};
#pragma unroll
    for (int k = 0; k < 4; ++k) { v[2 * k] = bits_f32(w[k] << 16); v[2 * k + 1] = bits_f32(w[k] & 0xffff0000u); }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      v[4 * i] = bits_f32(r.q[i].x); v[4 * i + 1] = bits_f32(r.q[i].y); v[4 * i + 2] = bits_f32(r.q[i].z); v[4 * i + 3] = bits_f32(r.q[i].w);
    }
  }
}

template <bool kBf16>
__device__ __forceinline__ void load8(const void* base, int64_t elem, float (&v)[8]) {
  unpack8<kBf16>(load_raw8<kBf16>(base, elem), v);
}

template <bool kBf16>
__device__ __forceinline__ void store8(void* base, int64_t elem, const float (&v_in)[8]) {
  if (kBf16) {
    // No NaN among the eight (the sum is NaN otherwise, or for inf - inf: then the general path, same
    // bits): the hardware's RNE conversion, two values an instruction.
    const float any = add_rn(add_rn(add_rn(v_in[0], v_in[1]), add_rn(v_in[2], v_in[3])), add_rn(add_rn(v_in[4], v_in[5]), add_rn(v_in[6], v_in[7])));
    if (any == any) {
      const uint4 q = make_uint4(pack_bf16x2_finite(v_in[0], v_in[1]), pack_bf16x2_finite(v_in[2], v_in[3]), pack_bf16x2_finite(v_in[4], v_in[5]),
                                 pack_bf16x2_finite(v_in[6], v_in[7]));
      *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + elem) = q;
      return;
    }
  }
  float v[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) v[e] = canon_nan(v_in[e]);
  if (kBf16) {
    // RNE as f32_to_bf16_bits.
    uint4 q;
    q.x = static_cast<uint32_t>(f32_to_bf16_bits(v[0])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[1])) << 16);
    q.y = static_cast<uint32_t>(f32_to_bf16_bits(v[2])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[3])) << 16);
    q.z = static_cast<uint32_t>(f32_to_bf16_bits(v[4])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[5])) << 16);
    q.w = static_cast<uint32_t>(f32_to_bf16_bits(v[6])) | (static_cast<uint32_t>(f32_to_bf16_bits(v[7])) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(base) + elem) = q;
  } else {
    float4* p = reinterpret_cast<float4*>(static_cast<float*>(base) + elem);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
  }
}

// RoPE's cos and sin of position t, pairs j .. j + 7, rounded to the dtype (sin negated for the inverse).
template <bool kBf16>
__device__ __forceinline__ void rope_tables8(const float* cos, const float* sin, int64_t half, int64_t t, int64_t j, bool inverse,
                                             float (&c)[8], float (&sn)[8]) {
  const float4* cp = reinterpret_cast<const float4*>(cos + t * half + j);
  const float4* sp = reinterpret_cast<const float4*>(sin + t * half + j);
  const float4 c0 = cp[0], c1 = cp[1], s0 = sp[0], s1 = sp[1];
  const float cr[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w}, sr[8] = {s0.x, s0.y, s0.z, s0.w, s1.x, s1.y, s1.z, s1.w};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    c[e] = round_to_dtype(kBf16, cr[e]);
    const float se = round_to_dtype(kBf16, sr[e]);
    sn[e] = inverse ? -se : se;
  }
}

}  // namespace
}  // namespace ufp4
