#include "harness/plan/moe_layer_speed.h"

#include <algorithm>
#include <vector>

#include "common/fs.h"
#include "harness/io/array_io.h"
#include "harness/io/bench_files.h"
#include "harness/plan/device_peaks.h"

namespace ufp4 {

namespace {

struct DeviceRows {
  std::string device;
  std::vector<ScalingBenchRow> rows;
};

DeviceRows read_rows(const std::string& path) {
  if (!file_exists(path)) return {};
  return {read_h5_string_attrs(path)["device"], read_scaling_rows(path)};
}

// The row of `model`'s layer to estimate from: ufp4's before bf16's, then the most ranks (the exchange
// of a large expert-parallel group is in it).
const ScalingBenchRow* best_layer_row(const std::vector<ScalingBenchRow>& rows, const std::string& model) {
  const ScalingBenchRow* best = nullptr;
  auto rank = [](const ScalingBenchRow& r) { return std::make_pair(r.recipe == "ufp4" ? 1 : 0, r.gpus); };
  for (const auto& r : rows)
    if (r.model == model && r.unit == "MoE layer" && r.step_ms > 0 && (r.recipe == "ufp4" || r.recipe == "bf16") && (!best || rank(r) > rank(*best)))
      best = &r;
  return best;
}

// The median MFU of the one-rank training steps of dense models in the scaling file (a transformer's
// attention and dense layers at their real sizes); 0 when it has none.
double dense_step_mfu(const std::vector<ScalingBenchRow>& rows) {
  const std::vector<std::string> names = model_names();
  std::vector<double> v;
  for (const auto& r : rows) {
    // A row of a model this build does not know (renamed since) is not counted, not an error.
    if (std::find(names.begin(), names.end(), r.model) == names.end()) continue;
    if (r.gpus == 1 && r.unit != "MoE layer" && r.mfu > 0 && !model_config(r.model).is_moe()) v.push_back(r.mfu);
  }
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

MoeLayerEstimate estimate_from_moe_layer(const ModelConfig& c, int gpus, double tokens, const std::string& device, const std::string& bench_dir) {
  MoeLayerEstimate e;
  if (!c.is_moe() || gpus < 1) return e;
  const DeviceRows layer = read_rows(bench_dir + "/expert_parallel_layer.h5");
  const ScalingBenchRow* row = best_layer_row(layer.rows, c.name);
  if (!row) return e;
  // The file is one command's, on one device: its rows stand for `device` only when they are its (or
  // when `device` measured nothing, as on a machine without a GPU; the estimate then names its device).
  if (!device.empty() && device != layer.device && peak_flops(device) > 0) return e;
  e.device = layer.device;
  const double peak = peak_flops(e.device);
  if (!(peak > 0)) return e;
  const DeviceRows scaling = read_rows(bench_dir + "/scaling.h5");
  e.rest_mfu = scaling.device == e.device ? dense_step_mfu(scaling.rows) : 0;
  e.rest_source = "the median MFU of the dense models' one-GPU steps in scaling.h5";
  if (!(e.rest_mfu > 0)) {
    e.rest_mfu = row->mfu;
    e.rest_source = "the MFU of the measured MoE layer itself";
  }
  if (!(e.rest_mfu > 0)) return e;
  e.recipe = row->recipe;
  e.layout = row->layout;
  e.layer_ms = row->step_ms;
  e.layer_tokens = static_cast<double>(row->batch * row->seq_len);
  const int64_t moe_layers = c.n_layers - c.dense_layers;
  const double layer_s_per_token = row->step_ms * 1e-3 / e.layer_tokens;
  const double rest_flops = train_flops_per_token(c) - static_cast<double>(moe_layers) * moe_layer_flops_per_token(c);
  const double s_per_token = static_cast<double>(moe_layers) * layer_s_per_token + rest_flops / (e.rest_mfu * peak);
  e.seconds = tokens / gpus * s_per_token;
  return e;
}

}  // namespace ufp4
