#include "harness/train/train_device.h"

#include "harness/plan/device_peaks.h"
#include "models/quant_ops.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace ufp4 {

torch::Device choose_device(const std::string& manifest_device, const std::string& option, const std::string& manifest_path, std::string& name) {
  const torch::Device device = option.empty() ? pick_device(manifest_device, manifest_path + ": train.device") : pick_device(option);
  name = "cpu";
#ifdef UFP4_WITH_CUDA
  if (device.is_cuda()) name = at::cuda::getCurrentDeviceProperties()->name;
#endif
  return device;
}

double peak_flops(const torch::Device& d) {
#ifdef UFP4_WITH_CUDA
  if (d.is_cuda()) return peak_flops(at::cuda::getDeviceProperties(d.index() < 0 ? 0 : d.index())->name);
#endif
  return 0.0;
}

double peak_memory_gb(const torch::Device& d) {
#ifdef UFP4_WITH_CUDA
  if (d.is_cuda()) {
    auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index() < 0 ? c10::cuda::current_device() : d.index());
    return static_cast<double>(st.allocated_bytes[0].peak) / 1e9;
  }
#endif
  return 0.0;
}

void use_local_gpu(int local_rank) {
#ifdef UFP4_WITH_CUDA
  if (torch::cuda::is_available()) c10::cuda::set_device(static_cast<c10::DeviceIndex>(local_rank % static_cast<int>(torch::cuda::device_count())));
#else
  (void)local_rank;
#endif
}

}  // namespace ufp4
