// Training-step benchmark: forward + backward + clipping + AdamW of a model at a fixed batch, timed
// per step with CUDA events (host clock on CPU) after warm-up steps, through the trainer's own
// train_step; then the plain-PyTorch peer of the same BF16 model (dense and MoE, eager and compiled)
// in the same call.
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/bench/bench.h"
#include "harness/bench/step_timing.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/report/report.h"
#include "harness/train/determinism.h"
#include "harness/train/step_graph.h"
#include "harness/train/train_device.h"
#include "harness/train/trainer.h"
#include "models/deterministic_attention.h"
#include "models/layers.h"
#include "models/model_config.h"
#include "models/moe.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

// A row of our timings: identity, median / mean / sd of the timed passes, tokens/s, peak memory.
StepBenchRow timed_row(const std::string& impl, const std::string& model, const std::string& recipe, int64_t batch, int64_t seq_len,
                       int steps, const std::vector<double>& ms, const torch::Device& device) {
  StepBenchRow r{impl, model, recipe, batch, seq_len, steps};  // in the order of StepBenchRow's fields
  const TimeStats st = time_stats(ms);
  r.step_ms = st.median;
  r.step_ms_mean = st.mean;
  r.step_ms_sd = st.sd;
  r.tokens_per_s = static_cast<double>(batch * seq_len) / (st.median * 1e-3);
  r.peak_memory_gb = peak_memory_gb(device);
  return r;
}

// The row's name for a set of fused kernels: all on "ufp4", all off "ufp4-libtorch-ops" (what the fused
// kernels buy together), one off "ufp4-without-fused-<op>" (what that one buys: leave-one-out).
std::string fused_impl(const FusedOps& f) {
  const std::vector<std::pair<const char*, bool>> ops = {{"rms-norm", f.rms_norm}, {"swiglu", f.swiglu}, {"rope", f.rope}, {"loss", f.cross_entropy},
                                                         {"moe-combine", f.moe_combine}};
  std::string off;
  int n_off = 0;
  for (const auto& op : ops)
    if (!op.second) { off = op.first; ++n_off; }
  if (n_off == 0) return "ufp4";
  if (n_off == static_cast<int>(ops.size())) return "ufp4-libtorch-ops";
  if (n_off == 1) return "ufp4-without-fused-" + off;
  throw Error("bench step: leave out one fused kernel or all of them");
}

// fused: which fused kernels run (fused_impl names the row).
// deterministic false: the row that shows what deterministic mode (the trainer's default) costs.
// graph false: the step launched kernel by kernel, not replayed as a CUDA graph (what the graph buys).
// batch_weights false: each linear quantizes its own weight (what models/weight_operands.h buys).
StepBenchRow bench_ours(const std::string& model, const std::string& recipe, const StepBenchOptions& o, const torch::Device& device,
                        const FusedOps& fused = FusedOps::all(true), bool deterministic = true, bool graph = true, bool batch_weights = true) {
  TimedModel m = make_timed_model(model, recipe, o.seq_len, deterministic, device, batch_weights);
  auto& [mc, adamw, ctx, net, opt] = m;
  net->set_fused_ops(fused);
  // Fixed random tokens: the step's cost does not depend on the text.
  torch::Tensor tokens = torch::randint(0, mc.vocab, {o.batch, o.seq_len + 1}, torch::TensorOptions().dtype(torch::kInt64)).to(device);
  double loss = 0;
  // As the trainer does: a CUDA graph where the model allows one (the first passes, warm-up, capture it).
  std::unique_ptr<StepGraph> step_graph;
  if (graph && StepGraph::obstacle(net, device, false).empty()) step_graph = std::make_unique<StepGraph>(net, *opt, 1, mc.seq_len, 1.0);
  const std::vector<double> ms = time_passes(device, o.warmup, o.steps, [&](int s) {
    ctx->step = s;
    loss = step_graph ? step_graph->step([&] { return tokens; }).loss : train_step(net, *opt, [&] { return tokens; }, 1, mc.seq_len, 1.0).loss;
  });
  if (step_graph) log_info("bench step: " + model + " " + ctx->recipe.name + ": CUDA graph " + step_graph->describe());
  std::string impl = fused_impl(fused);
  if (impl == "ufp4" && !deterministic) impl = "ufp4-nondeterministic";
  else if (impl == "ufp4" && !graph) impl = "ufp4-uncaptured";
  else if (impl == "ufp4" && !batch_weights) impl = "ufp4-per-layer-weights";
  StepBenchRow r = timed_row(impl, model, ctx->recipe.name, o.batch, o.seq_len, o.steps, ms, device);
  r.mfu = device.is_cuda() ? r.tokens_per_s * train_flops_per_token(mc) / peak_flops(device) : 0.0;
  r.loss = loss;
  return r;
}

