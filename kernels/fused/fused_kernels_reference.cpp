// CPU reference of the fused ops, in the CUDA kernels' order (kernels/fused/fused_kernels.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/fused/fused_kernels.h"

namespace ufp4 {

namespace {

float load(const void* p, DType t, int64_t i) {
  return t == DType::kBF16 ? bf16_bits_to_f32(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}
void store(void* p, DType t, int64_t i, float v) {
  v = canon_nan(v);
  if (t == DType::kBF16) static_cast<uint16_t*>(p)[i] = f32_to_bf16_bits(v);
  else static_cast<float*>(p)[i] = v;
}

// The butterfly tree over partners' partial sums (every partner ends with the same value).
float tree_sum(std::vector<float> v) {
  for (size_t h = 1; h < v.size(); h *= 2) {
    std::vector<float> next(v.size());
    for (size_t p = 0; p < v.size(); ++p) next[p] = v[p] + v[p ^ h];
    v.swap(next);
  }
  return v[0];
}

// Folds f(i) over a row of n elements split over `partners` (element i to partner (i / 8) % partners).
template <class F>
float row_sum(int64_t n, int partners, F f) {
  std::vector<float> acc(static_cast<size_t>(partners), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    float& a = acc[static_cast<size_t>((i / 8) % partners)];
    a = f(i, a);
  }
  return tree_sum(std::move(acc));
}

}  // namespace

void reference_rms_norm_forward(const RmsNormIO& io) {
  const float fd = static_cast<float>(io.d);
  const void* x_in = io.x;
  if (io.residual) {
    for (int64_t i = 0; i < io.rows * io.d; ++i) store(io.sum, io.dtype, i, add_rn(load(io.x, io.dtype, i), load(io.residual, io.dtype, i)));
    x_in = io.sum;
  }
  for (int64_t t = 0; t < io.rows; ++t) {
    const int64_t o = t * io.d;
    const float ss = row_sum(io.d, kRmsLanes, [&](int64_t i, float a) {
      const float x = load(x_in, io.dtype, o + i);
      return fmaf(x, x, a);
    });
    const float r = 1.0f / std::sqrt(ss / fd + io.eps);
    io.r[t] = canon_nan(r);
    for (int64_t i = 0; i < io.d; ++i) store(io.y, io.dtype, o + i, mul_rn(mul_rn(load(x_in, io.dtype, o + i), r), io.w[i]));
  }
}

void reference_rms_norm_backward(const RmsNormIO& io) {
  const float fd = static_cast<float>(io.d);
  const int64_t groups = (io.rows + kRmsGroupRows - 1) / kRmsGroupRows;
  for (int64_t t = 0; t < io.rows; ++t) {
    const int64_t o = t * io.d;
    const float r = io.r[t];
    const float dot = row_sum(io.d, kRmsLanes, [&](int64_t i, float a) {
      return fmaf(mul_rn(load(io.dy, io.dtype, o + i), io.w[i]), load(io.x, io.dtype, o + i), a);
    });
    const float k = mul_rn(dot, mul_rn(mul_rn(r, r), r)) / fd;
    for (int64_t i = 0; i < io.d; ++i) {
      const float g = mul_rn(load(io.dy, io.dtype, o + i), io.w[i]);
      float dx = fmaf(-k, load(io.x, io.dtype, o + i), mul_rn(g, r));
      if (io.dsum) dx = add_rn(round_to_dtype(io.dtype == DType::kBF16, dx), load(io.dsum, io.dtype, o + i));
      store(io.dx, io.dtype, o + i, dx);
    }
  }
  // Weight gradient: group sums over rows in order, then strands and the tree.
  for (int64_t j = 0; j < io.d; ++j) {
    std::vector<float> strand(kStrands, 0.0f);
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.0f;
      const int64_t t1 = std::min(io.rows, (g + 1) * kRmsGroupRows);
      for (int64_t t = g * kRmsGroupRows; t < t1; ++t)
        s = fmaf(load(io.dy, io.dtype, t * io.d + j), mul_rn(load(io.x, io.dtype, t * io.d + j), io.r[t]), s);
      strand[static_cast<size_t>(g % kStrands)] += s;
    }
    io.dw[j] = canon_nan(tree_sum(std::move(strand)));
  }
}

void reference_cross_entropy_forward(const CrossEntropyIO& io) {
  for (int64_t t = 0; t < io.rows; ++t) {
    const int64_t o = t * io.vocab;
    float m = -INFINITY;
    for (int64_t i = 0; i < io.vocab; ++i) m = max_nan(m, load(io.logits, io.dtype, o + i));
    const float s = row_sum(io.vocab, kCeThreads, [&](int64_t i, float a) { return a + exp_f32(load(io.logits, io.dtype, o + i) - m); });
    const float lse = m != m || s != s ? NAN : m + log_f32(s);
    io.lse[t] = lse;
    const int64_t y = io.targets[t];
    if (y == io.ignore_index) io.loss[t] = 0.0f;
    else io.loss[t] = y >= 0 && y < io.vocab ? canon_nan(lse - load(io.logits, io.dtype, o + y)) : NAN;
  }
}

void reference_cross_entropy_backward(const CrossEntropyIO& io) {
  const float scale = *io.scale;
  for (int64_t t = 0; t < io.rows; ++t) {
    const int64_t o = t * io.vocab, y = io.targets[t];
    const bool counted = y != io.ignore_index;
    for (int64_t i = 0; i < io.vocab; ++i) {
      const float p = exp_f32(load(io.logits, io.dtype, o + i) - io.lse[t]);
      store(io.dlogits, io.dtype, o + i, counted ? mul_rn(i == y ? p - 1.0f : p, scale) : 0.0f);
    }
  }
}

void reference_swiglu_forward(const SwiGluIO& io) {
  const int64_t h = io.hidden;
  for (int64_t t = 0; t < io.rows; ++t)
    for (int64_t j = 0; j < h; ++j)
      store(io.out, io.dtype, t * h + j, swiglu_forward(load(io.gu, io.dtype, t * 2 * h + j), load(io.gu, io.dtype, t * 2 * h + h + j)));
}

void reference_swiglu_backward(const SwiGluIO& io) {
  const int64_t h = io.hidden;
  for (int64_t t = 0; t < io.rows; ++t)
    for (int64_t j = 0; j < h; ++j) {
      float dg, du;
      swiglu_backward(load(io.gu, io.dtype, t * 2 * h + j), load(io.gu, io.dtype, t * 2 * h + h + j), load(io.dout, io.dtype, t * h + j), dg, du);
      store(io.dgu, io.dtype, t * 2 * h + j, dg);
      store(io.dgu, io.dtype, t * 2 * h + h + j, du);
    }
}

void reference_rope(const RopeIO& io) {
  const bool bf16 = io.dtype == DType::kBF16;
  const int64_t half = io.head_dim / 2;
  for (int64_t b = 0; b < io.batch; ++b)
    for (int64_t h = 0; h < io.heads; ++h)
      for (int64_t t = 0; t < io.seq; ++t) {
        const int64_t in = b * io.stride_b + h * io.stride_h + t * io.stride_s, out = b * io.y_stride_b + h * io.y_stride_h + t * io.y_stride_s;
        for (int64_t j = 0; j < half; ++j) {
          const float c = round_to_dtype(bf16, io.cos[t * half + j]), sn = round_to_dtype(bf16, io.sin[t * half + j]);
          float ya, yb;
          rope_pair(bf16, load(io.x, io.dtype, in + j), load(io.x, io.dtype, in + half + j), c, io.inverse ? -sn : sn, ya, yb);
          store(io.y, io.dtype, out + j, ya);
          store(io.y, io.dtype, out + half + j, yb);
        }
      }
}

void reference_qkv_rope(const QkvRopeIO& io) {
  for (int part = 0; part < 2; ++part) {
    RopeIO r;
    r.dtype = io.dtype;
    r.batch = io.batch;
    r.heads = io.heads_of(part);
    r.seq = io.seq;
    r.head_dim = io.head_dim;
    r.x = io.in[part].p;
    r.stride_b = io.in[part].stride_b;
    r.stride_h = io.in[part].stride_h;
    r.stride_s = io.in[part].stride_s;
    r.cos = io.cos;
    r.sin = io.sin;
    r.inverse = io.inverse;
    r.y = io.out[part].p;
    r.y_stride_b = io.out[part].stride_b;
    r.y_stride_h = io.out[part].stride_h;
    r.y_stride_s = io.out[part].stride_s;
    reference_rope(r);
  }
  const HeadsView &in = io.in[2], &out = io.out[2];
  const size_t bytes = io.dtype == DType::kBF16 ? 2 : 4;
  for (int64_t b = 0; b < io.batch; ++b)
    for (int64_t h = 0; h < io.kv_heads; ++h)
      for (int64_t t = 0; t < io.seq; ++t)
        std::memcpy(static_cast<char*>(out.p) + (b * out.stride_b + h * out.stride_h + t * out.stride_s) * bytes,
                    static_cast<const char*>(in.p) + (b * in.stride_b + h * in.stride_h + t * in.stride_s) * bytes, io.head_dim * bytes);
}

namespace {

// Element i of expert row a as a slot of its token reads it: zeros past the capacity.
float moe_row(const MoeCombineIO& io, int64_t a, int64_t i) {
  return io.kept && !io.kept[a] ? 0.0f : load(io.y, DType::kBF16, a * io.d + i);
}

}  // namespace

void reference_moe_combine_forward(const MoeCombineIO& io) {
  const int64_t k = io.top_k, d = io.d;
  for (int64_t t = 0; t < io.tokens; ++t)
    for (int64_t i = 0; i < d; ++i) {
      float acc = 0.0f;
      for (int64_t j = 0; j < k; ++j) {
        const float p = round_to_bf16(mul_rn(moe_row(io, io.inverse[t * k + j], i), load(io.w, DType::kBF16, t * k + j)));
        acc = j == 0 ? p : round_to_bf16(add_rn(acc, p));
      }
      store(io.out, DType::kBF16, t * d + i, acc);
    }
}

void reference_moe_combine_backward(const MoeCombineIO& io) {
  const int64_t k = io.top_k, d = io.d, A = io.tokens * k;
  for (int64_t a = 0; a < A; ++a) {
    const int64_t s = io.order[a], t = s / k;
    const float w = load(io.w, DType::kBF16, s);
    const bool kept = !io.kept || io.kept[a];
    for (int64_t i = 0; i < d; ++i) store(io.dy, DType::kBF16, a * d + i, kept ? moe_slot_grad(load(io.dout, DType::kBF16, t * d + i), w, k) : 0.0f);
  }
  for (int64_t s = 0; s < A; ++s) {
    const int64_t t = s / k, a = io.inverse[s];
    const float sum = row_sum(d, kRmsLanes, [&](int64_t i, float acc) {
      return add_rn(acc, round_to_bf16(mul_rn(load(io.dout, DType::kBF16, t * d + i), moe_row(io, a, i))));
    });
    store(io.dw, DType::kBF16, s, k > 1 ? add_rn(round_to_bf16(sum), 0.0f) : sum);
  }
}

void reference_moe_dispatch_backward(const MoeDispatchBackwardIO& io) {
  const int64_t k = io.top_k, d = io.d;
  for (int64_t t = 0; t < io.tokens; ++t)
    for (int64_t i = 0; i < d; ++i) {
      float acc = load(io.g, DType::kBF16, io.inverse[t * k] * d + i);
      for (int64_t j = 1; j < k; ++j) acc = round_to_bf16(add_rn(acc, load(io.g, DType::kBF16, io.inverse[t * k + j] * d + i)));
      store(io.dx, DType::kBF16, t * d + i, acc);
    }
}

}  // namespace ufp4
