#include "harness/analysis/signal_chain.h"

#include <cmath>
#include <regex>

#include "common/error.h"

namespace ufp4 {

namespace {

// Where a point or a linear sits along the stream: the embedding 0, block i's linears and the stream after
// it i + 1, the final norm n_layers + 1 (no GEMM), the head and the logits n_layers + 2.
int tap_position(const std::string& tap, int64_t n_layers) {
  if (tap == "embedding") return 0;
  if (tap == "final_norm") return static_cast<int>(n_layers) + 1;
  if (tap == "logits") return static_cast<int>(n_layers) + 2;
  std::smatch m;
  static const std::regex block("layers\\.([0-9]+)");
  if (std::regex_match(tap, m, block) && std::stoll(m[1]) < n_layers) return static_cast<int>(std::stoll(m[1])) + 1;
  throw Error("signal chain: '" + tap + "' is not a point of the residual stream of " + std::to_string(n_layers) +
              " blocks (allowed: embedding, layers.0 to layers." + std::to_string(n_layers - 1) + ", final_norm, logits)");
}

// A linear's position, or -1 for one outside the stream's chain.
int linear_position(const std::string& layer, int64_t n_layers) {
  if (layer == "lm_head") return static_cast<int>(n_layers) + 2;
  std::smatch m;
  static const std::regex block("layers\\.([0-9]+)\\..*");
  if (std::regex_match(layer, m, block)) return static_cast<int>(std::stoll(m[1])) + 1;
  return -1;
}

// One stage: a linear, or one linear of a MoE layer's experts (their mean delta).
struct Stage {
  int position = 0;
  double forward_sum = 0, backward_sum = 0;
  int members = 0;
};

double alpha_of(const std::map<std::string, double>& alpha, const std::string& key) {
  const auto it = alpha.find(key);
  return it == alpha.end() ? 1.0 : it->second;
}

std::map<std::string, Stage> stages_of(int64_t n_layers, const std::map<std::string, double>& alpha) {
  // A MoE layer's routed experts and its shared expert run side by side: one stage for each of their linears.
  static const std::regex expert("\\.(experts\\.[0-9]+|shared_expert)\\.");
  std::map<std::string, int> seen;  // linear -> position
  for (const auto& [key, a] : alpha) {
    const std::string layer = key.substr(0, key.rfind('/'));
    const int pos = linear_position(layer, n_layers);
    if (pos >= 0) seen[layer] = pos;
  }
  std::map<std::string, Stage> stages;
  for (const auto& [layer, pos] : seen) {
    Stage& s = stages[std::regex_replace(layer, expert, ".experts.")];
    s.position = pos;
    s.forward_sum += 1 - alpha_of(alpha, layer + "/fprop.x") * alpha_of(alpha, layer + "/fprop.w");
    s.backward_sum += 1 - alpha_of(alpha, layer + "/dgrad.dy") * alpha_of(alpha, layer + "/dgrad.w");
    ++s.members;
  }
  return stages;
}

}  // namespace

std::vector<ChainPredicted> predict_chain(const std::vector<std::string>& taps, int64_t n_layers, const std::map<std::string, double>& alpha) {
  const std::map<std::string, Stage> stages = stages_of(n_layers, alpha);
  std::vector<ChainPredicted> out;
  for (const auto& tap : taps) {
    const int p = tap_position(tap, n_layers);
    double forward = 0, backward = 0;
    ChainPredicted c;
    for (const auto& [name, s] : stages) {
      if (s.position <= p) forward += s.forward_sum / s.members, ++c.forward_gemms;
      else backward += s.backward_sum / s.members, ++c.backward_gemms;
    }
    c.forward = std::exp(-forward);
    c.backward = std::exp(-backward);
    out.push_back(c);
  }
  return out;
}

LabelledTable chain_table(const std::vector<MeasuredTap>& measured, int64_t n_layers, const std::map<std::string, double>& alpha) {
  std::vector<std::string> names;
  for (const auto& m : measured) names.push_back(m.name);
  const std::vector<ChainPredicted> predicted = predict_chain(names, n_layers, alpha);
  LabelledTable t(4, "alpha,error,predicted,gemms: the recipe's pass against the exact pass at a point of the residual stream (alpha = <q, e> / ||e||^2, "
                     "error = ||q - e|| / ||e||), Eq. 5's exp(-sum delta) over the GEMMs the signal crossed to get there, and how many");
  for (size_t i = 0; i < measured.size(); ++i) {
    const MeasuredTap& m = measured[i];
    t.add({m.name, "forward"}, {m.alpha_forward, m.error_forward, predicted[i].forward, static_cast<double>(predicted[i].forward_gemms)});
    t.add({m.name, "backward"}, {m.alpha_backward, m.error_backward, predicted[i].backward, static_cast<double>(predicted[i].backward_gemms)});
  }
  return t;
}

}  // namespace ufp4
