#include "kernels/quantize/grid.h"

#include <algorithm>

#include <cmath>
#include <sstream>

#include "common/error.h"

namespace ufp4 {

GridParams Grid::build(const std::vector<double>& levels, bool symmetric, double gmax,
                       const std::vector<uint8_t>& codes) {
  GridParams p{};
  p.symmetric = symmetric ? 1 : 0;
  p.n = static_cast<int>(levels.size());
  p.gmax = static_cast<float>(gmax);
  for (int i = 0; i < p.n; ++i) {
    p.level[i] = static_cast<float>(levels[i]);
    p.code[i] = codes[i];
  }
  for (int i = 0; i + 1 < p.n; ++i) {
    double a = p.level[i], b = p.level[i + 1];
    double exact = 0.5 * (a + b);  // exact in double for FP32 operands
    float m = static_cast<float>(exact);
    p.mid[i] = m;
    bool up;
    if (static_cast<double>(m) == exact) up = (p.code[i + 1] & 1) == 0;  // a true tie: even code
    else up = static_cast<double>(m) > exact;  // m lies nearer the upper level
    if (up) p.up_at_mid |= (1u << i);
  }
  return p;
}

Grid Grid::custom(const std::string& name, const std::vector<double>& mags) {
  if (mags.size() < 2 || mags.size() > 8)
    throw Error("grid '" + name + "': a 4-bit sign-magnitude grid needs 2 to 8 magnitudes (got " +
                std::to_string(mags.size()) + ")");
  if (mags[0] != 0.0) throw Error("grid '" + name + "': the first magnitude must be 0");
  for (size_t i = 1; i < mags.size(); ++i) {
    if (!(mags[i] > mags[i - 1]) || !std::isfinite(mags[i]))
      throw Error("grid '" + name + "': magnitudes must be finite and strictly increasing");
  }
  std::vector<uint8_t> codes;
  for (size_t i = 0; i < mags.size(); ++i) codes.push_back(static_cast<uint8_t>(i));
  return Grid(name, build(mags, true, mags.back(), codes));
}

Grid Grid::parse(const std::string& text, double max_fpx) {
  if (text.find(',') == std::string::npos) return from_name(text, max_fpx);
  std::vector<double> mags;
  std::stringstream ss(text);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    try {
      size_t used = 0;
      mags.push_back(std::stod(tok, &used));
      if (tok.find_first_not_of(" \t", used) != std::string::npos) throw std::invalid_argument(tok);
    } catch (const std::exception&) {
      throw Error("grid: '" + tok + "' is not a number (a custom grid is a comma-separated list of magnitudes)");
    }
  }
  return custom("custom", mags);
}

namespace {

// The built-in grids, each once: its name, its label, whether it is sign-magnitude, and its magnitudes
// (sign-magnitude) or none (int4_tc, made apart). E2M1's max_fpx cap is applied in from_name.
struct Builtin {
  const char* name;
  const char* label;
  bool sign_magnitude;
  std::vector<double> magnitudes;
};

const std::vector<Builtin>& builtins() {
  static const std::vector<Builtin> b = {
      {"e2m1", "E2M1 (max 6)", true, {0, 0.5, 1, 1.5, 2, 3, 4, 6}},
      {"e1m2", "E1M2 (uniform)", true, {0, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75}},
      {"int4", "INT4 (uniform)", true, {0, 1, 2, 3, 4, 5, 6, 7}},
      {"int4_tc", "INT4 two's complement", false, {}},
  };
  return b;
}

}  // namespace

std::vector<std::string> Grid::builtin_names() {
  std::vector<std::string> n;
  for (const auto& b : builtins()) n.push_back(b.name);
  return n;
}

std::string Grid::builtin_list(bool sign_magnitude) {
  std::string s;
  for (const auto& b : builtins())
    if (b.sign_magnitude || !sign_magnitude) s += (s.empty() ? "" : ", ") + std::string(b.name);
  return s;
}

std::string Grid::label() const {
  if (name_.rfind("e2m1_max", 0) == 0) return "E2M1 (max " + name_.substr(8) + ")";
  for (const auto& b : builtins())
    if (name_ == b.name) return b.label;
  return name_;
}

Grid Grid::from_name(const std::string& name, double max_fpx) {
  const auto it = std::find_if(builtins().begin(), builtins().end(), [&](const Builtin& b) { return name == b.name; });
  if (it == builtins().end()) throw Error("grid: unknown name '" + name + "' (allowed: " + builtin_list() + ", or a list of magnitudes)");
  if (name == "e2m1") {
    const double cap = max_fpx == 0 ? 6 : max_fpx;
    if (cap != 2 && cap != 3 && cap != 4 && cap != 6)
      throw Error("max_fpx: " + std::to_string(max_fpx) + " is not allowed for e2m1 (allowed: 2, 3, 4, 6)");
    std::vector<double> kept;
    for (double v : it->magnitudes) if (v <= cap) kept.push_back(v);
    return custom(cap == 6 ? "e2m1" : "e2m1_max" + std::to_string(static_cast<int>(cap)), kept);
  }
  if (max_fpx != 0 && max_fpx != 6)
    throw Error("max_fpx applies to e2m1 only (grid '" + name + "')");
  if (it->sign_magnitude) return custom(name, it->magnitudes);
  // int4_tc: the signed values -8..7 in two's complement; max scaling maps amax onto 8, so positives above
  // 7 saturate (the grid's asymmetry).
  std::vector<double> lv;
  std::vector<uint8_t> codes;
  for (int v = -8; v <= 7; ++v) { lv.push_back(v); codes.push_back(static_cast<uint8_t>(v & 0xf)); }
  return Grid(name, build(lv, false, 8.0, codes));
}

std::vector<float> Grid::levels() const {
  return std::vector<float>(params_.level, params_.level + params_.n);
}

std::vector<float> Grid::values() const {
  std::vector<float> v;
  if (symmetric()) {
    for (int i = params_.n - 1; i >= 1; --i) v.push_back(-params_.level[i]);
    for (int i = 0; i < params_.n; ++i) v.push_back(params_.level[i]);
  } else {
    v = levels();
  }
  return v;
}

std::vector<Bin> Grid::bins() const {
  std::vector<Bin> out;
  std::vector<float> lv = levels();
  // For symmetric grids, the bin of 0 has -level[1] as its left neighbour.
  std::vector<double> full;
  if (symmetric()) for (int i = params_.n - 1; i >= 1; --i) full.push_back(-lv[i]);
  for (float x : lv) full.push_back(x);
  size_t first = symmetric() ? static_cast<size_t>(params_.n - 1) : 1;
  for (size_t i = first; i + 1 < full.size(); ++i) {
    double l = (full[i] - full[i - 1]) / 2, r = (full[i + 1] - full[i]) / 2;
    out.push_back(Bin{static_cast<float>(full[i]), static_cast<float>(l), static_cast<float>(r),
                      static_cast<float>((l - r) / 2)});
  }
  return out;
}

float Grid::decode(uint8_t code) const {
  code &= 0xf;
  if (symmetric()) {
    int idx = code & 7;
    if (idx >= params_.n) return NAN;
    float m = params_.level[idx];
    return (code & 8) ? -m : m;
  }
  for (int i = 0; i < params_.n; ++i) if (params_.code[i] == code) return params_.level[i];
  return NAN;
}

std::string Grid::describe() const {
  std::ostringstream os;
  os << name_ << " (" << (symmetric() ? "sign-magnitude" : "two's complement") << ", gmax " << gmax() << "):";
  for (float v : levels()) os << ' ' << v;
  return os.str();
}

}  // namespace ufp4