// One routed MoE layer of `model` (layer 1, after the first dense layer) forward + backward on
// o.moe_layer_tokens tokens of random BF16 activations, no optimizer: the layer alone, at paper scale.
// MFU counts the active parameters: 6 x (router + (top-k + shared) experts' SwiGLU) FLOPs per token.
StepBenchRow bench_moe_layer(const std::string& model, const std::string& recipe, const StepBenchOptions& o, const torch::Device& device) {
  if (!model_config(model).is_moe()) throw Error("--moe-layers: " + model + " is not a MoE model");
  TimedMoeLayer m = make_timed_moe_layer(model, recipe, device);
  const auto act = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  const int64_t T = o.moe_layer_tokens;
  torch::Tensor x = (torch::randn({1, T, m.config.d_model}, torch::TensorOptions().device(device)) * 0.5).to(act).requires_grad_(true);
  torch::Tensor g = (torch::randn({1, T, m.config.d_model}, torch::TensorOptions().device(device)) * 1e-3).to(act);
  const std::vector<double> ms = time_passes(device, o.warmup, o.steps, [&](int s) { m.pass(x, g, s); });
  StepBenchRow r = timed_row("ufp4-moe-layer", model, m.ctx->recipe.name, 1, T, o.steps, ms, device);
  r.mfu = device.is_cuda() ? r.tokens_per_s * m.flops_per_token() / peak_flops(device) : 0.0;
  return r;
}

