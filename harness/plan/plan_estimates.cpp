#include "harness/plan/plan_estimates.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/io/provenance.h"
#include "harness/io/run_results.h"
#include "harness/plan/device_peaks.h"
#include "harness/plan/moe_layer_speed.h"
#include "harness/plan/packing.h"
#include "harness/plan/run_files.h"
#include "harness/plan/run_plan.h"

namespace ufp4 {

double data_parallel_memory_gb(const ModelConfig& c, int64_t micro_batch, int gpus, bool sharded) {
  const MemoryEstimate m = estimate_memory(c, micro_batch);
  if (gpus <= 1 || !sharded) return m.total_gb();
  const double shard_gb = static_cast<double>(count_params(c).total) * 4.0 / gpus / 1e9;
  return m.weights_gb + m.grads_gb + m.optimizer_gb / gpus + shard_gb + m.activations_gb;
}

namespace {

// The routed experts' weights (SwiGLU: three d_model x expert_hidden matrices an expert), those EP splits.
double routed_expert_params(const ModelConfig& c) {
  const int64_t moe_layers = c.n_layers - c.dense_layers;
  return c.is_moe() ? static_cast<double>(moe_layers) * c.n_experts * 3.0 * c.d_model * c.expert_hidden : 0.0;
}

}  // namespace

double expert_parallel_memory_gb(const ModelConfig& c, int64_t micro_batch, int gpus, int ep) {
  const double expert_params = routed_expert_params(c);
  const double other = static_cast<double>(count_params(c).total) - expert_params;
  const double dp = static_cast<double>(gpus) / ep;  // ranks that hold the same experts
  return (other * (6.0 + 4.0 + 12.0 / gpus) + expert_params / ep * (6.0 + 4.0 + 12.0 / dp)) / 1e9 + estimate_memory(c, micro_batch).activations_gb;
}

double four_bit_operand_gb(const ModelConfig& c, int ep) {
  const double expert_params = routed_expert_params(c);
  const double quantized = static_cast<double>(count_params(c).quantized_total);
  return 2.0 * (quantized - expert_params + expert_params / ep) / 1e9;
}

namespace {

std::string human(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.3f B", v / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f M", v / 1e6);
  return buf;
}

// Measured training speed (tokens/s) of committed runs, by device, model and recipe.
struct SpeedIndex {
  std::map<std::string, double> by_recipe, by_model;  // "device|model|recipe", "device|model" -> tokens/s
  std::map<std::string, std::vector<double>> mfu;     // device -> MFU of every run
  void add(const std::string& dir) {
    std::vector<std::string> files;
    if (is_dir(dir)) walk_files(dir, ".h5", files);
    for (const auto& f : files) {
      try {
        if (!is_run_results(f)) continue;
        const RunResults r = read_run_results(f, /*with_curves=*/false);
        if (r.run_id.empty()) continue;
        const double tps = r.tokens_per_s;
        if (!(tps > 0)) continue;
        const std::string& device = r.attr("device");
        by_recipe[device + "|" + r.model + "|" + r.recipe] = tps;
        by_model[device + "|" + r.model] = tps;
        mfu[device].push_back(r.mfu);
      } catch (const Error&) {
      }
    }
  }
  // Seconds for `tokens` of this run on `device`, with how it was estimated; -1 when nothing was measured.
  std::pair<double, std::string> estimate(const std::string& device, const std::string& model, const std::string& recipe, double tokens,
                                          double flops) const {
    if (auto it = by_recipe.find(device + "|" + model + "|" + recipe); it != by_recipe.end()) return {tokens / it->second, ""};
    if (auto it = by_model.find(device + "|" + model); it != by_model.end()) return {tokens / it->second, "~"};
    auto it = mfu.find(device);
    const double peak = peak_flops(device);
    if (it != mfu.end() && peak > 0) {
      std::vector<double> v = it->second;
      std::sort(v.begin(), v.end());
      const double med = v[v.size() / 2];
      if (med > 0) return {flops / (med * peak), "≈"};
    }
    return {-1, ""};
  }
};

// Why a run will (not) reuse an earlier result: the same id, or what changed since a result of the
// same name (its stored identity against this one's).
std::string reuse_reason(const RunPlan& p) {
  const RunIdentity& id = p.identity;
  std::vector<std::string> rejected;
  if (std::string f = find_results(p, &rejected); !f.empty()) return "reused: " + f + " has this run id and its content checks";
  if (!rejected.empty()) return "new: " + rejected.front() + " (ufp4 run moves it aside and trains the run)";
  if (file_exists(p.checkpoint.path)) return "resumes: " + p.checkpoint.path;
  if (std::string f = find_identical_run(p.run_id, p.out_dir, ""); !f.empty())
    return "reused: the identical run is in " + f + " (ufp4 run copies it here when it was made on the device it runs on)";
  if (!id.data_prepared) return "new: the data is not prepared yet (the run id is final once it is)";
  std::vector<std::string> files;
  walk_files(p.out_dir, ".h5", files);
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const std::string base = f.substr(f.find_last_of('/') + 1);
    if (base.rfind(p.name + "-", 0) != 0 || base.size() != p.name.size() + 1 + 16 + 3) continue;
    RunResults r;
    try {
      if (!is_run_results(f)) continue;
      r = read_run_results(f, /*with_curves=*/false);
    } catch (const Error&) {
      continue;
    }
    if (r.run_identity.empty()) return "new: " + f + " predates run ids that cover recipe, model and data contents";
    std::vector<std::string> changed;
    if (r.recipe_sha256 != id.recipe_sha256) changed.push_back("recipe content");
    if (r.model_sha256 != id.model_sha256) changed.push_back("model configuration");
    if (r.data_manifest_sha256 != id.data_sha256) changed.push_back("data (data.toml)");
    // Manifest fields: the lines of the stored resolved manifest that differ from this one's.
    std::set<std::string> now, before;
    std::istringstream x(p.resolved_manifest), y(r.manifest);
    for (std::string l; std::getline(x, l);) now.insert(l);
    for (std::string l; std::getline(y, l);) before.insert(l);
    std::string fields;
    for (const auto& l : now)
      if (!before.count(l) && l.find(" = ") != std::string::npos) fields += (fields.empty() ? "" : ", ") + l.substr(0, l.find(" = "));
    if (!fields.empty()) changed.push_back("fields " + fields);
    std::string list;
    for (const auto& c : changed) list += (list.empty() ? "" : "; ") + c;
    return "new: differs from " + f + " in " + (list.empty() ? std::string("fields outside the manifest's resolved form") : list);
  }
  return "new: no earlier result of this name in " + p.out_dir;
}

