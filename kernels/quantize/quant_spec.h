// What one operand quantization does: grid, block, scale kind, rounding, RHT, and the
// stochastic-rounding key. QuantSpec is the user-facing description; KernelSpec is the
// plain-data form both the CPU reference and the CUDA kernels consume.
#pragma once
#include <cstdint>
#include <string>

#include "kernels/quantize/grid.h"
#include "kernels/numerics/hd.h"
#include "kernels/numerics/rounding.h"

namespace ufp4 {

enum class ScaleKind { kFp32 = 0, kNvfp4 = 1, kMx = 2, kUnit = 3 };  // unit: scale fixed to 1 (format checks)
enum class Rounding { kRtne = 0, kSr = 1 };
enum class DType { kF32 = 0, kBF16 = 1 };

std::string to_string(ScaleKind k);
std::string to_string(Rounding r);
ScaleKind parse_scale_kind(const std::string& s);  // fp32 | nvfp4 | mx | unit
Rounding parse_rounding(const std::string& s);     // rtne | sr

struct QuantSpec {
  Grid grid = Grid::from_name("e2m1");
  int block = 16;                // 16, 32, 64, 128 (1xB blocks along the quantized dimension)
  ScaleKind scale = ScaleKind::kFp32;
  Rounding rounding = Rounding::kRtne;
  bool block_2d = false;         // 16x16 tiles (weights); excludes RHT
  int rht = 0;                   // 0 = off, else Hadamard size 16, 32, 64 or 128
  uint64_t rht_seed = 0;
  uint64_t seed = 0;             // stochastic-rounding key
  uint64_t offset = 0;
  // GPU only: device memory whose value the kernels add to offset when they run. A CUDA graph replays
  // its launches with the arguments of the capture, so the training step's number lives there.
  const uint64_t* offset_add = nullptr;

  // Throws ufp4::Error with the field name and allowed values.
  void validate() const;
  std::string describe() const;
};

struct KernelSpec {
  GridParams grid;
  int block;
  int scale_kind;
  int rounding;
  int block_2d;
  int rht;                // 0 or size
  uint32_t rht_signs[4];  // bit i set: sign of position i is -1
  float rht_scale;        // FP32(1/sqrt(rht))
  uint64_t seed;
  uint64_t offset;
  const uint64_t* offset_add;  // device memory added to offset (QuantSpec::offset_add), or null
  FastGrid fast;          // arithmetic rounding path for the grid (kernels only)
};

KernelSpec make_kernel_spec(const QuantSpec& spec);

// The stochastic-rounding stream's offset as the kernels use it: offset plus the value at offset_add.
// Host code (the references) sees offset alone; the CPU entry points reject a spec with offset_add.
UFP4_HD uint64_t sr_offset(uint64_t offset, const uint64_t* offset_add) {
#if defined(__CUDA_ARCH__)
  return offset_add ? offset + *offset_add : offset;
#else
  (void)offset_add;
  return offset;
#endif
}
UFP4_HD uint64_t sr_offset(const KernelSpec& s) { return sr_offset(s.offset, s.offset_add); }

// Random sign vector of the RHT: 128 bits from Philox keyed by the RHT seed.
void rht_sign_bits(uint64_t rht_seed, uint32_t out[4]);

}  // namespace ufp4
