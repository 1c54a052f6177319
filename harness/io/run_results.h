// A run's results file (HDF5, schema 2), typed: `ufp4 run` writes it and every command reads it
// through these functions only, so the names of its datasets and attributes live in one file.
//   train/step, train/tokens, train/loss, train/lr, train/grad_norm, train/time   one value a step
//   eval/step, eval/loss                                                           one value an evaluation
//   telemetry/alpha [telemetry steps x operands], telemetry/alpha_step              when telemetry ran
// plus the run's identity, provenance and summary as root attributes.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ufp4 {

// The curves of a run; a checkpoint keeps them too, so a resumed run writes the whole of each.
struct RunCurves {
  std::vector<double> step, tokens, loss, lr, grad_norm, time_s;  // time_s: training seconds, summed over resumed processes
  std::vector<double> eval_step, eval_loss;
  std::vector<double> alpha_step;          // steps with telemetry
  std::vector<std::vector<double>> alpha;  // one row a telemetry step, columns in alpha_keys order
  std::vector<std::string> alpha_keys;     // "<layer>/<gemm>.<operand>"
};

struct RunResults {
  std::string path;  // the file it was read from
  // Identity: what was run, named by content.
  std::string run_name, run_id, run_identity, manifest, manifest_sha256, manifest_path;
  std::string model, model_sha256, recipe, recipe_resolved, recipe_sha256, data_path, data_manifest_sha256;
  int64_t data_train_tokens = 0, seed = 1;
  bool deterministic = true;
  // How it ran: processes, their collective backend ("none" for one process) and how the AdamW state
  // was held ("none", "replicated" or "zero1": harness/train/data_parallel.h).
  int64_t world_size = 1, expert_parallel = 1;  // expert_parallel: ranks an expert group (1: none)
  std::string backend = "none", optimizer_sharding = "none";
  std::string cuda_graph = "off";  // how the last process ran its steps (harness/train/step_graph.h describe())
  // How it went.
  std::string utc_start, utc_end, device_name, weights_sha256;
  bool diverged = false;
  int64_t diverged_step = -1;
  double tokens_per_s = 0, mfu = 0, flops_per_token = 0, peak_memory_gb = 0;
  RunCurves curves;
  // Written from the curves (read back as stored; NaN where an older file lacks them).
  int64_t steps_done = 0, last_k = 0;
  double final_loss = 0, mean_loss_last_k = 0, final_eval_loss = 0, epochs = 0;
  // Every string attribute of the file, provenance included (git_commit, device, versions).
  std::map<std::string, std::string> attrs;
  bool content_verified = false;  // read: the file carried content_sha256 and matched it (false: an older file)

  // The mean training loss of the last k steps (all of them when fewer).
  double tail_mean(int64_t k) const;
  const std::string& attr(const std::string& key) const;  // "" when absent
};

// The curves by their names in the file ("train/loss", "train/grad_norm", "eval/loss", "telemetry/alpha"
// flattened row by row), with the steps they were taken at ("train/loss" and "eval/loss" only), for
// commands that compare or print them by name.
struct NamedCurve {
  std::string name;
  std::vector<double> values;
  const std::vector<double>* steps = nullptr;
};
std::vector<NamedCurve> named_curves(const RunResults& r);

// Writes the file crash-safely with this process's provenance; the summary attributes (steps_done,
// final_loss, mean_loss_last_k over the last tenth up to 1,000 steps, final_eval_loss, epochs) come
// from the curves and data_train_tokens.
void write_run_results(const std::string& path, const RunResults& r);

// Reads a results file; without curves, only the attributes (cheap, for listings). Throws
// ufp4::Error, naming the file, when it is not a run's results, when its content does not match the
// content_sha256 it carries, when its run id is not the hash of its identity, or when its name says
// another run id than the one it holds.
RunResults read_run_results(const std::string& path, bool with_curves = true);
// Whether an HDF5 file is a run's results (folders of results may hold other files, e.g. captures).
bool is_run_results(const std::string& path);

}  // namespace ufp4