// Expert parallelism on `gpus` ranks (harness/train/data_parallel.h, `ufp4 run --ep E`): every EP that
// divides both the ranks and the experts, with its memory a GPU (expert_parallel_memory_gb). The all-to-all counts each
// token's top-k copies of its d_model BF16 activations out and back (dispatch, combine), forward and
// backward, less the share that stays on the rank. The recommendation: the smallest EP that fits 80 GB
// (the least all-to-all), else 141 GB, else none.
void print_expert_layouts(const ModelConfig& c, int gpus, int64_t micro_batch) {
  const MemoryEstimate m = estimate_memory(c, micro_batch);
  const double gb = 1e9;
  const int64_t moe_layers = c.n_layers - c.dense_layers;
  const double tok = static_cast<double>(micro_batch) * c.seq_len;
  std::printf("  expert parallel on %d GPUs (ufp4 run --ep E; ZeRO-1, micro-batch %lld a GPU, activations %.2f GB, no recompute):\n", gpus,
              static_cast<long long>(micro_batch), m.activations_gb);
  std::printf("    %6s %6s %14s %12s %12s %s   %s\n", "EP", "DP", "experts a GPU", "GB a GPU", "a2a/micro-b.", "fits 80 / 141 GB",
              "4-bit GB a GPU");
  int fit80 = 0, fit141 = 0, fit80_4 = 0, fit141_4 = 0;
  for (int ep = 1; ep <= gpus; ++ep) {
    if (gpus % ep != 0 || c.n_experts % ep != 0) continue;
    const int dp = gpus / ep;  // ranks that hold the same experts
    const double per_gpu = expert_parallel_memory_gb(c, micro_batch, gpus, ep);
    const double a2a = tok * c.top_k * c.d_model * 2.0 * 2.0 * 2.0 * moe_layers * (ep - 1.0) / ep / gb;
    if (per_gpu <= 80 && !fit80) fit80 = ep;
    if (per_gpu <= 141 && !fit141) fit141 = ep;
    const double four_bit = per_gpu + four_bit_operand_gb(c, ep);
    if (four_bit <= 80 && !fit80_4) fit80_4 = ep;
    if (four_bit <= 141 && !fit141_4) fit141_4 = ep;
    std::printf("    %6d %6d %14lld %12.2f %9.2f GB %s / %s   %10.2f (%s / %s)\n", ep, dp, static_cast<long long>(c.n_experts / ep), per_gpu, a2a,
                per_gpu <= 80 ? "yes" : "no", per_gpu <= 141 ? "yes" : "no", four_bit, four_bit <= 80 ? "yes" : "no", four_bit <= 141 ? "yes" : "no");
  }
  std::printf("    4-bit GB a GPU: with a 4-bit recipe's columnwise weight operands, kept from the forward to DGRAD (2 B a quantized weight);\n"
              "    its activation operands are not counted: leave a margin (README, \"Expert parallelism\": this column against measured peaks)\n");
  if (fit80) std::printf("    layout: EP %d x DP %d (the least all-to-all that fits 80 GB)\n", fit80, gpus / fit80);
  else if (fit141) std::printf("    layout: EP %d x DP %d (fits 141 GB, not 80 GB)\n", fit141, gpus / fit141);
  else std::printf("    layout: none fits 141 GB on %d GPUs (more GPUs, activation recompute or sharded weights would be needed)\n", gpus);
  if (fit80_4 != fit80 || fit141_4 != fit141) {
    if (fit80_4) std::printf("    layout with a 4-bit recipe: EP %d x DP %d (fits 80 GB)\n", fit80_4, gpus / fit80_4);
    else if (fit141_4) std::printf("    layout with a 4-bit recipe: EP %d x DP %d (fits 141 GB, not 80 GB)\n", fit141_4, gpus / fit141_4);
    else std::printf("    layout with a 4-bit recipe: none fits 141 GB on %d GPUs\n", gpus);
  }
}

