#include "kernels/quantize/quant_spec.h"

#include <cmath>
#include <sstream>

#include "common/error.h"
#include "kernels/numerics/philox.h"

namespace ufp4 {

std::string to_string(ScaleKind k) {
  switch (k) {
    case ScaleKind::kFp32: return "fp32";
    case ScaleKind::kNvfp4: return "nvfp4";
    case ScaleKind::kMx: return "mx";
    case ScaleKind::kUnit: return "unit";
  }
  return "?";
}
std::string to_string(Rounding r) { return r == Rounding::kRtne ? "rtne" : "sr"; }

ScaleKind parse_scale_kind(const std::string& s) {
  if (s == "fp32") return ScaleKind::kFp32;
  if (s == "nvfp4") return ScaleKind::kNvfp4;
  if (s == "mx") return ScaleKind::kMx;
  if (s == "unit") return ScaleKind::kUnit;
  throw Error("scale: unknown kind '" + s + "' (allowed: fp32, nvfp4, mx, unit)");
}
Rounding parse_rounding(const std::string& s) {
  if (s == "rtne") return Rounding::kRtne;
  if (s == "sr") return Rounding::kSr;
  throw Error("rounding: unknown mode '" + s + "' (allowed: rtne, sr)");
}

void QuantSpec::validate() const {
  if (block != 16 && block != 32 && block != 64 && block != 128)
    throw Error("block: " + std::to_string(block) + " is not allowed (allowed: 16, 32, 64, 128)");
  if (rht != 0 && rht != 16 && rht != 32 && rht != 64 && rht != 128)
    throw Error("rht: " + std::to_string(rht) + " is not allowed (allowed: 0 (off), 16, 32, 64, 128)");
  if (block_2d && block != 16) throw Error("block_2d: 16x16 tiles need block = 16 (got " + std::to_string(block) + ")");
  if (block_2d && rht != 0) throw Error("block_2d: 2D weight tiles cannot be combined with rht (set rht = 0)");
}

std::string QuantSpec::describe() const {
  std::ostringstream os;
  os << grid.name() << " 1x" << block << (block_2d ? " (16x16 2D)" : "") << " scale=" << to_string(scale)
     << " rounding=" << to_string(rounding) << " rht=" << (rht ? std::to_string(rht) : "off");
  return os.str();
}

void rht_sign_bits(uint64_t rht_seed, uint32_t out[4]) {
  U32x4 r = philox4x32_10(0, 0, 0, 0, static_cast<uint32_t>(rht_seed), static_cast<uint32_t>(rht_seed >> 32));
  for (int i = 0; i < 4; ++i) out[i] = r.v[i];
}

KernelSpec make_kernel_spec(const QuantSpec& spec) {
  spec.validate();
  KernelSpec k{};
  k.grid = spec.grid.params();
  k.block = spec.block;
  k.scale_kind = static_cast<int>(spec.scale);
  k.rounding = static_cast<int>(spec.rounding);
  k.block_2d = spec.block_2d ? 1 : 0;
  k.rht = spec.rht;
  rht_sign_bits(spec.rht_seed, k.rht_signs);
  k.rht_scale = spec.rht ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(spec.rht))) : 1.0f;
  k.seed = spec.seed;
  k.offset = spec.offset;
  k.offset_add = spec.offset_add;
  k.fast = classify_grid(k.grid);
  return k;
}

}  // namespace ufp4
