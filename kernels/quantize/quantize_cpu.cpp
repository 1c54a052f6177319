// The CPU quantizer of the training path: the reference's steps (kernels/quantize/quantize.h) with the
// kernels' arithmetic (quantize_element.h: decision thresholds and dyadic shortcuts instead of a
// distance search per level, one Philox call per 16 SR draws), and for the common block (E2M1 or a
// uniform grid, 16 elements at a time) the same arithmetic as vectorizable lane loops. The oracle stays
// reference_quantize(); tests hold this one to it bit for bit on every grid, scale kind, rounding, RHT
// size and layout.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/philox.h"
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_element.h"

namespace ufp4 {

namespace {

// The input in output coordinates [R, L] as FP32; columnwise reads go tile by tile for the cache.
std::vector<float> load_output_layout(const QuantizeIO& io) {
  const int64_t R = out_rows(io), L = out_cols(io);
  std::vector<float> t(static_cast<size_t>(R * L));
  const bool bf16 = io.in_dtype == DType::kBF16;
  auto at = [&](int64_t i) {
    return bf16 ? bf16_bits_to_f32(static_cast<const uint16_t*>(io.in)[i]) : static_cast<const float*>(io.in)[i];
  };
  if (!io.columnwise) {
    for (int64_t i = 0; i < R * L; ++i) t[i] = at(i);
    return t;
  }
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < R; r0 += kTile)
    for (int64_t j0 = 0; j0 < L; j0 += kTile)
      for (int64_t j = j0; j < std::min(L, j0 + kTile); ++j)
        for (int64_t r = r0; r < std::min(R, r0 + kTile); ++r) t[r * L + j] = at(j * io.cols + r);
  return t;
}

// Block amax in output coordinates, [R, nblk]; 2D blocks take their 16x16 tile's amax. The maximum of
// the magnitudes' bit patterns: they order as the magnitudes do and every NaN lies above inf, so it is
// nan_max's result (a NaN becomes the canonical one) as an integer max the compiler vectorizes.
std::vector<float> block_amax(const KernelSpec& s, const std::vector<float>& t, int64_t R, int64_t L) {
  const int64_t B = s.block, nblk = num_blocks(s, L);
  std::vector<uint32_t> bits(static_cast<size_t>(R * nblk), 0u);
  for (int64_t r = 0; r < R; ++r) {
    const float* row = t.data() + r * L;
    uint32_t* out = bits.data() + (s.block_2d ? (r / 16) * 16 : r) * nblk;
    for (int64_t b = 0; b < nblk; ++b) {
      uint32_t m = 0;
      for (int64_t j = b * B; j < std::min(L, (b + 1) * B); ++j) m = std::max(m, f32_bits(row[j]) & 0x7fffffffu);
      out[b] = std::max(out[b], m);
    }
  }
  std::vector<float> amax(bits.size());
  for (int64_t r = 0; r < R; ++r)  // every row of a 2D tile carries the tile's amax
    for (int64_t b = 0; b < nblk; ++b) {
      const uint32_t m = bits[(s.block_2d ? (r / 16) * 16 : r) * nblk + b];
      amax[r * nblk + b] = m > 0x7f800000u ? canonical_nan() : bits_f32(m);
    }
  return amax;
}

template <int kClass>
void round_block(const KernelSpec& s, const QuantizeIO& io, const ChunkScale& cs, const float* t, int64_t r, int64_t L, int64_t j0, int64_t j1) {
  const GridParams& g = s.grid;
  const bool sr = s.rounding == 1, want_codes = io.codes != nullptr;
  U32x4 rnd{{0, 0, 0, 0}};
  uint64_t rnd_group = ~0ull;
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t oi = r * L + j;
    uint32_t k = 0;
    if (sr) {
      const uint64_t group = static_cast<uint64_t>(oi) >> 4;
      if (group != rnd_group) rnd = sr_bytes16(s.seed, s.offset, rnd_group = group);
      k = sr_byte(rnd, static_cast<int>(oi & 15));
    }
    uint32_t code = 0;
    const float dq = round_element<kClass>(s, g.level, g.code, cs, sr, want_codes, t[oi], k, code);
    if (io.dequant) {
      if (io.out_dtype == DType::kF32) static_cast<float*>(io.dequant)[oi] = dq;
      else static_cast<uint16_t*>(io.dequant)[oi] = f32_to_bf16_bits(dq);
    }
    if (want_codes) {
      uint8_t& byte = io.codes[r * ((L + 1) / 2) + j / 2];
      byte = (j & 1) == 0 ? static_cast<uint8_t>(code) : static_cast<uint8_t>(byte | (code << 4));
    }
  }
}

