// The HDF5 side of operand capture (models/quant_linear.h, OperandCapture): one file a step.
#pragma once
#include <cstdint>
#include <string>

#include "models/quant_linear.h"

namespace ufp4 {

// Writes <dir>/capture_step<step>.h5 (datasets "<layer>/<gemm>.<operand>/before|after"; "after" only
// where the recipe changed the operand; attributes step, layout and provenance) and returns its path;
// "" when there is nothing to write.
std::string write_capture(const std::string& dir, int64_t step, const OperandCapture::Operands& operands);

}  // namespace ufp4
