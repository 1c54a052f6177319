// The kernels' rounding: decision thresholds instead of a level search. Host-compiled too, so the
// CPU tests check it exhaustively against the reference's distance-based search.
#pragma once
#include "kernels/grid.h"
#include "kernels/hd.h"

namespace ufp4 {

// RTNE: the number of thresholds below a (a tie counts when up_at_mid says so). NaN gives 0.
UFP4_HD int round_nearest(const GridParams& g, float a) {
  int idx = 0;
#pragma unroll
  for (int k = 0; k < 15; ++k)
    if (k < g.n - 1) idx += (a > g.mid[k]) || (a == g.mid[k] && ((g.up_at_mid >> k) & 1u));
  return idx;
}

// SR between neighbours level[lo] <= a < level[lo+1]: up with probability (a - lo) / (hi - lo),
// u uniform in [0, 1). `level` may point to a faster copy of g.level (shared memory).
UFP4_HD int round_stochastic(const GridParams& g, const float* level, float a, float u) {
  int cnt = 0;
#pragma unroll
  for (int k = 0; k < 16; ++k)
    if (k < g.n) cnt += a >= g.level[k];
  const int lo = cnt - 1;
  if (lo >= g.n - 1) return g.n - 1;  // saturate
  if (lo < 0) return 0;               // below the grid, or NaN
  const float p = (a - level[lo]) / (level[lo + 1] - level[lo]);
  return u < p ? lo + 1 : lo;
}

}  // namespace ufp4
