// `ufp4 plan --model NAME`: parameters, FLOPs per token and memory of a model, whether or not it fits.
#include <cstdio>
#include <iostream>

#include "harness/cli.h"
#include "harness/error.h"
#include "harness/fs.h"
#include "harness/run_manifest.h"
#include "harness/trainer.h"
#include "models/model_config.h"

namespace ufp4 {

namespace {

std::string human(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.3f B", v / 1e9);
  else std::snprintf(buf, sizeof buf, "%.1f M", v / 1e6);
  return buf;
}

}  // namespace

int cmd_plan(const std::vector<std::string>& args) {
  std::vector<std::string> models, manifests;
  int64_t micro_batch = 1, seq = 0;
  po::options_description d("options");
  d.add_options()
      ("model", po::value(&models)->multitoken(), "model names (or 'all')")
      ("micro-batch", po::value(&micro_batch)->default_value(1), "sequences per micro-batch, for the activation estimate")
      ("seq", po::value(&seq)->default_value(0), "sequence length (0: the model's)")
      ("manifests", po::value(&manifests)->multitoken(), "manifests to expand into runs");
  po::positional_options_description pos;
  pos.add("manifests", -1);
  auto vm = parse_command("plan", "--model NAME ... | MANIFEST ...", d, args, &pos);
  if (!vm) return 0;
  if (!manifests.empty()) {
    // Each manifest is one run (sweeps and ablations arrive with the experiments planner).
    std::vector<RunManifest> ms;
    for (const auto& p : manifests)
      for (auto& m : RunManifest::expand(p)) ms.push_back(m);
    std::printf("%-40s %-17s %-12s %-12s %8s %10s %14s %-9s %s\n", "run", "run id", "model", "recipe", "steps", "tokens", "train FLOPs", "results",
                "differs from the base");
    for (const auto& m : ms) {
      ModelConfig c = model_config(m.model);
      if (m.seq_len > 0) c.seq_len = m.seq_len;
      c.validate();
      const double tokens = static_cast<double>(m.steps) * m.batch * c.seq_len;
      const std::string state = !find_results(m).empty() ? "exist" : (file_exists(checkpoint_dir(m)) ? "partial" : "missing");
      std::string recipe = m.recipe.substr(m.recipe.find_last_of('/') + 1);
      std::printf("%-40s %-17s %-12s %-12s %8lld %10.3e %14.3e %-9s %s\n", m.name.c_str(), m.run_id().c_str(), c.name.c_str(), recipe.c_str(),
                  static_cast<long long>(m.steps), tokens, tokens * train_flops_per_token(c), state.c_str(),
                  m.differs.empty() ? "(base)" : m.differs.c_str());
    }
    return 0;
  }
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
    const ModelConfig& c = model_config(models[0]);
    std::cout << "\n" << c.name << ": " << c.notes << "\n"
              << "  d_model " << c.d_model << ", layers " << c.n_layers << ", heads " << c.n_heads << " (KV " << c.n_kv_heads
              << "), head_dim " << c.head_dim() << ", SwiGLU " << c.ffn_hidden << ", vocab " << c.vocab << ", seq " << (seq ? seq : c.seq_len);
    if (c.is_moe())
      std::cout << "\n  MoE: " << c.n_experts << " experts of hidden " << c.expert_hidden << ", top-" << c.top_k << ", "
                << c.n_shared_experts << " shared, first " << c.dense_layers << " layer(s) dense, "
                << (c.capacity_factor == 0 ? std::string("dropless") : "capacity factor " + std::to_string(c.capacity_factor));
    MemoryEstimate m = estimate_memory(c, micro_batch);
    std::printf("\n  memory: weights %.2f GB (FP32 master + BF16 copy), grads %.2f GB, Adam %.2f GB, activations %.2f GB "
                "(micro-batch %lld, no recompute): %.2f GB in all\n",
                m.weights_gb, m.grads_gb, m.optimizer_gb, m.activations_gb, static_cast<long long>(micro_batch), m.total_gb());
  }
  return 0;
}

}  // namespace ufp4
