// The CPU oracle. Written as plainly as possible and independently of the CUDA rounding code:
// the nearest level is found by comparing distances in double, not by decision thresholds.
#include <cfloat>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/philox.h"
#include "kernels/quantize/quantize.h"
#include "kernels/numerics/rounding.h"

namespace ufp4 {

namespace {

float load(const QuantizeIO& io, int64_t idx) {
  if (io.in_dtype == DType::kF32) return static_cast<const float*>(io.in)[idx];
  return bf16_bits_to_f32(static_cast<const uint16_t*>(io.in)[idx]);
}

// Nearest level to a (magnitude for symmetric grids, signed value otherwise); ties to even code.
int nearest_level(const GridParams& g, float a) {
  if (is_nan(a)) return 0;
  if (a >= g.level[g.n - 1]) return g.n - 1;
  if (a <= g.level[0]) return 0;
  int best = 0;
  double dbest = std::fabs(static_cast<double>(a) - g.level[0]);
  for (int i = 1; i < g.n; ++i) {
    double d = std::fabs(static_cast<double>(a) - g.level[i]);
    if (d < dbest || (d == dbest && (g.code[i] & 1) == 0 && (g.code[best] & 1) != 0)) {
      best = i;
      dbest = d;
    }
  }
  return best;
}

int stochastic_level(const GridParams& g, float a, uint32_t k) {
  if (is_nan(a)) return 0;
  if (a >= g.level[g.n - 1]) return g.n - 1;
  if (a < g.level[0]) return 0;
  int lo = 0;
  while (lo + 1 < g.n && g.level[lo + 1] <= a) ++lo;
  float p = (a - g.level[lo]) / (g.level[lo + 1] - g.level[lo]);
  return sr_up(p, k) ? lo + 1 : lo;
}

enum class BlockState { kNormal, kZero, kNan };
struct BlockScale {
  BlockState state = BlockState::kNormal;
  bool multiply = false;  // nvfp4 multiplies by a reciprocal; fp32 and mx divide
  float factor = 0;       // divisor or reciprocal
  float decode = 0;       // dequantization scale
  uint8_t bits = 0;       // E4M3 / E8M0 code
};

BlockScale block_scale(const KernelSpec& s, float amax, float s_enc) {
  BlockScale b;
  const float gmax = s.grid.gmax;
  if (!is_finite(amax)) {
    b.state = BlockState::kNan;
    b.decode = canonical_nan();
    b.bits = s.scale_kind == 2 ? 0xff : 0x7f;
    return b;
  }
  if (s.scale_kind == 0) {
    float sc = amax / gmax;
    if (sc == 0.0f) { b.state = BlockState::kZero; return b; }
    b.factor = sc;
    b.decode = sc;
  } else if (s.scale_kind == 1) {
    float e4m3 = round_to_e4m3(std::fmin(amax * (s_enc * (1.0f / gmax)), FLT_MAX));
    float s_dec = 1.0f / s_enc;
    b.multiply = true;
    b.factor = std::fmin(1.0f / (e4m3 * s_dec), FLT_MAX);
    b.decode = e4m3 * s_dec;
    b.bits = e4m3_code(e4m3);
  } else if (s.scale_kind == 3) {
    b.factor = 1.0f;
    b.decode = 1.0f;
  } else {
    int e = amax == 0.0f ? -127 : floor_log2(amax) - floor_log2(gmax);
    e = e < -127 ? -127 : (e > 127 ? 127 : e);
    b.factor = exp2_int(e);
    b.decode = b.factor;
    b.bits = e8m0_code(e);
  }
  return b;
}

float nvfp4_encode_scale(float tensor_amax, float gmax) {
  float e = std::fmin(448.0f * gmax / tensor_amax, FLT_MAX);
  if (tensor_amax == 0.0f || e == 0.0f) return 1.0f;
  return e;
}

}  // namespace

int64_t quantize_workspace_floats(const KernelSpec& s, int64_t rows, int64_t cols) {
  return s.block_2d ? ((rows + 15) / 16) * ((cols + 15) / 16) : 1;
}

void check_quantize_shape(const KernelSpec& s, const QuantizeIO& io) {
  if (io.rows <= 0 || io.cols <= 0) throw Error("quantize: empty tensor (" + std::to_string(io.rows) + "x" + std::to_string(io.cols) + ")");
  int64_t L = out_cols(io);
  if (s.rht && L % s.rht != 0)
    throw Error("rht: size " + std::to_string(s.rht) + " must divide the quantized dimension (" + std::to_string(L) +
                "); pad the tensor or choose a smaller rht");
  if (s.scale_kind == 1 && io.tensor_amax == nullptr) throw Error("quantize: nvfp4 scales need a tensor_amax buffer");
}

void reference_rht_rows(float* data, int64_t rows, int64_t cols, const KernelSpec& s, bool inverse) {
  const int n = s.rht;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t seg = 0; seg + n <= cols; seg += n) {
      float* x = data + r * cols + seg;
      auto apply_signs = [&] {
        for (int i = 0; i < n; ++i)
          if ((s.rht_signs[i >> 5] >> (i & 31)) & 1u) x[i] = -x[i];
      };
      if (!inverse) apply_signs();
      for (int h = 1; h < n; h <<= 1)
        for (int i = 0; i < n; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            float a = x[j], b = x[j + h];
            x[j] = a + b;
            x[j + h] = a - b;
          }
      for (int i = 0; i < n; ++i) x[i] *= s.rht_scale;
      if (inverse) apply_signs();
    }
  }
}

