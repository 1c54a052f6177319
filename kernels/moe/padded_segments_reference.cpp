#include "kernels/moe/padded_segments.h"

#include <cstddef>
#include <string>
#include <vector>

#include "common/error.h"

namespace ufp4 {

void reference_padded_segments(const PaddedSegmentsIO& io) {
  const int64_t E = io.experts;
  std::vector<int64_t> pend(static_cast<size_t>(E)), valid_end(static_cast<size_t>(E)), shift(static_cast<size_t>(E));
  int64_t start = 0, pstart = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t count = io.ends[e] - start, padded = (count + io.align - 1) / io.align * io.align;
    pend[e] = pstart + padded;
    valid_end[e] = pstart + count;
    shift[e] = start - pstart;
    io.padded_ends[e] = static_cast<int32_t>(pend[e]);
    io.lens[e] = static_cast<int32_t>(io.rht ? (count + io.rht - 1) / io.rht * io.rht : count);
    start = io.ends[e];
    pstart = pend[e];
  }
  int64_t e = 0;
  for (int64_t p = 0; p < io.rows; ++p) {
    while (e < E - 1 && pend[e] <= p) ++e;  // the first segment whose padded end lies past p, else the last
    io.src[p] = p < valid_end[e] ? p + shift[e] : -1;
  }
}

void reference_padded_read_rows(const PaddedReadRowsIO& io) {
  for (int64_t p = 0; p < io.rows; ++p) {
    const int64_t s = io.src[p];
    if (s < -1 || s >= io.gathered)
      throw Error("padded read rows: src[" + std::to_string(p) + "] = " + std::to_string(s) + ", outside -1.." + std::to_string(io.gathered - 1));
    io.read[p] = s < 0 ? -1 : io.gather[s];
  }
}

}  // namespace ufp4
