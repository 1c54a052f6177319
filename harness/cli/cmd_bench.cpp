// `ufp4 bench`: the kernel suite (Google Benchmark), the training-step benchmark and the data-parallel
// scaling benchmark, written to HDF5 under --out-dir (kernels.h5 + Google Benchmark's JSON, step.h5,
// scaling.h5) and rendered by `ufp4 report bench`.
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/bench/bench.h"
#include "harness/io/array_io.h"
#include "harness/io/bench_files.h"
#include "harness/io/provenance.h"
#include "models/quant_ops.h"
#include "harness/cli/cli.h"

namespace ufp4 {

namespace {

std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ','))
    if (!t.empty()) v.push_back(t);
  return v;
}

std::string fmt_number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

// --append: the rows already in `file`, which must have been made at this commit on this device and with
// this command's options (the file carries one provenance and one set of them); none without --append or
// without the file. A difference is refused, naming the file's value and this command's.
std::vector<ScalingBenchRow> rows_to_append_to(const std::string& file, bool append, const ScalingBenchOptions& co) {
  if (!append || !file_exists(file)) return {};
  auto was = read_h5_string_attrs(file);
  if (!was.count("git_commit") || !was.count("device"))
    throw Error("bench: --append: " + file + " has no git_commit and device attributes (not a file of bench scaling); move it away");
  auto now = provenance();
  auto refuse = [&](const std::string& what, const std::string& there, const std::string& here) {
    throw Error("bench: --append: " + file + " was made with " + what + " " + there + "; this command has " + here +
                " (allowed: the same commit, device and options; move the file away to start another)");
  };
  if (was["git_commit"] != now["git_commit"]) refuse("commit", was["git_commit"], now["git_commit"]);
  if (was["device"] != now["device"]) refuse("device", was["device"], now["device"]);
  if (was["nccl_nvls_enable"] != nccl_nvls_setting()) refuse("NCCL_NVLS_ENABLE", was["nccl_nvls_enable"], nccl_nvls_setting());
  auto number = read_h5_numeric_attrs(file);
  auto same = [&](const std::string& what, double there, double here) {
    if (there != here) refuse(what, fmt_number(there), fmt_number(here));
  };
  same("warmup steps", number["warmup_steps"], co.warmup);
  same("--ep", number["expert_parallel"], co.ep);
  same("--bucket-mb", number["bucket_mb"], co.bucket_mb);
  const std::vector<ScalingBenchRow> rows = read_scaling_rows(file);
  for (const auto& r : rows) {
    same("--batch", static_cast<double>(r.batch), static_cast<double>(co.batch));
    same("--micro-batch", static_cast<double>(r.micro_batch), static_cast<double>(co.micro_batch));
    same("--seq", static_cast<double>(r.seq_len), static_cast<double>(co.seq_len));
    same("--steps", static_cast<double>(r.steps), static_cast<double>(co.steps));
  }
  return rows;
}

// `before`'s rows that `after` does not measure again (model, recipe, world size, unit), then `after`'s.
std::vector<ScalingBenchRow> appended(const std::vector<ScalingBenchRow>& before, const std::vector<ScalingBenchRow>& after) {
  auto key = [](const ScalingBenchRow& r) { return r.model + "|" + r.recipe + "|" + std::to_string(r.gpus) + "|" + r.unit; };
  std::set<std::string> again;
  for (const auto& r : after) again.insert(key(r));
  std::vector<ScalingBenchRow> out;
  for (const auto& r : before)
    if (!again.count(key(r))) out.push_back(r);
  out.insert(out.end(), after.begin(), after.end());
  return out;
}