// `plan --model NAME --gpus N`: memory per GPU under data parallelism with replicated and with sharded
// (ZeRO-1) AdamW state, as `ufp4 run` on N ranks holds them (harness/train/data_parallel.h: FP32
// weights and gradients whole on every rank, the AdamW moments split N ways), the time for `tokens`
// at N x the measured tokens/s of one GPU (linear scaling: no communication counted, a lower bound),
// and for a MoE model its expert-parallel layouts (print_expert_layouts).
void print_cluster_plan(const ModelConfig& c, int gpus, int64_t micro_batch, double tokens, const SpeedIndex& speed, const std::string& device) {
  const double replicated = data_parallel_memory_gb(c, micro_batch, gpus, false);
  const double zero1 = data_parallel_memory_gb(c, micro_batch, gpus, true);
  std::printf("\n  %d GPUs, data parallel (micro-batch %lld a GPU): %.2f GB a GPU with replicated AdamW state, %.2f GB with ZeRO-1 "
              "(AdamW moments split %d ways)\n",
              gpus, static_cast<long long>(micro_batch), replicated, zero1, gpus);
  for (double cap : {80.0, 141.0})
    std::printf("    fits %.0f GB: replicated %s, ZeRO-1 %s\n", cap, replicated <= cap ? "yes" : "no", zero1 <= cap ? "yes" : "no");
  // A 4-bit recipe's columnwise weight operands, whole on every rank (data parallelism replicates the weights).
  const double four_bit = four_bit_operand_gb(c, 1);
  std::printf("    with a 4-bit recipe: +%.2f GB of columnwise weight operands kept for DGRAD (2 B a quantized weight): %.2f GB replicated, %.2f GB "
              "ZeRO-1 (fits 80 GB: %s / %s; 141 GB: %s / %s; activation operands not counted)\n",
              four_bit, replicated + four_bit, zero1 + four_bit, replicated + four_bit <= 80 ? "yes" : "no", zero1 + four_bit <= 80 ? "yes" : "no",
              replicated + four_bit <= 141 ? "yes" : "no", zero1 + four_bit <= 141 ? "yes" : "no");
  const auto est = speed.estimate(device, c.name, "ufp4", tokens, tokens * train_flops_per_token(c));
  // A MoE model without runs of its own: from its measured MoE layer before the median MFU of other runs.
  const bool own_runs = est.first > 0 && (est.second.empty() || est.second == "~");
  const MoeLayerEstimate layer = own_runs ? MoeLayerEstimate{} : estimate_from_moe_layer(c, gpus, tokens, device);
  if (layer.seconds > 0)
    std::printf("    %.3g tokens: %s on %d x %s, from its measured MoE layer (%s, %s: %.2f ms a forward + backward of %.0f tokens a rank) x %lld "
                "MoE layers, the rest of its FLOPs at %.1f%% MFU (%s); the optimizer step and an all-to-all between machines not counted\n",
                tokens, Progress::format_duration(layer.seconds).c_str(), gpus, layer.device.c_str(), layer.recipe.c_str(), layer.layout.c_str(),
                layer.layer_ms, layer.layer_tokens, static_cast<long long>(c.n_layers - c.dense_layers), 100 * layer.rest_mfu, layer.rest_source.c_str());
  else if (est.first > 0)
    std::printf("    %.3g tokens: %s at %d x the measured tokens/s of one %s (%s; linear scaling, communication not counted)\n", tokens,
                Progress::format_duration(est.first / gpus).c_str(), gpus, device.c_str(),
                est.second.empty() ? "this model, ufp4" : est.second == "~" ? "this model, another recipe" : "FLOPs at the median MFU measured");
  else
    std::printf("    %.3g tokens: no time estimate (nothing measured on %s)\n", tokens, device.c_str());
  if (c.is_moe()) print_expert_layouts(c, gpus, micro_batch);
}

}  // namespace