// The model's attention alone (models/layers.h grouped_causal_attention: RoPE'd q, the KV heads
// broadcast to the query heads, causal SDPA), forward + backward at the step's batch and sequence on
// random BF16 inputs in the layout the model gives it (heads inner: [B, S, heads, hd] memory, as the
// fused RoPE writes q, k and v and the output projection's gradient arrives), with or without
// deterministic mode, with the run's attention backward or the other one (other_backward): where
// deterministic mode's cost goes. MFU counts 7 x B x H x S^2 x hd FLOPs (two causal GEMMs forward,
// five backward).
StepBenchRow bench_attention(const std::string& model, const StepBenchOptions& o, const torch::Device& device, bool deterministic,
                             bool other_backward = false) {
  set_deterministic(deterministic);
  const bool own = o.own_attention_backward != other_backward;
  use_own_attention_backward(own);
  const ModelConfig mc = model_config(model);
  const int64_t B = o.batch, S = o.seq_len, H = mc.n_heads, KV = mc.n_kv_heads, hd = mc.head_dim();
  torch::manual_seed(1);
  const auto opt = torch::TensorOptions().device(device).dtype(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  auto heads_inner = [&](int64_t heads) { return torch::randn({B, S, heads, hd}, opt).transpose(1, 2); };
  torch::Tensor q = heads_inner(H).requires_grad_(true), k = heads_inner(KV).requires_grad_(true), v = heads_inner(KV).requires_grad_(true);
  torch::Tensor g = heads_inner(H);
  reset_peak_memory(device);
  const std::vector<double> ms = time_passes(device, o.warmup, o.steps, [&](int) {
    for (auto* t : {&q, &k, &v}) t->mutable_grad() = torch::Tensor();
    grouped_causal_attention(q, k, v).backward(g);
  });
  use_own_attention_backward(o.own_attention_backward);
  const std::string impl = !deterministic ? "attention-nondeterministic"
                           : !other_backward ? "attention"
                           : own            ? "attention-own-backward"
                                            : "attention-flash-backward";
  StepBenchRow r = timed_row(impl, model, "bf16", B, S, o.steps, ms, device);
  const double flops = 7.0 * static_cast<double>(B * H * hd) * static_cast<double>(S) * static_cast<double>(S);
  r.mfu = device.is_cuda() ? flops / (r.step_ms * 1e-3) / peak_flops(device) : 0.0;
  return r;
}

// harness/bench/reference_step.py: the same model (dense or MoE) in plain PyTorch, eager or compiled,
// with fused or foreach AdamW, in BF16 or with a 4-bit recipe as plain fake quantization; it writes its
// timings as TOML. nullopt when it failed. compile_mode: "" (eager), "default" or "reduce-overhead"
// (torch.compile with CUDA graphs).
std::optional<StepBenchRow> bench_reference(const std::string& model, const StepBenchOptions& o, const std::string& compile_mode,
                                            const char* optimizer, bool deterministic = false, const std::string& recipe = "bf16") {
  const bool compiled = !compile_mode.empty();
  const ModelConfig mc = model_config(model);
  const std::string out = "/tmp/ufp4-reference-step-" + std::to_string(::getpid()) + ".toml";
  char moe[256] = "";
  if (mc.is_moe())
    std::snprintf(moe, sizeof moe, " --experts %lld --top-k %lld --expert-ffn %lld --shared %lld --dense-layers %lld --aux-coeff %g",
                  static_cast<long long>(mc.n_experts), static_cast<long long>(mc.top_k), static_cast<long long>(mc.expert_hidden),
                  static_cast<long long>(mc.n_shared_experts), static_cast<long long>(mc.dense_layers), mc.aux_loss_coeff);
  char cmd[2048];
  std::snprintf(cmd, sizeof cmd,
                "%s %s/harness/bench/reference_step.py --d-model %lld --layers %lld --heads %lld --kv-heads %lld --ffn %lld --vocab %lld "
                "--seq %lld --batch %lld --warmup %d --steps %d --optimizer %s --norm-eps 1e-6 --rope-theta %g%s%s%s%s --recipe %s --out %s",
                o.python.c_str(), UFP4_SOURCE_DIR, static_cast<long long>(mc.d_model), static_cast<long long>(mc.n_layers),
                static_cast<long long>(mc.n_heads), static_cast<long long>(mc.n_kv_heads), static_cast<long long>(mc.ffn_hidden),
                static_cast<long long>(mc.vocab), static_cast<long long>(o.seq_len), static_cast<long long>(o.batch), o.warmup, o.steps,
                optimizer, mc.rope_theta, mc.tied_embeddings ? " --tied" : "", moe,
                compiled ? (" --compile --compile-mode " + compile_mode).c_str() : "", deterministic ? " --deterministic" : "", recipe.c_str(),
                out.c_str());
  const std::string impl = std::string(recipe == "bf16" ? "pytorch-" : "pytorch-fakequant-") +
                           (!compiled ? "eager-" : compile_mode == "default" ? "compiled-" : "compiled-cudagraphs-") + (deterministic ? "deterministic-" : "") +
                           optimizer;
  log_info("bench step: PyTorch reference " + model + " " + impl);
  const int rc = std::system(cmd);
  if (rc != 0 || !file_exists(out)) {
    log_warn("bench step: the PyTorch reference " + impl + " failed (exit " + std::to_string(rc) + "); it is left out");
    std::remove(out.c_str());
    return std::nullopt;
  }
  toml::table t = toml::parse_file(out);
  std::remove(out.c_str());
  StepBenchRow r{impl, model, recipe, o.batch, o.seq_len, o.steps};
  r.step_ms = t["step_ms_median"].value_or(0.0);
  r.step_ms_mean = t["step_ms_mean"].value_or(0.0);
  r.step_ms_sd = t["step_ms_sd"].value_or(0.0);
  r.tokens_per_s = static_cast<double>(o.batch * o.seq_len) / (r.step_ms * 1e-3);
  r.mfu = r.tokens_per_s * train_flops_per_token(mc) / peak_flops(torch::Device(torch::kCUDA));
  r.peak_memory_gb = t["peak_memory_gb"].value_or(0.0);
  r.loss = t["loss"].value_or(0.0);
  r.note = "torch " + t["torch"].value_or(std::string("?")) + ", python " + t["python"].value_or(std::string("?")) + ", " +
           t["device"].value_or(std::string("?")) + ", grouped-query attention: " +
           (t["gqa"].value_or(std::string("repeat")) == "sdpa" ? "SDPA's enable_gqa" : "K and V repeated") +
           (t["deterministic"].value_or(false) ? ", deterministic algorithms" : "");
  return r;
}

// The fake-quant peer's own check (reference_step.py --self-test: its rounding against the grids' level
// tables, its experts' WGRAD against an expert-by-expert loop), once a command: a peer that rounds wrongly
// would time other arithmetic than the recipe's, so its rows are left out when the check fails.
bool fakequant_peer_checked(const StepBenchOptions& o) {
  static const bool ok = [&] {
    const std::string cmd = o.python + " " + UFP4_SOURCE_DIR + "/harness/bench/reference_step.py --self-test";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) log_warn("bench step: the fake-quant peer's self-test failed (exit " + std::to_string(rc) + "); its rows are left out");
    return rc == 0;
  }();
  return ok;
}

