#include "kernels/moe/expert_sort.h"

#include <string>
#include <vector>

#include "common/error.h"

namespace ufp4 {

void reference_expert_sort(const ExpertSortIO& io) {
  std::vector<int64_t> next(static_cast<size_t>(io.experts), 0);
  for (int64_t a = 0; a < io.assignments; ++a) {
    const int64_t e = io.keys[a];
    if (e < 0 || e >= io.experts)
      throw RuntimeError("expert sort: assignment " + std::to_string(a) + " names expert " + std::to_string(e) + ", outside 0.." +
                         std::to_string(io.experts - 1));
    ++next[static_cast<size_t>(e)];
  }
  // next[e] becomes expert e's first row; the assignments then take its rows in increasing a (stable).
  int64_t row = 0;
  for (int64_t e = 0; e < io.experts; ++e) {
    io.assigned[e] = next[static_cast<size_t>(e)];
    next[static_cast<size_t>(e)] = row;
    row += io.assigned[e];
    io.ends[e] = static_cast<int32_t>(row);
  }
  for (int64_t a = 0; a < io.assignments; ++a) {
    const int64_t r = next[static_cast<size_t>(io.keys[a])]++;
    io.order[r] = a;
    io.inverse[a] = r;
    io.token_of_row[r] = a / io.k;
  }
}

}  // namespace ufp4