// `plan MANIFEST...`: every run of the manifests as `ufp4 run` would plan it (plan_run): run id, model,
// recipe, tokens, epochs, FLOPs, the time at the measured speed, whether its results exist, and why it
// would be reused or trained.
void print_run_plans(const std::vector<std::string>& manifests, const std::string& device_name) {
  std::vector<RunPlan> plans;
  for (const auto& f : manifests)
    for (const auto& m : RunManifest::expand(f)) plans.push_back(plan_run(m));
  // GPU time at the measured speed of committed runs on this machine's kind of device.
  SpeedIndex speed;
  speed.add("results");
  for (const auto& p : plans) speed.add(p.out_dir);
  const std::string device = device_name.empty() ? provenance()["device"] : device_name;
  std::printf("%-40s %-17s %-12s %-12s %8s %10s %7s %14s %10s %-9s %s\n", "run", "run id", "model", "recipe", "steps", "tokens", "epochs",
              "train FLOPs", "est. time", "results", "differs from the base");
  double total_s = 0;
  std::vector<std::string> reasons;
  std::vector<std::pair<std::string, double>> missing_tokens;
  for (const auto& p : plans) {
    reasons.push_back(p.name + ": " + reuse_reason(p));
    p.model.validate();
    const double tokens = static_cast<double>(p.train_tokens);
    const bool exists = !find_results(p).empty();
    const std::string state = exists ? "exist" : (file_exists(p.checkpoint.path) ? "partial" : "missing");
    if (!exists) missing_tokens.emplace_back(p.model.name, tokens);
    const std::string recipe = recipe_stem(p.recipe_file);
    const double flops = tokens * train_flops_per_token(p.model);
    auto [sec, how] = speed.estimate(device, p.model.name, p.recipe.name, tokens, flops);
    const std::string est = sec < 0 ? "-" : how + Progress::format_duration(sec);
    if (sec > 0 && state != "exist") total_s += sec;
    // Epochs of the run's training data, once the data exists ("?" before); over data.max_epochs `ufp4 run` refuses it.
    std::string epochs = "?";
    if (p.data_prepared()) {
      char e[32];
      std::snprintf(e, sizeof e, "%.3g%s", p.epochs, p.epochs > p.max_epochs ? "!" : "");
      epochs = e;
    }
    std::printf("%-40s %-17s %-12s %-12s %8lld %10.3e %7s %14.3e %10s %-9s %s\n", p.name.c_str(), p.run_id.c_str(), p.model.name.c_str(), recipe.c_str(),
                static_cast<long long>(p.train.steps), tokens, epochs.c_str(), flops, est.c_str(), state.c_str(), p.differs.empty() ? "(base)" : p.differs.c_str());
  }
  std::printf("\nest. time: at the measured tokens/s of committed runs of the same model and recipe on this device (%s); "
              "~ same model, other recipe; ≈ FLOPs at the median MFU measured here; - nothing measured (runs that shared a GPU recorded their shared speed). Missing runs: %s one at a time.\n"
              "epochs: training tokens over the data's; ! above data.max_epochs (ufp4 run refuses the run); ? data not prepared yet.\n",
              device.c_str(), Progress::format_duration(total_s).c_str());
  if (const std::string packed = packed_estimate(missing_tokens, repository_root() + "/results/bench/packing.csv"); !packed.empty())
    std::printf("\nmissing runs side by side (ufp4 run --gpus N; the packing table results/bench/packing.csv):\n%s", packed.c_str());
  std::printf("\nreuse (a run id hashes every manifest field that changes the result, the recipe's resolved content, the model's "
              "configuration and the data manifest's SHA-256):\n");
  for (const auto& r : reasons) std::printf("  %s\n", r.c_str());
}

