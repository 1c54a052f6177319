// CPU reference of causal grouped-query attention, forward and backward, in double (see
// attention_backward.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention/attention_backward.h"

namespace ufp4 {

namespace {

constexpr int64_t D = kAttnHeadDim;

struct Index {
  int64_t heads, kv_heads, seq;
  int64_t q(int64_t b, int64_t h, int64_t s) const { return ((b * heads + h) * seq + s) * D; }
  int64_t kv(int64_t b, int64_t h, int64_t s) const { return ((b * kv_heads + h / (heads / kv_heads)) * seq + s) * D; }
  int64_t row(int64_t b, int64_t h, int64_t s) const { return (b * heads + h) * seq + s; }
};

double dot(const float* a, const float* b) {
  double s = 0.0;
  for (int64_t d = 0; d < D; ++d) s += static_cast<double>(a[d]) * b[d];
  return s;
}

}  // namespace

void reference_attention_forward(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, float scale, const float* q, const float* k,
                                 const float* v, float* o, float* lse) {
  const Index ix{heads, kv_heads, seq};
  std::vector<double> p(static_cast<size_t>(seq)), acc(D);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        double m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) m = std::max(m, p[j] = scale * dot(q + ix.q(b, h, i), k + ix.kv(b, h, j)));
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += p[j] = std::exp(p[j] - m);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t d = 0; d < D; ++d) acc[d] += p[j] * v[ix.kv(b, h, j) + d];
        for (int64_t d = 0; d < D; ++d) o[ix.q(b, h, i) + d] = static_cast<float>(acc[d] / sum);
        lse[ix.row(b, h, i)] = static_cast<float>(m + std::log(sum));
      }
}

void reference_attention_backward(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seq, float scale, const float* q, const float* k,
                                  const float* v, const float* o, const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  const Index ix{heads, kv_heads, seq};
  const int64_t kv_size = batch * kv_heads * seq * D;
  std::vector<double> dk_acc(static_cast<size_t>(kv_size), 0.0), dv_acc(static_cast<size_t>(kv_size), 0.0), dq_acc(D);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        const float* qi = q + ix.q(b, h, i);
        const float* doi = dout + ix.q(b, h, i);
        const double delta = dot(doi, o + ix.q(b, h, i));
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t kj = ix.kv(b, h, j);
          const double p = std::exp(scale * dot(qi, k + kj) - lse[ix.row(b, h, i)]);
          const double ds = p * (dot(doi, v + kj) - delta);
          for (int64_t d = 0; d < D; ++d) {
            dv_acc[static_cast<size_t>(kj + d)] += p * doi[d];
            dk_acc[static_cast<size_t>(kj + d)] += scale * ds * qi[d];
            dq_acc[static_cast<size_t>(d)] += scale * ds * k[kj + d];
          }
        }
        for (int64_t d = 0; d < D; ++d) dq[ix.q(b, h, i) + d] = static_cast<float>(dq_acc[static_cast<size_t>(d)]);
      }
  for (int64_t n = 0; n < kv_size; ++n) {
    dk[n] = static_cast<float>(dk_acc[static_cast<size_t>(n)]);
    dv[n] = static_cast<float>(dv_acc[static_cast<size_t>(n)]);
  }
}

}  // namespace ufp4