// `bench scaling` once its options are read: the launcher (or a rank, which writes only its figures).
// Expert parallelism's rows go to files of their own (the step's, one MoE layer's): scaling.h5 stays the
// data-parallel measurement. Written after each world size, so a command cut short keeps what it finished
// (without --append that replaces an earlier file of the same name, as a finished command does).
int run_scaling_command(ScalingBenchOptions& co, const std::string& out_dir, bool append) {
  const std::string file = out_dir + (co.moe_layer ? "/expert_parallel_layer.h5" : co.ep > 1 ? "/expert_parallel.h5" : "/scaling.h5");
  const std::vector<ScalingBenchRow> before = co.rank_out.empty() ? rows_to_append_to(file, append, co) : std::vector<ScalingBenchRow>{};
  if (co.rank_out.empty())
    co.on_world = [&](const std::vector<ScalingBenchRow>& so_far) {
      make_dirs(out_dir);
      write_scaling_bench(file, appended(before, so_far), co);
    };
  const auto rows = run_scaling_benchmarks(co);
  if (!co.rank_out.empty()) return 0;  // a rank: the launcher writes the file
  log_info("bench scaling: " + std::to_string(rows.size()) + " rows" + (before.empty() ? "" : ", " + std::to_string(appended(before, rows).size()) + " in the file") +
           " -> " + file);
  return 0;
}

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  std::string what, out_dir, filter, models, recipes, extra, device, reference, moe_layers, gpus, attention_backward;
  KernelBenchOptions ko;
  StepBenchOptions so;
  ScalingBenchOptions co;
  po::options_description d("options");
  d.add_options()
      ("what", po::value(&what), "kernels | step | all | scaling")
      ("out-dir", po::value(&out_dir)->default_value("results/bench"), "where kernels.h5, kernels.json, step.h5 and scaling.h5 go")
      ("filter", po::value(&filter)->default_value(""), "kernels: Google Benchmark regex over names (e.g. 'fused/e2m1')")
      ("iterations", po::value(&ko.iterations)->default_value(20), "kernels: timed launches per repetition")
      ("repetitions", po::value(&ko.repetitions)->default_value(5), "kernels: repetitions (the median is reported)")
      ("quick", po::bool_switch(&ko.quick), "kernels: two shapes only (smoke test)")
      ("models", po::value(&models),
       "step: comma list of models (default dense-20m:1024,dense-35m:1024,dense-113m,moe-81m); model:seq gives one its own sequence "
       "length (e.g. dense-20m:1024); scaling: comma list of models (default dense-113m,dense-1.5b)")
      ("recipes", po::value(&recipes), "step: comma list of recipes (default bf16,e2m1_ref,ufp4); scaling: the same (default bf16,ufp4)")
      ("extra-recipes", po::value(&extra)->default_value(""), "step: more recipes on the first model (leave-one-out diagnostics)")
      ("batch", po::value(&so.batch)->default_value(16), "step: sequences per step; scaling: sequences a GPU a step")
      ("micro-batch", po::value(&co.micro_batch)->default_value(8), "scaling: sequences a micro-batch (the batch in batch / micro-batch passes)")
      ("gpus", po::value(&gpus)->default_value("1,2"), "scaling: comma list of world sizes (ranks on this machine, one a GPU)")
      ("backend", po::value(&co.backend)->default_value("auto"), "scaling: auto (NCCL on GPUs, Gloo on CPU) | nccl | gloo")
      ("bucket-mb", po::value(&co.bucket_mb)->default_value(25), "scaling: gradient bucket size, MiB")
      ("ep", po::value(&co.ep)->default_value(1), "scaling: expert parallelism for MoE models, the experts split over gcd(ep, N) of N ranks (ufp4 run --ep)")
      ("moe-layer", po::bool_switch(&co.moe_layer), "scaling: time one routed MoE layer (forward and backward, batch x seq tokens a rank) instead of the training step")
      ("rank-out", po::value(&co.rank_out), "scaling: (set by the launcher for its ranks) where a rank writes its figures")
      ("append", "scaling: add to the rows already in the file (made at this commit on this device), replacing those of the same "
                 "model, recipe, world size and unit: one command a recipe, each kept as it finishes")
      ("seq", po::value(&so.seq_len)->default_value(2048), "step: tokens per sequence")
      ("warmup", po::value(&so.warmup)->default_value(3), "step: untimed steps first")
      ("steps", po::value(&so.steps)->default_value(10), "step: timed steps")
      ("device", po::value(&device)->default_value("auto"), "step: auto | cpu | cuda")
      ("reference", po::value(&reference)->default_value("fakequant,eager,compiled,deterministic"),
       "step: comma list of fakequant, eager, compiled, deterministic (the plain-PyTorch peer, harness/bench/reference_step.py; "
       "fakequant: the 4-bit recipes of --recipes as plain fake quantization, eager and compiled; deterministic: compiled "
       "in deterministic mode, as our step runs), or none")
      ("python", po::value(&so.python)->default_value("python3"), "step: the Python that has torch")
      ("no-nondeterministic", "step: skip the rows that time bf16 and ufp4 without deterministic mode")
      ("attention-backward", po::value(&attention_backward)->default_value("own"),
       "step: deterministic mode's attention backward in every row, own (ours, the trainer's default) | flash; the other "
       "is timed in rows of its own")
      ("moe-layers", po::value(&moe_layers)->default_value("auto"),
       "step: comma list of MoE models whose routed layer is timed alone (forward + backward), none, or auto (moe-7.9b on a GPU)")
      ("moe-layer-tokens", po::value(&so.moe_layer_tokens)->default_value(16384), "step: tokens through that layer");
  po::positional_options_description pos;
  pos.add("what", 1);
  auto vm = parse_command("bench", "kernels|step|all|scaling [--out-dir DIR] [options]", d, args, &pos);
  if (!vm) return 0;
  so.nondeterministic = !vm->count("no-nondeterministic");
  if (attention_backward != "flash" && attention_backward != "own")
    throw Error("bench: --attention-backward: '" + attention_backward + "' is not allowed (allowed: flash, own)");
  so.own_attention_backward = attention_backward == "own";
  if (what != "kernels" && what != "step" && what != "all" && what != "scaling")
    throw Error("bench: '" + what + "' is not a benchmark (allowed: kernels, step, all, scaling)");
  if (what == "scaling") {
    co.models = comma_list(vm->count("models") ? models : "dense-113m,dense-1.5b");
    co.recipes = comma_list(vm->count("recipes") ? recipes : "bf16,ufp4");
    co.gpus.clear();
    for (const auto& g : comma_list(gpus)) {
      char* end = nullptr;
      const long v = std::strtol(g.c_str(), &end, 10);
      if (*end || v < 1) throw Error("bench: --gpus: '" + g + "' is not a world size (allowed: integers >= 1)");
      co.gpus.push_back(static_cast<int>(v));
    }
    co.batch = so.batch;
    co.seq_len = so.seq_len;
    co.warmup = so.warmup;
    co.steps = so.steps;
    co.device = device;
    if (co.backend != "auto" && co.backend != "nccl" && co.backend != "gloo")
      throw Error("bench: --backend: '" + co.backend + "' is not allowed (allowed: auto, nccl, gloo)");
    if (!(co.bucket_mb > 0) || co.ep < 1) throw Error("bench: --bucket-mb must be > 0 and --ep >= 1");
    return run_scaling_command(co, out_dir, vm->count("append") > 0);
  }
  if (!vm->count("models")) models = "dense-20m:1024,dense-35m:1024,dense-113m,moe-81m";
  if (!vm->count("recipes")) recipes = "bf16,e2m1_ref,ufp4";
  if (ko.iterations < 1 || ko.repetitions < 1) throw Error("bench: --iterations and --repetitions must be >= 1");
  so.models = comma_list(models);
  so.recipes = comma_list(recipes);
  so.extra_recipes = comma_list(extra);
  so.device = device;
  so.reference = comma_list(reference);
  if (moe_layers == "auto") so.moe_layers = pick_device(device).is_cuda() ? std::vector<std::string>{"moe-7.9b"} : std::vector<std::string>{};
  else if (moe_layers != "none") so.moe_layers = comma_list(moe_layers);
  if (so.moe_layer_tokens < 1) throw Error("bench: --moe-layer-tokens must be >= 1");
  ko.filter = filter;
  make_dirs(out_dir);
  if (what == "kernels" || what == "all") {
    ko.json_out = out_dir + "/kernels.json";
    const auto rows = run_kernel_benchmarks(ko);
    write_kernel_bench(out_dir + "/kernels.h5", rows, ko);
    log_info("bench kernels: " + std::to_string(rows.size()) + " benchmarks -> " + out_dir + "/kernels.h5");
  }
  if (what == "step" || what == "all") {
    // step.h5 rewritten after every row, so that a command stopped by a time limit keeps what it measured.
    so.on_row = [&](const std::vector<StepBenchRow>& so_far) { write_step_bench(out_dir + "/step.h5", so_far, so); };
    const auto rows = run_step_benchmarks(so);
    write_step_bench(out_dir + "/step.h5", rows, so);
    log_info("bench step: " + std::to_string(rows.size()) + " rows -> " + out_dir + "/step.h5");
  }
  return 0;
}

}  // namespace ufp4
