#include "harness/io/run_compare.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

namespace ufp4 {

int compare_runs_exact(const std::string& name, const RunResults& f, const RunResults& ref) {
  int failures = 0;
  const auto ours = named_curves(f), theirs = named_curves(ref);
  for (size_t c = 0; c < theirs.size(); ++c) {
    const char* ds = theirs[c].name.c_str();
    const std::vector<double>&a = ours[c].values, &b = theirs[c].values;
    if (b.empty()) continue;  // not in the reference
    if (a.empty()) {
      std::printf("FAIL %s: %s is missing (the reference has %zu values)\n", name.c_str(), ds, b.size());
      ++failures;
      continue;
    }
    size_t bad = a.size() == b.size() ? a.size() : 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()) && bad == a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0) bad = i;
    if (a.size() != b.size()) {
      std::printf("FAIL %s: %s has %zu values, the reference %zu\n", name.c_str(), ds, a.size(), b.size());
      ++failures;
    } else if (bad != a.size()) {
      std::printf("FAIL %s: %s differs first at index %zu: %.17g vs reference %.17g (bit-exact required on %s)\n", name.c_str(), ds, bad,
                  a[bad], b[bad], ref.device_name.c_str());
      ++failures;
    } else {
      std::printf("ok   %s: %s, %zu values bit-identical\n", name.c_str(), ds, a.size());
    }
  }
  if (!ref.weights_sha256.empty()) {
    if (f.weights_sha256 != ref.weights_sha256) {
      std::printf("FAIL %s: final weights differ (SHA-256 %s vs reference %s)\n", name.c_str(), f.weights_sha256.substr(0, 16).c_str(),
                  ref.weights_sha256.substr(0, 16).c_str());
      ++failures;
    } else {
      std::printf("ok   %s: final weights bit-identical (SHA-256 %s)\n", name.c_str(), ref.weights_sha256.substr(0, 16).c_str());
    }
  }
  return failures;
}


}  // namespace ufp4