void print_model_plans(std::vector<std::string> models, int64_t seq, int64_t micro_batch, int gpus, double tokens, const std::string& device_name) {
  if (models.empty()) throw Error("plan: give --model NAME (allowed: all, " + [] {
    std::string s;
    for (const auto& n : model_names()) s += (s.empty() ? "" : ", ") + n;
    return s;
  }() + ")");
  if (models.size() == 1 && models[0] == "all") models = model_names();
  std::printf("%-12s %12s %12s %12s %14s %10s %10s %10s\n", "model", "total", "active", "quantized", "train FLOP/tok",
              "weights GB", "grad+opt", "act GB/mb");
  for (const auto& name : models) {
    ModelConfig c = model_config(name);
    if (seq > 0) c.seq_len = seq;
    c.validate();
    ParamCount p = count_params(c);
    MemoryEstimate m = estimate_memory(c, micro_batch);
    std::printf("%-12s %12s %12s %12s %14.3e %10.2f %10.2f %10.2f\n", c.name.c_str(), human(p.total).c_str(), human(p.active).c_str(),
                human(p.quantized_total).c_str(), train_flops_per_token(c), m.weights_gb, m.grads_gb + m.optimizer_gb, m.activations_gb);
  }
  if (models.size() == 1) {
    ModelConfig c = model_config(models[0]);
    if (seq > 0) c.seq_len = seq;  // the memory line below at the sequence asked for, as the table above and the layouts
    std::cout << "\n" << c.name << ": " << c.notes << "\n"
              << "  d_model " << c.d_model << ", layers " << c.n_layers << ", heads " << c.n_heads << " (KV " << c.n_kv_heads
              << "), head_dim " << c.head_dim() << ", SwiGLU " << c.ffn_hidden << ", vocab " << c.vocab << ", seq " << c.seq_len;
    if (c.is_moe())
      std::cout << "\n  MoE: " << c.n_experts << " experts of hidden " << c.expert_hidden << ", top-" << c.top_k << ", "
                << c.n_shared_experts << " shared, first " << c.dense_layers << " layer(s) dense, "
                << (c.capacity_factor == 0 ? std::string("dropless") : "capacity factor " + std::to_string(c.capacity_factor));
    MemoryEstimate m = estimate_memory(c, micro_batch);
    std::printf("\n  memory: weights %.2f GB (FP32 master + BF16 copy), grads %.2f GB, Adam %.2f GB, activations %.2f GB "
                "(micro-batch %lld, no recompute): %.2f GB in all\n",
                m.weights_gb, m.grads_gb, m.optimizer_gb, m.activations_gb, static_cast<long long>(micro_batch), m.total_gb());
  }
  if (gpus < 0) throw Error("plan: --gpus must be >= 1");
  if (gpus > 0) {
    SpeedIndex speed;
    speed.add("results");
    const std::string device = device_name.empty() ? provenance()["device"] : device_name;
    for (const auto& name : models) {
      ModelConfig c = model_config(name);
      if (seq > 0) c.seq_len = seq;
      if (models.size() > 1) std::printf("\n%s:", c.name.c_str());
      print_cluster_plan(c, gpus, micro_batch, tokens, speed, device);
    }
  }
}

}  // namespace ufp4