// ---- Sixteen lanes: the common block, branch-free -------------------------------------------------
// A normal block (state 0) of 16 elements in one SR group on a sign-magnitude E2M1 or uniform grid
// is what training quantizes almost always. round_element's arithmetic for it, as lane loops without
// data-dependent branches (the sign is a bit, saturation and SR's choice are selects), which the
// compiler vectorizes: several times faster than the element loop, whose sign and rounding branches
// mispredict half the time. Same operations in the same order, so the same bits (the tests hold this
// path, like the element loop, to reference_quantize()).
constexpr int kLanes = 16;

inline float select(bool c, float a, float b) { return c ? a : b; }

// floorf for 0 <= t (inf included) without a libm call: below 2^23 the truncation is the floor.
inline float floor_nonneg(float t) {
  const float small = static_cast<float>(static_cast<int32_t>(min_hd(t, 0x1p23f)));
  return t < 0x1p23f ? small : t;
}

// rint_even for m >= 0 (inf included): its 2^23 trick without the sign handling.
inline float rint_nonneg(float m) { return m < 0x1p23f ? (m + 0x1p23f) - 0x1p23f : m; }

// sr_up for p >= 0.
inline bool sr_up_nonneg(float p, uint32_t k) { return rint_nonneg(p * 256.0f) + static_cast<float>(k) >= 256.0f; }

// stochastic_e2m1 as selects: below 1 the floor of 2a is 0 or 1, so the lower neighbour is 0 or 0.5.
inline float stochastic_e2m1_lane(float top, float a, uint32_t k) {
  const uint32_t b = f32_bits(a), e = b & 0x7f800000u;
  const bool small = a < 1.0f;
  const float lo = small ? select(a >= 0.5f, 0.5f, 0.0f) : bits_f32(b & 0xffc00000u);
  const float w = small ? 0.5f : bits_f32(e - 0x00800000u);
  const float inv_w = small ? 2.0f : bits_f32(0x7f800000u - e);
  const float rounded = sr_up_nonneg((a - lo) * inv_w, k) ? lo + w : lo;
  return lo >= top ? top : rounded;
}

inline float stochastic_uniform_lane(const FastGrid& f, float a, uint32_t k) {
  const float t = a * f.inv_step, lo = floor_nonneg(t), last = f.top * f.inv_step;
  const float rounded = sr_up_nonneg(t - lo, k) ? lo + 1.0f : lo;
  return lo >= last ? last : rounded;
}

inline uint32_t e2m1_index_lane(float level) {
  const uint32_t u = f32_bits(level);
  const uint32_t big = 2u + 2u * ((u >> 23) - 127u) + ((u >> 22) & 1u);
  return level < 1.0f ? static_cast<uint32_t>(static_cast<int32_t>(level * 2.0f)) : big;
}

// The lanes' dequantized values (as bits, the sign applied) and codes. x: the block's inputs after RHT.
template <int kClass, bool kSr, bool kMultiply>
void round_lanes(const KernelSpec& s, const ChunkScale& cs, const float* __restrict x, const uint32_t* __restrict draws,
                 uint32_t* __restrict dq_bits, uint32_t* __restrict codes) {
  const FastGrid f = s.fast;
  for (int i = 0; i < kLanes; ++i) {
    const uint32_t sign = f32_bits(x[i]) & 0x80000000u;
    const float v = kMultiply ? x[i] * cs.factor : x[i] / cs.factor;  // the host divides (cs.fast_div is off)
    const float a = std::fabs(v);
    float level;
    uint32_t idx;
    if (kClass == kGridUniform) {
      const float t = kSr ? stochastic_uniform_lane(f, a, draws[i]) : min_hd(rint_nonneg(a * f.inv_step), f.top * f.inv_step);
      level = t * f.step;
      idx = static_cast<uint32_t>(static_cast<int32_t>(t));
    } else {
      level = kSr ? stochastic_e2m1_lane(f.top, a, draws[i]) : nearest_e2m1(f, a);
      idx = e2m1_index_lane(level);
    }
    dq_bits[i] = f32_bits(level * cs.decode) ^ sign;  // -dq flips the sign bit, NaN included
    codes[i] = idx | (sign >> 28);                   // the sign bit of a sign-magnitude code is 8
  }
}

