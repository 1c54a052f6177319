#include "kernels/moe/router_top_k.h"

namespace ufp4 {

void reference_router_top_k(const RouterTopKIO& io) {
  for (int64_t r = 0; r < io.rows; ++r)
    router_top_k_row(io.probs + r * io.experts, io.experts, io.k, io.by_expert, io.values + r * io.k, io.ids + r * io.k);
}

void reference_router_top_k_backward(const RouterTopKBackwardIO& io) {
  for (int64_t r = 0; r < io.rows; ++r) router_top_k_backward_row(io.grad + r * io.k, io.ids + r * io.k, io.experts, io.k, io.dprobs + r * io.experts);
}

}  // namespace ufp4
