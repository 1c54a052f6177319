// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator behind stochastic rounding.
// The same (key, counter) gives the same 128 bits on CPU and GPU, whatever the launch shape.
#pragma once
#include <cstdint>
#include "kernels/hd.h"

namespace ufp4 {

struct U32x4 { uint32_t v[4]; };

UFP4_HD uint32_t mulhi32(uint32_t a, uint32_t b) {
  return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
}

UFP4_HD U32x4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0, uint32_t k1) {
  const uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0 = mulhi32(M0, c0), lo0 = M0 * c0;
    uint32_t hi1 = mulhi32(M1, c2), lo1 = M1 * c2;
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0; c1 = lo1; c2 = n2; c3 = lo0;
    k0 += W0; k1 += W1;
  }
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

// Uniform in [0, 1) with 24 random bits: exactly representable, identical on host and device.
UFP4_HD float bits_to_unit(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

}  // namespace ufp4
