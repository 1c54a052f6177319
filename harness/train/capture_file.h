// The HDF5 side of operand capture (models/quant_linear.h, OperandCapture): one file a step.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "harness/train/stream_probe.h"
#include "models/quant_linear.h"

namespace ufp4 {

// A caller that analyses the captured steps as the run trains, instead of having them written out (a
// step of a deep model at tens of thousands of tokens is gigabytes): OperandCapture::stream_to.
struct CaptureSink {
  // Each operand the recipe changed, as it is made: `before` (rotated where the recipe rotates) and `after`.
  std::function<void(int64_t step, const std::string& key, const torch::Tensor& before, const torch::Tensor& after)> operand;
  // At the step's end, before `step`: the step's last micro-batch through the updated weights, quantized
  // as the recipe trains against unquantized (harness/train/stream_probe.h). Optional; one process only.
  std::function<void(int64_t step, const StreamComparison& chain)> stream;
  // At the step's end: the unrotated FPROP x, FPROP w and DGRAD dy of every captured layer, on the device.
  std::function<void(int64_t step, std::map<std::string, torch::Tensor> unrotated)> step;
  explicit operator bool() const { return static_cast<bool>(step); }
};

// Writes <dir>/capture_step<step>.h5 (datasets "<layer>/<gemm>.<operand>/before|after|raw"; "after" only
// where the recipe changed the operand, "raw" only where it rotated it; attributes step, layout and
// provenance) and returns its path; "" when there is nothing to write.
std::string write_capture(const std::string& dir, int64_t step, const OperandCapture::Operands& operands,
                          const std::map<std::string, torch::Tensor>& raw = {});

}  // namespace ufp4