// "model" or "model:seq" (a sequence length of its own, e.g. the small proxies at 1024): the model's
// name and the options it runs with.
std::pair<std::string, StepBenchOptions> model_options(const std::string& entry, const StepBenchOptions& o) {
  StepBenchOptions om = o;
  const auto colon = entry.find(':');
  if (colon == std::string::npos) return {entry, om};
  const std::string seq = entry.substr(colon + 1);
  char* end = nullptr;
  om.seq_len = std::strtoll(seq.c_str(), &end, 10);
  if (seq.empty() || *end || om.seq_len < 2) throw Error("--models: '" + entry + "': the sequence after ':' must be an integer >= 2");
  return {entry.substr(0, colon), om};
}

}  // namespace

std::vector<StepBenchRow> run_step_benchmarks(const StepBenchOptions& o) {
  const torch::Device device = pick_device(o.device);
  if (o.batch < 1 || o.seq_len < 2 || o.steps < 1 || o.warmup < 0) throw Error("bench step: batch, seq and steps must be positive");
  // Which plain-PyTorch peers run (after ours), checked before anything is timed.
  bool eager = false, compiled = false, deterministic = false, fakequant = false;
  for (const auto& part : o.reference) {
    if (part == "eager") eager = true;
    else if (part == "fakequant") fakequant = true;
    else if (part == "compiled") compiled = true;
    else if (part == "deterministic") deterministic = true;
    else if (part != "none")
      throw Error("--reference: '" + part + "' is not allowed (allowed: a comma list of fakequant, eager, compiled, deterministic; or none)");
  }
  // The switch is process-wide (the CLI also runs inside the tests' process): set for these rows, restored after.
  const bool own_before = own_attention_backward_enabled();
  use_own_attention_backward(o.own_attention_backward);
  std::vector<StepBenchRow> rows;
  auto report = [&](const StepBenchRow& r) {
    char line[256];
    std::snprintf(line, sizeof line, "bench step: %-10s %-24s %-14s %8.2f ms  %9.0f tok/s  MFU %5.1f%%  peak %.1f GB", r.model.c_str(),
                  r.impl.c_str(), r.recipe.c_str(), r.step_ms, r.tokens_per_s, 100 * r.mfu, r.peak_memory_gb);
    log_info(line);
    rows.push_back(r);
    if (o.on_row) o.on_row(rows);
  };
  for (size_t i = 0; i < o.models.size(); ++i) {
    const auto [model, om] = model_options(o.models[i], o);
    std::vector<std::string> recipes = o.recipes;
    if (i == 0) recipes.insert(recipes.end(), o.extra_recipes.begin(), o.extra_recipes.end());
    for (const auto& rc : recipes) report(bench_ours(model, rc, om, device));
    // What the CUDA graph buys: the bf16 and ufp4 recipes launched kernel by kernel.
    if (device.is_cuda())
      for (const std::string rc : {"bf16", "ufp4"})
        if (std::find(recipes.begin(), recipes.end(), rc) != recipes.end())
          report(bench_ours(model, rc, om, device, FusedOps::all(true), true, false));
    // What one launch for every weight's operands buys on the first model: the ufp4 recipe without it.
    if (i == 0 && device.is_cuda() && std::find(recipes.begin(), recipes.end(), "ufp4") != recipes.end())
      report(bench_ours(model, "ufp4", om, device, FusedOps::all(true), true, true, false));
    // What the fused kernels buy on the first model: all of them, then each alone (leave-one-out).
    if (i == 0 && device.is_cuda()) {
      report(bench_ours(model, "bf16", om, device, FusedOps::all(false)));
      for (bool FusedOps::*op : {&FusedOps::rms_norm, &FusedOps::swiglu, &FusedOps::rope, &FusedOps::cross_entropy, &FusedOps::moe_combine}) {
        if (op == &FusedOps::moe_combine && model_config(model).n_experts == 0) continue;  // dense: nothing to leave out
        FusedOps f;
        f.*op = false;
        report(bench_ours(model, "bf16", om, device, f));
      }
    }
    // Deterministic mode's cost, measured in the same process: the bf16 and ufp4 recipes again without it.
    if (o.nondeterministic && device.is_cuda()) {
      for (const std::string rc : {"bf16", "ufp4"})
        if (std::find(recipes.begin(), recipes.end(), rc) != recipes.end()) report(bench_ours(model, rc, om, device, FusedOps::all(true), false));
      // Where that cost goes: the model's attention alone, with and without deterministic mode.
      for (const bool det : {true, false}) report(bench_attention(model, om, device, det));
      // Deterministic mode's other backward (ours or flash's, models/deterministic_attention.h), alone and in the step.
      report(bench_attention(model, om, device, true, true));
      use_own_attention_backward(!o.own_attention_backward);
      StepBenchRow other = bench_ours(model, "bf16", om, device);
      use_own_attention_backward(o.own_attention_backward);
      other.impl = o.own_attention_backward ? "ufp4-flash-attention-backward" : "ufp4-own-attention-backward";
      report(other);
    }
  }
  // One MoE layer at paper scale, per recipe.
  for (const auto& mname : o.moe_layers)
    for (const auto& rc : o.recipes) report(bench_moe_layer(mname, rc, o, device));
  set_deterministic(true);
  // The plain-PyTorch peers of every model of --models, as --reference asks: eager (fused and foreach
  // AdamW; MoE fused only) and compiled (fused AdamW; torch.compile's default mode and reduce-overhead,
  // which adds CUDA graphs); deterministic: the compiled ones again in deterministic mode, the
  // like-for-like peers of our deterministic step.
  for (const auto& entry : o.models) {
    const auto [mname, om] = model_options(entry, o);
    // The fake-quant peers of the 4-bit recipes of --recipes (reference_step.py --recipe): eager and
    // compiled (torch.compile's default mode), fused AdamW, as a researcher would time them.
    for (const std::string rc : {"e2m1_ref", "ufp4"}) {
      if (!fakequant || std::find(o.recipes.begin(), o.recipes.end(), rc) == o.recipes.end() || !fakequant_peer_checked(o)) continue;
      for (const char* mode : {"", "default"})
        if (auto r = bench_reference(mname, om, mode, "fused", false, rc)) report(*r);
    }
    struct Run {
      std::string mode;
      const char* optimizer;
      bool deterministic;
    };
    std::vector<Run> runs;
    if (eager) runs.push_back({"", "fused", false});
    if (eager && !model_config(mname).is_moe()) runs.push_back({"", "foreach", false});
    for (const bool det : {false, true})
      if (det ? deterministic : compiled)
        for (const char* mode : {"default", "reduce-overhead"}) runs.push_back({mode, "fused", det});
    for (const auto& run : runs)
      if (auto r = bench_reference(mname, om, run.mode, run.optimizer, run.deterministic)) report(*r);
  }
  use_own_attention_backward(own_before);
  return rows;
}

void write_step_bench(const std::string& path, const std::vector<StepBenchRow>& rows, const StepBenchOptions& o) {
  H5Writer w(path);
  write_bench_header(w, std::string("training-step benchmark: forward + backward + clipping + AdamW, CUDA events per step after warm-up"));
  w.attr("warmup_steps", static_cast<int64_t>(o.warmup));
  w.attr("attention_backward", std::string(o.own_attention_backward ? "own" : "flash"));
  w.attr("mfu_peak_flops", peak_flops(torch::Device(torch::kCUDA)));
  write_step_rows(w, rows);
  w.commit();
}

}  // namespace ufp4
