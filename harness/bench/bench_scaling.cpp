// Data-parallel scaling benchmark: for each world size N, N ranks on this machine (the local launcher,
// as `ufp4 run --nproc-per-node N` starts them) train each model and recipe at a fixed per-GPU batch
// through the engine's own DataParallel step (bucketed collectives overlapped with backward, ZeRO-1);
// N = 1 is one process without data parallelism, as `ufp4 run` trains on one GPU (CUDA graph where
// the trainer would use one). Each rank times its steps with CUDA events after warm-up and writes its
// figures to a file of its own; the launcher merges them: the world's step is its slowest rank's
// median, its memory its largest rank's peak, beside the plan's estimate (data_parallel_memory_gb).
#include <toml++/toml.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/text.h"
#include "harness/bench/bench.h"
#include "harness/bench/step_timing.h"
#include "harness/dist/launch_env.h"
#include "harness/dist/local_launch.h"
#include "harness/dist/process_groups.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/plan/plan_estimates.h"
#include "harness/train/data_parallel.h"
#include "harness/train/row_exchange_c10d.h"
#include "harness/train/determinism.h"
#include "harness/train/step_graph.h"
#include "harness/train/train_step.h"
#include "harness/train/train_device.h"
#include "harness/train/trainer.h"
#include "models/model_config.h"
#include "models/quant_ops.h"