using LanesFn = void (*)(const KernelSpec&, const ChunkScale&, const float*, const uint32_t*, uint32_t*, uint32_t*);

template <int kClass>
LanesFn lanes_for(bool sr, bool multiply) {
  if (sr) return multiply ? round_lanes<kClass, true, true> : round_lanes<kClass, true, false>;
  return multiply ? round_lanes<kClass, false, true> : round_lanes<kClass, false, false>;
}

// The lane path for this spec, or nullptr where the element loop must run (generic grids, asymmetric
// grids, blocks that are not one whole SR group).
LanesFn lanes_fn(const KernelSpec& s, int64_t L) {
  if (!s.grid.symmetric || s.block % kLanes != 0 || L % kLanes != 0) return nullptr;
  const bool sr = s.rounding == 1, multiply = s.scale_kind == 1;
  if (s.fast.kind == kGridE2M1) return lanes_for<kGridE2M1>(sr, multiply);
  if (s.fast.kind == kGridUniform) return lanes_for<kGridUniform>(sr, multiply);
  return nullptr;
}

// Writes sixteen lanes of output row r from column j0.
void store_lanes(const QuantizeIO& io, int64_t r, int64_t L, int64_t j0, const uint32_t* dq_bits, const uint32_t* codes) {
  const int64_t oi = r * L + j0;
  if (io.dequant) {
    if (io.out_dtype == DType::kF32) {
      std::memcpy(static_cast<float*>(io.dequant) + oi, dq_bits, kLanes * sizeof(float));
    } else {
      uint16_t* out = static_cast<uint16_t*>(io.dequant) + oi;
      for (int i = 0; i < kLanes; ++i) out[i] = f32_to_bf16_bits(bits_f32(dq_bits[i]));
    }
  }
  if (io.codes) {
    uint8_t* out = io.codes + r * ((L + 1) / 2) + j0 / 2;
    for (int i = 0; i < kLanes / 2; ++i) out[i] = static_cast<uint8_t>(codes[2 * i] | (codes[2 * i + 1] << 4));
  }
}

}  // namespace

void cpu_quantize(const KernelSpec& s, const QuantizeIO& io) {
  check_quantize_shape(s, io);
  const int64_t R = out_rows(io), L = out_cols(io), B = s.block, nblk = num_blocks(s, L);
  std::vector<float> t = load_output_layout(io);
  if (s.rht) reference_rht_rows(t.data(), R, L, s);
  const std::vector<float> amax = block_amax(s, t, R, L);
  float tensor_amax = 0.0f;
  for (float m : amax) tensor_amax = nan_max(tensor_amax, m);
  if (io.tensor_amax) *io.tensor_amax = tensor_amax;

  const LanesFn lanes = lanes_fn(s, L);
  const bool sr = s.rounding == 1;
  uint32_t draws[kLanes] = {}, dq_bits[kLanes], codes[kLanes];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t bi = r * nblk + b;
      uint8_t bits = 0;
      ChunkScale cs = chunk_scale(s, amax[bi], tensor_amax, bits);
      cs.fast_div = false;  // the host divides: the same quotient (div_by_scale is exact) without a libm fmaf call
      if (io.scales) io.scales[bi] = cs.state == 1 ? 0.0f : cs.decode;
      if (io.amax) io.amax[bi] = amax[bi];
      if (io.scale_bits) io.scale_bits[bi] = bits;
      const int64_t j0 = b * B, j1 = std::min(L, j0 + B);
      if (lanes && cs.state == 0) {
        for (int64_t c0 = j0; c0 < j1; c0 += kLanes) {
          if (sr) {  // one Philox call: the group of the chunk's first element (c0 is a multiple of 16)
            const U32x4 rnd = sr_bytes16(s.seed, s.offset, static_cast<uint64_t>(r * L + c0) >> 4);
            for (int i = 0; i < kLanes; ++i) draws[i] = sr_byte(rnd, i);
          }
          lanes(s, cs, t.data() + r * L + c0, draws, dq_bits, codes);
          store_lanes(io, r, L, c0, dq_bits, codes);
        }
        continue;
      }
      if (s.fast.kind == kGridUniform) round_block<kGridUniform>(s, io, cs, t.data(), r, L, j0, j1);
      else if (s.fast.kind == kGridE2M1) round_block<kGridE2M1>(s, io, cs, t.data(), r, L, j0, j1);
      else round_block<kGridGeneric>(s, io, cs, t.data(), r, L, j0, j1);
    }
}

}  // namespace ufp4
