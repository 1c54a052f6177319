// Device pieces of the segmented quantizer's hot kernels (kernels/moe/quantize_segments_cuda.cu) shared
// with its pair kernel (kernels/moe/quantize_segments_pair_cuda.cu): where a row's operand is, the general
// arithmetic for the chunks the hot arithmetic declines, and the columnwise 16 x 128 tile.
#pragma once
#include <cstdint>

#include "kernels/quantize/quantize_device.cuh"
#include "kernels/quantize/quantize_hot.h"
#include "kernels/moe/quantize_segments.h"

namespace ufp4 {
namespace {

// The segment holding row t: the first g with ends[g] > t (G when none does).
__device__ __forceinline__ int segment_of(const int32_t* ends, int G, int64_t t) {
  int lo = 0, hi = G;
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (ends[mid] > t) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

// One chunk of raw values x (RHT signs not applied) in the general arithmetic: the chunks the hot
// path declines (zero, non-finite, tiny or huge blocks). Elements from nvalid on are +0.
template <int kClass, bool kSR>
__device__ __forceinline__ void general_chunk(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, float (&x)[16], uint32_t signs,
                                              uint64_t seed, uint64_t sr0, int nvalid, uint32_t (&out)[8]) {
  if (s.rht) rht16_signs(s, signs, x);
  uint8_t bits = 0;
  const ChunkScale cs = chunk_scale(s, chunk_amax(x), 0.0f, bits);
  float y[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    uint32_t code = 0;
    const uint32_t k = kSR && i < nvalid ? sr_draw(seed, sr_offset(s), sr0 + i) : 0u;
    y[i] = i < nvalid ? round_element<kClass>(s, sh_level, sh_code, cs, kSR, false, x[i], k, code) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = pack_bf16x2(y[2 * k], y[2 * k + 1], false);
}

// Columnwise tiles: 16 layout rows (one chunk of one operand: columnwise operands start on multiples
// of 16) x 128 columns, one column a thread.
constexpr int kSegColThreads = 128;
constexpr int kSegColUnits = kSegColThreads / 8;  // 16-byte units of a BF16 tile row (the output's)

// Element i of 16 raw input values at v[i * stride] (a tile's column: stride 128; a row: 1), as FP32 bits.
template <bool kF32>
__device__ __forceinline__ uint32_t strided_bits(const void* v, int i, int stride) {
  if (kF32) return static_cast<const uint32_t*>(v)[i * stride];
  return static_cast<uint32_t>(static_cast<const uint16_t*>(v)[i * stride]) << 16;
}

// A chunk the hot arithmetic declined (or whose SR draws are off a 16-element group), in the general
// arithmetic: out of line, so the rare case costs the hot code no registers. v: the chunk's raw values,
// element i at v[i * stride] (a tile's column: stride 128; a row of the input: 1). The columnwise and
// the pair kernel's rowwise chunks call this one function: two out-of-line callees cost the pair
// kernel 16 more registers than one.
template <int kClass, bool kSR, bool kF32>
__device__ __noinline__ void general_strided_chunk(const KernelSpec& s, const float* sh_level, const uint8_t* sh_code, const void* v, int stride,
                                                   uint32_t signs, uint64_t seed, uint64_t sr0, int nvalid, uint32_t* out) {
  float x[16];
#pragma unroll
  for (int i = 0; i < 16; ++i)
    x[i] = bits_f32(strided_bits<kF32>(v, i, stride));
  uint32_t o[8];
  general_chunk<kClass, kSR>(s, sh_level, sh_code, x, signs, seed, sr0, nvalid, o);
#pragma unroll
  for (int k = 0; k < 8; ++k) out[k] = o[k];
}

// Column chunk of a tile: column c of operand g from operand position pos (of len; nvalid of its 16
// elements inside), raw values at col[i * 128]; out: its 16 BF16 results, element 2k in the low half of
// word k. offset: sr_offset(s), which the caller may keep rather than read again a chunk.
template <int kClass, bool kSR, bool kRht, bool kF32>
__device__ __forceinline__ void round_col_chunk(const KernelSpec& s, const HotParams& h, const SegmentedQuantizeIO& io, const float* sh_level,
                                                const uint8_t* sh_code, const void* col, int g, int64_t c, int64_t len, int64_t pos, int nvalid,
                                                uint64_t offset, uint32_t (&out)[8]) {
  const uint32_t signs = kRht ? io.rht_signs[4 * g] : 0u;  // operands start on whole RHT segments: position i
  float x[16];
  if (kRht && signs == s.rht_signs[0]) {
    // The spec's own signs (every operand's, unless the recipe draws them per layer or step): the flips
    // from the parameters, one instruction an element instead of three.
#pragma unroll
    for (int i = 0; i < 16; ++i) x[i] = bits_f32(strided_bits<kF32>(col, i, kSegColThreads) ^ h.rht_flip[i]);
  } else {
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t flip = kRht && ((signs >> i) & 1u) ? 0x80000000u : 0u;
      x[i] = bits_f32(strided_bits<kF32>(col, i, kSegColThreads) ^ flip);
    }
  }
  const uint64_t seed = kSR ? io.seeds[g] : 0;
  const uint64_t sr0 = static_cast<uint64_t>(c * len + pos);  // element (column, pos) of the [cols, len] operand
  // SR draws off a 16-element group (operands of any length, without the RHT) take the general code
  // too: an out-of-line draw function here cost the kernel 90 registers.
  const bool aligned = !kSR || (sr0 & 15) == 0;
  const U32x4 rnd = kSR && aligned ? sr_bytes16(seed, offset, sr0 >> 4) : U32x4{};
  if (!aligned || !hot_chunk_values<kClass, kSR, kRht>(h, x, rnd, out))
    general_strided_chunk<kClass, kSR, kF32>(s, sh_level, sh_code, col, kSegColThreads, signs, seed, sr0, nvalid, out);
}

}  // namespace
}  // namespace ufp4
