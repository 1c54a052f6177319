// The CPU quantizer of the training path: the reference's steps (kernels/quantize.h) with the
// kernels' arithmetic (quantize_element.h: decision thresholds and dyadic shortcuts instead of a
// distance search per level, one Philox call per 16 SR draws). The oracle stays reference_quantize();
// tests hold this one to it bit for bit on every grid, scale kind, rounding, RHT size and layout.
#include <algorithm>
#include <vector>

#include "kernels/float_bits.h"
#include "kernels/philox.h"
#include "kernels/quantize.h"
#include "kernels/quantize_element.h"

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

// Block amax in output coordinates, [R, nblk]; 2D blocks take their 16x16 tile's amax.
std::vector<float> block_amax(const KernelSpec& s, const std::vector<float>& t, int64_t R, int64_t L) {
  const int64_t B = s.block, nblk = num_blocks(s, L);
  std::vector<float> amax(static_cast<size_t>(R * nblk), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < L; ++j) {
      float& m = amax[(s.block_2d ? (r / 16) * 16 : r) * nblk + j / B];
      m = nan_max(m, std::fabs(t[r * L + j]));
    }
  if (s.block_2d)  // every row of a tile carries the tile's amax
    for (int64_t r = 0; r < R; ++r)
      if (r % 16 != 0) std::copy_n(&amax[(r / 16) * 16 * nblk], nblk, &amax[r * nblk]);
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
      if (s.fast.kind == kGridUniform) round_block<kGridUniform>(s, io, cs, t.data(), r, L, j0, j1);
      else if (s.fast.kind == kGridE2M1) round_block<kGridE2M1>(s, io, cs, t.data(), r, L, j0, j1);
      else round_block<kGridGeneric>(s, io, cs, t.data(), r, L, j0, j1);
    }
}

}  // namespace ufp4
