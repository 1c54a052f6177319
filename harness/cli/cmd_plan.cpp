// `ufp4 plan`: a manifest's runs as `ufp4 run` plans them, or a model's parameters, FLOPs per token and
// memory, whether or not it fits (harness/plan/plan_estimates.h); --fields: the manifest field reference.
#include <cstdio>

#include "common/error.h"
#include "harness/cli/cli.h"
#include "harness/plan/manifest_fields.h"
#include "harness/plan/plan_estimates.h"

namespace ufp4 {

int cmd_plan(const std::vector<std::string>& args) {
  std::vector<std::string> models, manifests;
  std::string device_name;
  int64_t micro_batch = 1, seq = 0;
  int gpus = 0;
  double tokens = 100e9;
  bool fields = false;
  po::options_description d("options");
  d.add_options()
      ("model", po::value(&models)->multitoken(), "model names (or 'all')")
      ("micro-batch", po::value(&micro_batch)->default_value(1), "sequences per micro-batch, for the activation estimate")
      ("seq", po::value(&seq)->default_value(0), "sequence length (0: the model's)")
      ("manifests", po::value(&manifests)->multitoken(), "manifests to expand into runs")
      ("gpus", po::value(&gpus)->default_value(0), "with --model: memory a GPU and time on this many GPUs (data parallel, ZeRO-1; expert parallel for MoE)")
      ("tokens", po::value(&tokens)->default_value(100e9), "with --gpus: training tokens for the time estimate")
      ("device-name", po::value(&device_name), "estimate times for this device (as results record it, e.g. \"NVIDIA H200\"); default: this machine's")
      ("fields", po::bool_switch(&fields), "print the reference of every manifest field (Markdown; experiments/FIELDS.md)");
  po::positional_options_description pos;
  pos.add("manifests", -1);
  auto vm = parse_command("plan", "--model NAME ... | MANIFEST ... | --fields", d, args, &pos);
  if (!vm) return 0;
  if (fields) {
    std::fputs(manifest_fields_markdown().c_str(), stdout);
    return 0;
  }
  if (!manifests.empty()) {
    print_run_plans(manifests, device_name);
    return 0;
  }
  print_model_plans(models, seq, micro_batch, gpus, tokens, device_name);
  return 0;
}

}  // namespace ufp4
