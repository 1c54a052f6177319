// The router's choice of experts: for each row of probs [rows, experts] (FP32), the k largest values and
// their columns, ordered by value, larger first, and among equal values by column, smaller first. NaN
// counts as larger than every number and -0 as smaller than +0, as LibTorch's topk orders them (its radix
// keys), so the selection is topk's, ties included: topk keeps, of the values equal to the k-th largest,
// those of the smallest columns. One thread a row in the CUDA kernel (router_top_k_cuda.cu), where topk
// took a radix selection and, sorted, a bitonic sort a row; the CPU reference
// (router_top_k_reference.cpp) runs the same comparisons, so the two agree bit for bit. Among equal values
// topk's order is its unstable sort's, which this does not follow: the model uses the kernel for k <= 2
// only, where that order changes no bit (models/router_top_k.h). With by_expert the k kept leave in
// ascending column order instead: the slot order routing wants (models/moe_routing.h), formed here
// instead of by a sort and a gather a layer.
//
// The backward (router_top_k_backward_row) writes the probabilities' gradient: each kept value's
// gradient at its column, +0 elsewhere; a copy, so any order of the k gives the same bits. Raw pointers,
// no LibTorch types.
#pragma once
#include <cstdint>

#include "kernels/numerics/float_bits.h"
#include "kernels/numerics/hd.h"

typedef struct CUstream_st* cudaStream_t;

namespace ufp4 {

constexpr int64_t kRouterTopKMaxK = 8;

struct RouterTopKIO {
  int64_t rows = 0, experts = 0, k = 0;  // 1 <= k <= min(experts, kRouterTopKMaxK)
  const float* probs = nullptr;          // [rows, experts]
  float* values = nullptr;               // [rows, k]
  int64_t* ids = nullptr;                // [rows, k]
  bool by_expert = false;                // the k of a row in ascending column order, not by value
};

struct RouterTopKBackwardIO {
  int64_t rows = 0, experts = 0, k = 0;
  const float* grad = nullptr;   // [rows, k]: the gradient of the kept values
  const int64_t* ids = nullptr;  // [rows, k]: their columns, distinct in a row, each in [0, experts)
  float* dprobs = nullptr;       // [rows, experts]
};

// The order key of a value: larger key, larger value (LibTorch's radix key for FP32, NaN the largest).
UFP4_HD uint32_t router_key(float v) {
  const uint32_t x = f32_bits(v);
  return is_nan(v) ? 0xffffffffu : x ^ ((x & 0x80000000u) ? 0xffffffffu : 0x80000000u);
}

// The n kept of a row in ascending column order (insertion: n is at most kRouterTopKMaxK).
UFP4_HD void order_by_column(int64_t n, float* values, int64_t* ids) {
  for (int64_t i = 1; i < n; ++i) {
    const float v = values[i];
    const int64_t id = ids[i];
    int64_t at = i;
    for (; at > 0 && ids[at - 1] > id; --at) {
      values[at] = values[at - 1];
      ids[at] = ids[at - 1];
    }
    values[at] = v;
    ids[at] = id;
  }
}

// One row: scan the columns in order, insert each value behind every kept value of a key at least its
// own; with by_expert, then order the kept by column.
UFP4_HD void router_top_k_row(const float* p, int64_t experts, int64_t k, bool by_expert, float* values, int64_t* ids) {
  uint32_t key[kRouterTopKMaxK] = {};
  int64_t n = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const uint32_t ke = router_key(p[e]);
    if (n == k && ke <= key[k - 1]) continue;
    int64_t at = n < k ? n++ : k - 1;
    for (; at > 0 && key[at - 1] < ke; --at) {
      key[at] = key[at - 1];
      values[at] = values[at - 1];
      ids[at] = ids[at - 1];
    }
    key[at] = ke;
    values[at] = p[e];
    ids[at] = e;
  }
  if (by_expert) order_by_column(k, values, ids);
}

// One row of the backward: zeros, then each kept value's gradient at its column.
UFP4_HD void router_top_k_backward_row(const float* grad, const int64_t* ids, int64_t experts, int64_t k, float* dprobs) {
  for (int64_t e = 0; e < experts; ++e) dprobs[e] = 0.0f;
  for (int64_t j = 0; j < k; ++j) dprobs[ids[j]] = grad[j];
}

void reference_router_top_k(const RouterTopKIO& io);
void reference_router_top_k_backward(const RouterTopKBackwardIO& io);
// On `stream` (the caller's); device pointers.
void cuda_router_top_k(const RouterTopKIO& io, cudaStream_t stream);
void cuda_router_top_k_backward(const RouterTopKBackwardIO& io, cudaStream_t stream);

}  // namespace ufp4
