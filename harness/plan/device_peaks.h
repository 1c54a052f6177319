// Dense BF16 tensor-core peaks of the GPUs we know, for MFU. A device not in the table has no peak
// (0): MFU prints as n/a rather than against another chip's peak.
#pragma once
#include <string>
#include <vector>

namespace ufp4 {

struct DevicePeak {
  const char* match;    // substring of the CUDA device name (more specific entries come first)
  double bf16_flops;    // dense BF16 tensor-core FLOP/s, vendor datasheet (half the sparse figure)
};

const std::vector<DevicePeak>& device_peaks();

// The peak of the first entry whose match the name contains; 0 when none does.
double peak_flops(const std::string& device_name);

}  // namespace ufp4
