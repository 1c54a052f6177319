// Timing of training steps for the benchmarks: timed passes after warm-up (CUDA events on the
// current stream on a GPU, the host clock on CPU), their median / mean / sd, and the caching
// allocator's peak reset before a measurement.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <vector>

namespace ufp4 {

struct TimeStats {
  double median = 0, mean = 0, sd = 0;
};
TimeStats time_stats(std::vector<double> ms);

// Runs pass(0 .. warmup + steps - 1) and returns the milliseconds of the timed ones (after the warm-up).
std::vector<double> time_passes(const torch::Device& device, int warmup, int steps, const std::function<void(int)>& pass);

// Frees the allocator's cached blocks and restarts its peak, so that peak_memory_gb() measures what follows.
void reset_peak_memory(const torch::Device& device);

}  // namespace ufp4
