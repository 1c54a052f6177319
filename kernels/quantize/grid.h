// 4-bit element grids: E2M1 (with the max_fpx cap), E1M2, INT4 symmetric and two's complement,
// and user-defined grids. A grid knows its levels, its bins (l_i, r_i) and its codes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ufp4 {

// Plain data handed to kernels: everything needed to round and decode, no STL.
struct GridParams {
  int symmetric;         // 1: sign-magnitude (round |v|, sign bit 3); 0: signed value list
  int n;                 // number of levels (magnitudes or signed values), 2..16
  float level[16];       // ascending
  float mid[15];         // FP32 decision points between level i and i+1
  uint32_t up_at_mid;    // bit i: a value equal to mid[i] rounds up (tie to even code, or nearer level)
  uint8_t code[16];      // 4-bit code of each level (magnitude index, or two's complement value)
  float gmax;            // block amax is mapped onto this magnitude
};

struct Bin {
  float level, left, right, bias;  // half-widths l_i, r_i and Eq. 2 bias (l_i - r_i) / 2
};

class Grid {
 public:
  // Names: e2m1, e1m2, int4 (symmetric, codes -7..7), int4_tc (two's complement, -8..7).
  // max_fpx caps E2M1 (2, 3, 4 or 6). Throws ufp4::Error naming the allowed values.
  static Grid from_name(const std::string& name, double max_fpx = 0);
  // A sign-magnitude grid from sorted non-negative magnitudes starting at 0 (at most 8).
  static Grid custom(const std::string& name, const std::vector<double>& magnitudes);
  static std::vector<std::string> builtin_names();
  // The built-in names as an error or help text lists them ("e2m1, e1m2, int4, int4_tc"); sign_magnitude:
  // only the sign-magnitude ones (what the bias analyses take).
  static std::string builtin_list(bool sign_magnitude = false);
  // A name as above, or a comma-separated list of magnitudes ("0,0.5,1,1.5,2,3,4,6").
  static Grid parse(const std::string& text, double max_fpx = 0);

  const std::string& name() const { return name_; }
  // How recipes and reports name it: "E2M1 (max 6)", "E1M2 (uniform)", ...; a custom grid's name.
  std::string label() const;
  bool symmetric() const { return params_.symmetric != 0; }
  float gmax() const { return params_.gmax; }
  const GridParams& params() const { return params_; }
  // Every representable value, ascending (both signs for symmetric grids, without -0).
  std::vector<float> values() const;
  // Magnitude levels (symmetric) or signed levels (asymmetric).
  std::vector<float> levels() const;
  // Interior bins with Eq. 2 bias; the end levels have only one neighbour and are omitted.
  std::vector<Bin> bins() const;
  // Decoded value of a 4-bit code; NaN for codes the grid does not use.
  float decode(uint8_t code) const;
  std::string describe() const;

 private:
  Grid(std::string name, GridParams p) : name_(std::move(name)), params_(p) {}
  static GridParams build(const std::vector<double>& levels, bool symmetric, double gmax,
                          const std::vector<uint8_t>& codes);
  std::string name_;
  GridParams params_;
};

}  // namespace ufp4
