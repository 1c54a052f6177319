// "### Projected training time" of reports/bench.md: the paper's models at the token budgets that
// reports/paper/figure9.toml assumes (the paper publishes none), in GPU-hours at the speed measured here:
// a training step's tokens/s a GPU (scaling.h5, expert_parallel.h5), or for a model measured only as one
// of its MoE layers, the plan's estimate from that layer (harness/plan/moe_layer_speed.h).
#include <cmath>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/array_io.h"
#include "harness/io/bench_files.h"
#include "harness/plan/moe_layer_speed.h"
#include "harness/report/report.h"

namespace ufp4 {

namespace {

struct Budget {
  std::string name, model;
  double tokens = 0;
};

std::vector<Budget> paper_budgets(const std::string& paper_toml) {
  const toml::table paper = load_paper(paper_toml);
  std::vector<Budget> out;
  if (const toml::array* targets = paper["targets"].as_array())
    for (const toml::node& n : *targets)
      if (const toml::table* t = n.as_table()) {
        Budget b{(*t)["name"].value_or(std::string()), (*t)["model"].value_or(std::string()), (*t)["tokens"].value_or(0.0)};
        if (b.model.empty() || !(b.tokens > 0)) throw Error(paper_toml + ": each [[targets]] needs model and tokens > 0");
        out.push_back(b);
      }
  return out;
}

// The training steps measured on several GPUs: per (model, recipe) the row of the most GPUs, with its device.
struct Measured {
  ScalingBenchRow row;
  std::string device, file;
};
std::map<std::pair<std::string, std::string>, Measured> measured_steps(const std::string& dir) {
  std::map<std::pair<std::string, std::string>, Measured> out;
  for (const char* name : {"scaling.h5", "expert_parallel.h5"}) {
    const std::string path = dir + "/" + name;
    if (!file_exists(path)) continue;
    const std::string device = read_h5_string_attrs(path)["device"];
    for (const auto& r : read_scaling_rows(path)) {
      if (r.unit == "MoE layer" || !(r.tokens_per_s > 0)) continue;
      auto it = out.find({r.model, r.recipe});
      if (it == out.end() || r.gpus > it->second.row.gpus) out[{r.model, r.recipe}] = {r, device, name};
    }
  }
  return out;
}

}  // namespace

std::string projection_section(const std::string& bench_dir, const std::string& paper_toml) {
  if (!file_exists(paper_toml)) return "";
  const auto steps = measured_steps(bench_dir);
  std::ostringstream md;
  size_t lines = 0;
  md << "### Projected training time\n\n"
     << "The paper's models at the token budgets `" << rel(paper_toml) << "` assumes (the paper publishes none), in GPU-hours at the speed "
     << "measured here: tokens / (tokens/s a GPU) of the training step on the most GPUs measured; for a model measured only as one of "
     << "its MoE layers, `ufp4 plan`'s estimate from that layer (its MoE layers at the layer's measured time a token, the rest of its "
     << "FLOPs at the MFU the row names; the optimizer step and an all-to-all between machines not counted). The speed at the scale "
     << "of a real run (hundreds of GPUs over a network) is lower.\n\n"
     << "| model | tokens | recipe | measured | tokens/s a GPU | GPU-hours |\n|---|---|---|---|---|---|\n";
  for (const Budget& b : paper_budgets(paper_toml)) {
    bool any = false;
    for (const char* recipe : {"bf16", "ufp4"})
      if (auto it = steps.find({b.model, recipe}); it != steps.end()) {
        const ScalingBenchRow& r = it->second.row;
        const double per_gpu = r.tokens_per_s / static_cast<double>(r.gpus);
        md << "| " << b.name << " (`" << b.model << "`) | " << fmt("%.3g", b.tokens) << " | " << recipe << " | the step, " << r.gpus << " x "
           << it->second.device << ", " << (r.layout.empty() ? "DP " + std::to_string(r.gpus) : r.layout) << " (`" << it->second.file << "`) | "
           << fmt("%.0f", per_gpu) << " | " << fmt("%.3g", b.tokens / per_gpu / 3600) << " |\n";
        any = true;
        ++lines;
      }
    if (any) continue;
    const MoeLayerEstimate e = estimate_from_moe_layer(model_config(b.model), 1, b.tokens, "", bench_dir);
    if (!(e.seconds > 0)) continue;
    md << "| " << b.name << " (`" << b.model << "`) | " << fmt("%.3g", b.tokens) << " | " << e.recipe << " | one MoE layer, " << e.layout << ", "
       << e.device << " (`expert_parallel_layer.h5`), the rest at " << fmt("%.1f%%", 100 * e.rest_mfu) << " MFU (" << e.rest_source << ") | "
       << fmt("%.0f", b.tokens / e.seconds)
       << " | " << fmt("%.3g", e.seconds / 3600) << " |\n";
    ++lines;
  }
  return lines ? md.str() + "\n" : "";
}

}  // namespace ufp4