void reference_quantize(const KernelSpec& s, const QuantizeIO& io) {
  check_quantize_shape(s, io);
  const int64_t R = out_rows(io), L = out_cols(io), B = s.block, nblk = num_blocks(s, L);
  const GridParams& g = s.grid;

  std::vector<float> t(static_cast<size_t>(R * L));
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < L; ++j)
      t[r * L + j] = load(io, io.columnwise ? j * io.cols + r : r * io.cols + j);
  if (s.rht) reference_rht_rows(t.data(), R, L, s);

  // Block amax, in output coordinates.
  std::vector<float> amax(static_cast<size_t>(R * nblk), 0.0f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t b = 0; b < nblk; ++b) {
      float m = 0.0f;
      if (s.block_2d) {  // the 16x16 tile of the input holding this block
        int64_t r0 = (r / 16) * 16, c0 = b * 16;  // output coordinates of the tile
        for (int64_t rr = r0; rr < std::min(R, r0 + 16); ++rr)
          for (int64_t j = c0; j < std::min(L, c0 + 16); ++j) m = nan_max(m, std::fabs(t[rr * L + j]));
      } else {
        for (int64_t j = b * B; j < std::min(L, (b + 1) * B); ++j) m = nan_max(m, std::fabs(t[r * L + j]));
      }
      amax[r * nblk + b] = m;
    }
  float tensor_amax = 0.0f;
  for (float m : amax) tensor_amax = nan_max(tensor_amax, m);
  if (io.tensor_amax) *io.tensor_amax = tensor_amax;
  const bool tensor_nan = s.scale_kind == 1 && !is_finite(tensor_amax);
  const float s_enc = s.scale_kind == 1 && !tensor_nan ? nvfp4_encode_scale(tensor_amax, g.gmax) : 1.0f;

  for (int64_t r = 0; r < R; ++r) {
    for (int64_t b = 0; b < nblk; ++b) {
      float bm = amax[r * nblk + b];
      BlockScale bs = block_scale(s, tensor_nan ? canonical_nan() : bm, s_enc);
      if (io.scales) io.scales[r * nblk + b] = bs.state == BlockState::kZero ? 0.0f : bs.decode;
      if (io.amax) io.amax[r * nblk + b] = bm;
      if (io.scale_bits) io.scale_bits[r * nblk + b] = bs.bits;
      for (int64_t j = b * B; j < std::min(L, (b + 1) * B); ++j) {
        const int64_t oi = r * L + j;
        const float x = t[oi];
        const bool neg = (f32_bits(x) >> 31) != 0;
        int idx = 0;
        float dq;
        if (bs.state == BlockState::kNan) {
          dq = canonical_nan();
        } else if (bs.state == BlockState::kZero) {
          dq = 0.0f;
        } else {
          float v = bs.multiply ? x * bs.factor : x / bs.factor;
          float a = g.symmetric ? std::fabs(v) : v;
          idx = s.rounding == 0 ? nearest_level(g, a)
                                : stochastic_level(g, a, sr_draw(s.seed, s.offset, static_cast<uint64_t>(oi)));
          dq = g.level[idx] * bs.decode;
        }
        uint8_t code;
        if (bs.state == BlockState::kNan) {
          code = g.code[nearest_level(g, 0.0f)];  // the code of 0: a NaN's sign is not reproducible
        } else if (g.symmetric) {
          code = static_cast<uint8_t>(g.code[idx] | (neg ? 8 : 0));
          if (neg) dq = -dq;
        } else {
          if (bs.state == BlockState::kZero) idx = nearest_level(g, 0.0f);
          code = g.code[idx];
        }
        if (io.dequant) {
          if (io.out_dtype == DType::kF32) static_cast<float*>(io.dequant)[oi] = dq;
          else static_cast<uint16_t*>(io.dequant)[oi] = f32_to_bf16_bits(dq);
        }
        if (io.codes) {
          uint8_t& byte = io.codes[r * ((L + 1) / 2) + j / 2];
          if ((j & 1) == 0) byte = code; else byte = static_cast<uint8_t>(byte | (code << 4));
        }
      }
    }
  }
}

}  // namespace ufp4
