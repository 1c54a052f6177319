#include "kernels/moe/inverse_permutation.h"

#include <string>

#include "common/error.h"

namespace ufp4 {

void reference_inverse_permutation(const InversePermutationIO& io) {
  for (int64_t r = 0; r < io.rows; ++r)
    for (int64_t j = 0; j < io.width; ++j) {
      const int64_t p = io.perm[r * io.width + j];
      if (p < 0 || p >= io.width)
        throw RuntimeError("inverse permutation: row " + std::to_string(r) + " holds " + std::to_string(p) + ", outside 0.." + std::to_string(io.width - 1));
      io.inv[r * io.width + p] = j;
    }
}

}  // namespace ufp4
