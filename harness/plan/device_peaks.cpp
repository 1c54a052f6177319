#include "harness/plan/device_peaks.h"

namespace ufp4 {

const std::vector<DevicePeak>& device_peaks() {
  // NVIDIA datasheets: H100 SXM / H200 / GH200 1,979 TFLOP/s BF16 with sparsity, H100 NVL / H200 NVL
  // 1,671, H100 PCIe 1,513, B200 4,500; A100 312 dense.
  static const std::vector<DevicePeak> t = {
      {"GH200", 989.5e12},  {"H200 NVL", 835.5e12}, {"H200", 989.5e12}, {"H100 NVL", 835.5e12},
      {"H100 PCIe", 756.5e12}, {"H100", 989.5e12}, {"A100", 312e12},      {"B200", 2250e12},
  };
  return t;
}

double peak_flops(const std::string& device_name) {
  for (const DevicePeak& p : device_peaks())
    if (device_name.find(p.match) != std::string::npos) return p.bf16_flops;
  return 0.0;
}

}  // namespace ufp4
