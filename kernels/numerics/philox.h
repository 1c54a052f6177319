// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator behind stochastic rounding.
// The same (key, counter) gives the same 128 bits on CPU and GPU, whatever the launch shape.
#pragma once
#include <cstdint>
#include "kernels/numerics/hd.h"

namespace ufp4 {

struct U32x4 { uint32_t v[4]; };

constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u, kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// One round. On the GPU each product is one 32 x 32 -> 64-bit multiply split into its 32-bit halves
// in PTX: formed as 64-bit C++ products, the compiler merged the round's 32-bit state into 64-bit
// operations and spent two extra additions a round; asked for as a low and a high product, it
// emitted two multiplies where register pressure was high (the segmented pair kernel). Same bits.
#if defined(__CUDA_ARCH__)
__device__ __forceinline__ void philox_mul(uint32_t a, uint32_t m, uint32_t& lo, uint32_t& hi) {
  asm("{\n\t.reg .u64 p;\n\tmul.wide.u32 p, %2, %3;\n\tmov.b64 {%0, %1}, p;\n\t}" : "=r"(lo), "=r"(hi) : "r"(a), "r"(m));
}
#endif
UFP4_HD void philox_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
#if defined(__CUDA_ARCH__)
  uint32_t lo0, hi0, lo1, hi1;
  philox_mul(c0, kPhiloxM0, lo0, hi0);
  philox_mul(c2, kPhiloxM1, lo1, hi1);
#else
  const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0, p1 = static_cast<uint64_t>(kPhiloxM1) * c2;
  const uint32_t lo0 = static_cast<uint32_t>(p0), hi0 = static_cast<uint32_t>(p0 >> 32), lo1 = static_cast<uint32_t>(p1),
                 hi1 = static_cast<uint32_t>(p1 >> 32);
#endif
  const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
  c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
}

UFP4_HD U32x4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
UFP4_UNROLL
  for (int round = 0; round < 10; ++round) {
    philox_round(c0, c1, c2, c3, k0, k1);
    k0 += kPhiloxW0; k1 += kPhiloxW1;
  }
  return U32x4{{c0, c1, c2, c3}};
}

// The same with the ten round keys precomputed (kernels keep them in constant memory).
struct PhiloxKeys { uint32_t k0[10], k1[10]; };
inline PhiloxKeys philox_keys(uint64_t key) {
  PhiloxKeys k;
  uint32_t a = static_cast<uint32_t>(key), b = static_cast<uint32_t>(key >> 32);
  for (int r = 0; r < 10; ++r, a += kPhiloxW0, b += kPhiloxW1) { k.k0[r] = a; k.k1[r] = b; }
  return k;
}
UFP4_HD U32x4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, const PhiloxKeys& k) {
UFP4_UNROLL
  for (int round = 0; round < 10; ++round) philox_round(c0, c1, c2, c3, k.k0[round], k.k1[round]);
  return U32x4{{c0, c1, c2, c3}};
}

// 32 random bits for element `index` of a stream keyed by (seed, offset): one Philox call
// serves four consecutive indices.
UFP4_HD uint32_t philox_bits(uint64_t seed, uint64_t offset, uint64_t index) {
  uint64_t group = index >> 2;
  U32x4 r = philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32),
                          static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32),
                          static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return r.v[index & 3];
}

// Stochastic rounding's draws: 8 bits an element (the resolution of the FP4 hardware SR instruction,
// cvt.rs), 16 elements a Philox call. Element `index` takes byte index % 16 of the call at counter
// (index / 16, offset) keyed by seed: byte b is bits 8 (b % 4) .. 8 (b % 4) + 7 of word b / 4.
UFP4_HD uint32_t sr_byte(const U32x4& r, int b) {
#if defined(__CUDA_ARCH__)
  const uint32_t w = r.v[(b >> 2) & 3];
  return (b & 3) == 3 ? w >> 24 : __byte_perm(w, 0u, 0x4440u + static_cast<unsigned>(b & 3));  // one op (a shift may fuse into an add)
#else
  return (r.v[(b >> 2) & 3] >> (8 * (b & 3))) & 0xffu;
#endif
}
UFP4_HD U32x4 sr_bytes16(uint64_t seed, uint64_t offset, uint64_t group) {
  return philox4x32_10(static_cast<uint32_t>(group), static_cast<uint32_t>(group >> 32), static_cast<uint32_t>(offset),
                       static_cast<uint32_t>(offset >> 32), static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}
UFP4_HD uint32_t sr_draw(uint64_t seed, uint64_t offset, uint64_t index) {
  return sr_byte(sr_bytes16(seed, offset, index >> 4), static_cast<int>(index & 15));
}

}  // namespace ufp4