namespace ufp4 {

namespace {

// One rank's figures for one model and recipe.
struct RankFigures {
  double step_ms = 0, step_ms_sd = 0, peak_memory_gb = 0, loss = 0;
  std::string cuda_graph;
};

// The ranks the model's experts split over at this world size (1: none; a dense model, or no --ep).
int expert_ranks(const std::string& model, const ScalingBenchOptions& o, int world) {
  const ModelConfig mc = model_config(model);
  const int ep = mc.is_moe() ? std::gcd(o.ep, world) : 1;
  if (mc.n_experts % ep != 0 && mc.is_moe())
    throw Error("bench scaling: --ep " + std::to_string(o.ep) + ": " + model + "'s " + std::to_string(mc.n_experts) + " experts do not split over " +
                std::to_string(ep) + " ranks (allowed: a divisor of the experts)");
  return ep;
}

// This rank's expert-parallel exchange for the model at this world size (nullptr: none).
std::shared_ptr<RowExchange> expert_exchange(const std::string& model, const ScalingBenchOptions& o, ProcessGroups* groups) {
  const int ep = expert_ranks(model, o, groups ? groups->data->size() : 1);
  return ep > 1 ? row_exchange(groups->expert_groups(ep).experts) : nullptr;
}

RankFigures time_model(const std::string& model, const std::string& recipe, const ScalingBenchOptions& o, const torch::Device& device,
                       ProcessGroups* groups) {
  RankFigures f;
  {
    const int ep = expert_ranks(model, o, groups ? groups->data->size() : 1);
    const ExpertGroups eg = ep > 1 ? groups->expert_groups(ep) : ExpertGroups{};
    TimedModel m = make_timed_model(model, recipe, o.seq_len, /*deterministic=*/true, device, /*batch_weights=*/true, expert_exchange(model, o, groups));
    auto& [mc, adamw, ctx, net, opt] = m;
    // Fixed random tokens, each rank its own: the step's cost does not depend on the text.
    const int rank = groups ? groups->data->rank() : 0, world = groups ? groups->data->size() : 1;
    torch::manual_seed(1000 + static_cast<uint64_t>(rank));
    const torch::Tensor tokens =
        torch::randint(0, mc.vocab, {o.batch, o.seq_len + 1}, torch::TensorOptions().dtype(torch::kInt64)).to(device);
    int64_t next = 0;
    const auto next_batch = [&] {
      const torch::Tensor b = tokens.narrow(0, next, o.micro_batch);
      next = (next + o.micro_batch) % o.batch;
      return b;
    };
    const int64_t accum = o.batch / o.micro_batch;
    std::unique_ptr<DataParallel> dp;
    std::unique_ptr<StepGraph> graph;
    if (groups) {
      DataParallelOptions dpo;
      dpo.bucket_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
      dp = std::make_unique<DataParallel>(net, *opt, gradient_groups(net, groups->data, eg.experts_data), dpo);
    } else if (StepGraph::obstacle(net, device, false).empty()) {
      graph = std::make_unique<StepGraph>(net, *opt, accum, mc.seq_len, 1.0);
    }
    const std::vector<double> ms = time_passes(device, o.warmup, o.steps, [&](int s) {
      ctx->step = s;
      f.loss = dp      ? dp->step(next_batch, accum, accum * world, mc.seq_len, 1.0, false).loss
               : graph ? graph->step(next_batch).loss
                       : train_step(net, *opt, next_batch, accum, mc.seq_len, 1.0).loss;
    });
    const TimeStats st = time_stats(ms);
    f.step_ms = st.median;
    f.step_ms_sd = st.sd;
    f.peak_memory_gb = peak_memory_gb(device);
    f.cuda_graph = graph ? graph->describe() : dp ? "off: data parallel" : "off";
    if (groups) groups->data->barrier();  // every rank done before any frees the model
  }
  reset_peak_memory(device);
  return f;
}

// One routed MoE layer of `model` (layer 1), its experts split over the ranks' expert groups, forward
// and backward on batch x seq random BF16 rows a rank, no optimizer (bench_step.cpp's MoE layer, over ranks).
RankFigures time_moe_layer(const std::string& model, const std::string& recipe, const ScalingBenchOptions& o, const torch::Device& device,
                           ProcessGroups* groups) {
  RankFigures f;
  {
    if (!model_config(model).is_moe()) throw Error("bench scaling --moe-layer: " + model + " is not a MoE model");
    const int rank = groups ? groups->data->rank() : 0;
    TimedMoeLayer m = make_timed_moe_layer(model, recipe, device, expert_exchange(model, o, groups));
    const auto act = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
    torch::manual_seed(1000 + static_cast<uint64_t>(rank));  // each rank its own rows
    const torch::TensorOptions on = torch::TensorOptions().device(device);
    torch::Tensor x = (torch::randn({o.batch, o.seq_len, m.config.d_model}, on) * 0.5).to(act).requires_grad_(true);
    const torch::Tensor g = (torch::randn({o.batch, o.seq_len, m.config.d_model}, on) * 1e-3).to(act);
    const std::vector<double> ms = time_passes(device, o.warmup, o.steps, [&](int s) { m.pass(x, g, s); });
    const TimeStats st = time_stats(ms);
    f.step_ms = st.median;
    f.step_ms_sd = st.sd;
    f.peak_memory_gb = peak_memory_gb(device);
    f.cuda_graph = "off: one layer";
    if (groups) groups->data->barrier();
  }
  reset_peak_memory(device);
  return f;
}

// A launched rank (or the one process of N = 1): every model and recipe, its figures to `out`.
void run_rank(const ScalingBenchOptions& o, std::string out) {
  const LaunchEnv env = read_launch_env();
  if (const auto at = out.find("@RANK@"); at != std::string::npos) out.replace(at, 6, std::to_string(env.rank));
  const torch::Device device = pick_device(o.device);
  if (device.is_cuda()) use_local_gpu(env.local_rank);
  if (env.rank != 0) set_log_level(LogLevel::kQuiet);
  std::unique_ptr<ProcessGroups> groups;
  if (env.world_size > 1) groups = std::make_unique<ProcessGroups>(env, DistOptions{o.backend, std::chrono::seconds(900)}, device.is_cuda());
  std::ostringstream t;
  t.precision(17);
  t << "rank = " << env.rank << "\nworld_size = " << env.world_size << "\nbackend = \"" << (groups ? groups->backend() : "none") << "\"\n";
  for (const auto& model : o.models)
    for (const auto& recipe : o.recipes) {
      // Said before and after, with the wall time of the whole (set-up included): a configuration that a
      // call's limit ends shows where it was, and where a device call's time goes.
      log_info("bench scaling: " + std::to_string(env.world_size) + " rank(s) " + model + " " + recipe + ": setting up");
      const auto started = std::chrono::steady_clock::now();
      const RankFigures f = o.moe_layer ? time_moe_layer(model, recipe, o, device, groups.get()) : time_model(model, recipe, o, device, groups.get());
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      char line[256];
      std::snprintf(line, sizeof line, "bench scaling: %d rank(s) %-11s %-5s rank 0: %8.2f ms a step, peak %.1f GB (%.1f s with set-up)", env.world_size,
                    model.c_str(), recipe.c_str(), f.step_ms, f.peak_memory_gb, wall);
      log_info(line);
      t << "\n[[row]]\nmodel = \"" << model << "\"\nrecipe = \"" << recipe << "\"\nstep_ms = " << f.step_ms << "\nstep_ms_sd = " << f.step_ms_sd
        << "\npeak_memory_gb = " << f.peak_memory_gb << "\nloss = " << f.loss << "\ncuda_graph = \"" << f.cuda_graph << "\"\n";
    }
  write_text_atomically(out, t.str());
}

}  // namespace

std::vector<ScalingBenchRow> run_scaling_benchmarks(const ScalingBenchOptions& o) {
  if (!o.rank_out.empty()) {
    run_rank(o, o.rank_out);
    return {};
  }
  if (o.batch < 1 || o.micro_batch < 1 || o.batch % o.micro_batch != 0 || o.seq_len < 2 || o.steps < 1 || o.warmup < 0)
    throw Error("bench scaling: --batch must be a positive multiple of --micro-batch; --seq >= 2, --steps >= 1, --warmup >= 0");
  const torch::Device device = pick_device(o.device);
  const int visible = device.is_cuda() ? static_cast<int>(torch::cuda::device_count()) : 0;
  for (const int n : o.gpus) {
    if (n < 1) throw Error("bench scaling: --gpus: " + std::to_string(n) + " is not a world size (allowed: 1 or more)");
    if (device.is_cuda() && n > visible)
      throw Error("bench scaling: --gpus " + std::to_string(n) + ": this machine shows " + std::to_string(visible) + " GPU(s)");
  }
  for (const auto& m : o.models) model_config(m);
  for (const auto& r : o.recipes) Recipe::load(r);
  const std::string tmp = "/tmp/ufp4-bench-scaling-" + std::to_string(::getpid());
  make_dirs(tmp);
  std::vector<ScalingBenchRow> rows;
  for (const int n : o.gpus) {
    std::vector<std::string> argv = {executable_dir() + "/ufp4", "bench", "scaling", "--models", join(o.models, ","), "--recipes", join(o.recipes, ","),
                                     "--batch", std::to_string(o.batch), "--micro-batch", std::to_string(o.micro_batch),
                                     "--seq", std::to_string(o.seq_len), "--warmup", std::to_string(o.warmup), "--steps", std::to_string(o.steps),
                                     "--device", o.device, "--backend", o.backend, "--bucket-mb", std::to_string(o.bucket_mb),
                                     "--ep", std::to_string(o.ep),
                                     "--rank-out", tmp + "/world" + std::to_string(n) + "-rank@RANK@.toml"};
    if (o.moe_layer) argv.push_back("--moe-layer");
    log_info("bench scaling: " + std::to_string(n) + " rank(s)");
    const int rc = launch_local_ranks(n, argv, std::chrono::seconds(30));
    if (rc != 0) throw RuntimeError("bench scaling: the " + std::to_string(n) + "-rank run failed (exit " + std::to_string(rc) + ")");
    std::vector<toml::table> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(toml::parse_file(tmp + "/world" + std::to_string(n) + "-rank" + std::to_string(r) + ".toml"));
    const std::string backend = ranks[0]["backend"].value_or(std::string("?"));
    size_t i = 0;
    for (const auto& model : o.models)
      for (const auto& recipe : o.recipes) {
        ScalingBenchRow row;
        row.model = model;
        row.recipe = recipe;
        row.gpus = n;
        row.backend = backend;
        row.sharding = n > 1 && !o.moe_layer ? "zero1" : "none";
        const int ep = expert_ranks(model, o, n);
        row.layout = n == 1 ? "1 GPU" : ep > 1 ? "EP " + std::to_string(ep) + " x DP " + std::to_string(n / ep) : "DP " + std::to_string(n);
        row.unit = o.moe_layer ? "MoE layer" : "step";
        row.batch = o.batch;
        row.micro_batch = o.micro_batch;
        row.seq_len = o.seq_len;
        row.steps = o.steps;
        for (size_t r = 0; r < ranks.size(); ++r) {
          const toml::table& f = *ranks[r]["row"].as_array()->at(i).as_table();
          const double ms = f["step_ms"].value_or(0.0), mem = f["peak_memory_gb"].value_or(0.0);
          if (ms >= row.step_ms) {
            row.step_ms = ms;
            row.step_ms_sd = f["step_ms_sd"].value_or(0.0);
          }
          row.peak_memory_gb = r == 0 ? mem : std::max(row.peak_memory_gb, mem);
          row.peak_memory_gb_min = r == 0 ? mem : std::min(row.peak_memory_gb_min, mem);
          if (r == 0) {
            row.loss = f["loss"].value_or(0.0);
            row.cuda_graph = f["cuda_graph"].value_or(std::string());
          }
        }
        const ModelConfig mc = [&] { ModelConfig c = model_config(model); c.seq_len = o.seq_len; return c; }();
        row.tokens_per_s = static_cast<double>(n * o.batch * o.seq_len) / (row.step_ms * 1e-3);
        const double flops = o.moe_layer ? TimedMoeLayer{mc, nullptr, nullptr}.flops_per_token() : train_flops_per_token(mc);
        row.mfu = device.is_cuda() ? row.tokens_per_s * flops / (peak_flops(device) * n) : 0.0;
        row.plan_memory_gb = o.moe_layer ? NAN : expert_parallel_memory_gb(mc, o.micro_batch, n, ep);
        char line[256];
        std::snprintf(line, sizeof line, "bench scaling: %d rank(s) %-11s %-5s %-12s %8.2f ms a %s  %10.0f tok/s  MFU %5.1f%%  peak %.1f GB a GPU (plan %.1f)",
                      n, model.c_str(), recipe.c_str(), row.layout.c_str(), row.step_ms, o.moe_layer ? "layer pass" : "step", row.tokens_per_s, 100 * row.mfu,
                      row.peak_memory_gb, row.plan_memory_gb);
        log_info(line);
        rows.push_back(row);
        ++i;
      }
    if (o.on_world) o.on_world(rows);
  }
  remove_tree(tmp);
  return rows;
}

std::string nccl_nvls_setting() {
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  return nvls ? nvls : "(unset)";
}

void write_scaling_bench(const std::string& path, const std::vector<ScalingBenchRow>& rows, const ScalingBenchOptions& o) {
  H5Writer w(path);
  write_bench_header(w, std::string("data-parallel scaling: N ranks on one machine, fixed per-GPU batch, the engine's DataParallel step (ZeRO-1, "
                             "bucketed collectives overlapped with backward); N = 1 one process without data parallelism; CUDA events "
                             "per step after warm-up; a world's step is its slowest rank's median") +
                         (o.ep > 1 ? "; MoE models' experts split over gcd(ep, N) ranks (expert parallelism)" : "") +
                         (o.moe_layer ? "; timed: one routed MoE layer's forward and backward, no optimizer" : ""));
  w.attr("warmup_steps", static_cast<int64_t>(o.warmup));
  w.attr("expert_parallel", static_cast<int64_t>(o.ep));
  w.attr("bucket_mb", o.bucket_mb);
  w.attr("nccl_nvls_enable", nccl_nvls_setting());
  w.attr("mfu_peak_flops", peak_flops(pick_device(o.device)));
  write_scaling_rows(w, rows);
  w.commit();
}

}  // namespace ufp4
