// The device a run trains on: the manifest's train.device or the command's --device, its name as
// results record it, its BF16 peak (for MFU) and the peak memory a run took on it.
#pragma once
#include <torch/torch.h>

#include <string>

namespace ufp4 {

// `option` (the command's --device) when set, else `manifest_device` (train.device of `manifest_path`);
// `name` gets the CUDA device's name, or "cpu". Throws ufp4::Error naming the key that asked.
torch::Device choose_device(const std::string& manifest_device, const std::string& option, const std::string& manifest_path, std::string& name);
// Dense BF16 tensor-core peak FLOP/s of a device (device_peaks.h; 0 when unknown or CPU).
double peak_flops(const torch::Device& d);
// Peak memory the caching allocator handed out, GB (0 on CPU).
double peak_memory_gb(const torch::Device& d);
// A data-parallel rank's GPU: LOCAL_RANK modulo the GPUs it sees (two ranks may share one over Gloo).
// Call before anything touches CUDA. Does nothing without CUDA.
void use_local_gpu(int local_rank);

}  // namespace ufp4
