// `ufp4 bench`: the kernel suite (Google Benchmark) and the training-step benchmark, written to HDF5
// under --out-dir (kernels.h5 + Google Benchmark's JSON, step.h5) and rendered by `ufp4 report bench`.
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/bench/bench.h"
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

}  // namespace

int cmd_bench(const std::vector<std::string>& args) {
  std::string what, out_dir, filter, models, recipes, extra, device, reference, moe_layers;
  KernelBenchOptions ko;
  StepBenchOptions so;
  po::options_description d("options");
  d.add_options()
      ("what", po::value(&what), "kernels | step | all")
      ("out-dir", po::value(&out_dir)->default_value("results/bench"), "where kernels.h5, kernels.json and step.h5 go")
      ("filter", po::value(&filter)->default_value(""), "kernels: Google Benchmark regex over names (e.g. 'fused/e2m1')")
      ("iterations", po::value(&ko.iterations)->default_value(20), "kernels: timed launches per repetition")
      ("repetitions", po::value(&ko.repetitions)->default_value(5), "kernels: repetitions (the median is reported)")
      ("quick", po::bool_switch(&ko.quick), "kernels: two shapes only (smoke test)")
      ("models", po::value(&models)->default_value("dense-20m:1024,dense-35m:1024,dense-113m,moe-81m"), "step: comma list of models; model:seq gives one its own sequence length (e.g. dense-20m:1024)")
      ("recipes", po::value(&recipes)->default_value("bf16,e2m1_ref,ufp4"), "step: comma list of recipes")
      ("extra-recipes", po::value(&extra)->default_value(""), "step: more recipes on the first model (leave-one-out diagnostics)")
      ("batch", po::value(&so.batch)->default_value(16), "step: sequences per step")
      ("seq", po::value(&so.seq_len)->default_value(2048), "step: tokens per sequence")
      ("warmup", po::value(&so.warmup)->default_value(3), "step: untimed steps first")
      ("steps", po::value(&so.steps)->default_value(10), "step: timed steps")
      ("device", po::value(&device)->default_value("auto"), "step: auto | cpu | cuda")
      ("reference", po::value(&reference)->default_value("eager,compiled"),
       "step: comma list of eager, compiled (the plain-PyTorch peer, harness/bench/reference_step.py), or none")
      ("python", po::value(&so.python)->default_value("python3"), "step: the Python that has torch")
      ("no-nondeterministic", "step: skip the rows that time bf16 and ufp4 without deterministic mode")
      ("moe-layers", po::value(&moe_layers)->default_value("auto"),
       "step: comma list of MoE models whose routed layer is timed alone (forward + backward), none, or auto (moe-7.9b on a GPU)")
      ("moe-layer-tokens", po::value(&so.moe_layer_tokens)->default_value(16384), "step: tokens through that layer");
  po::positional_options_description pos;
  pos.add("what", 1);
  auto vm = parse_command("bench", "kernels|step|all [--out-dir DIR] [options]", d, args, &pos);
  if (!vm) return 0;
  so.nondeterministic = !vm->count("no-nondeterministic");
  if (what != "kernels" && what != "step" && what != "all")
    throw Error("bench: '" + what + "' is not a benchmark (allowed: kernels, step, all)");
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
    const auto rows = run_step_benchmarks(so);
    write_step_bench(out_dir + "/step.h5", rows, so);
    log_info("bench step: " + std::to_string(rows.size()) + " rows -> " + out_dir + "/step.h5");
  }
  return 0;
}

}  // namespace ufp4
