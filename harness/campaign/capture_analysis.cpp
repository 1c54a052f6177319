#include "harness/campaign/capture_analysis.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <utility>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/text.h"
#include "harness/analysis/analysis.h"
#include "harness/analysis/signal_chain.h"
#include "harness/analysis/tensor_tables.h"
#include "harness/io/array_io.h"
#include "harness/io/labelled_table.h"
#include "harness/io/provenance.h"
#include "harness/plan/run_manifest.h"
#include "harness/plan/run_plan.h"
#include "harness/train/run_queue.h"
#include "harness/train/stream_probe.h"
#include "harness/train/trainer.h"

namespace ufp4 {

namespace {

std::string step_file(const RunPlan& p, int64_t step) { return p.capture.dir + "/step" + std::to_string(step) + ".tensors.h5"; }

// Whether every captured step has its whole file. A file that is there is trusted by content, not by its name:
// its content hash must hold and its run id be this run's (a file copied or left from another run is refused,
// naming it; a damaged one too), so that a skipped run is one whose analysis is really there. A file made
// before the signal chain was measured (no table "chain") is analysed again.
bool all_steps_analysed(const RunPlan& p) {
  bool all = true;
  for (const int64_t s : p.capture.steps) {
    const std::string f = step_file(p, s);
    if (!file_exists(f)) {
      all = false;
      continue;
    }
    verify_h5_content(f);
    const std::string id = read_h5_string_attrs(f)["run_id"];
    if (id != p.run_id)
      throw Error(f + ": a step file of run id '" + id + "' in the capture folder of " + p.name + " (run id " + p.run_id + "); remove it to analyse the step again");
    const std::vector<std::string> tables = list_h5_datasets(f);
    if (std::find(tables.begin(), tables.end(), "chain") == tables.end()) all = false;
  }
  return all;
}

// "<layer>/<gemm>.<operand>" -> (layer, "<gemm>.<operand>").
std::pair<std::string, std::string> split_key(const std::string& key) {
  const size_t slash = key.rfind('/');
  return {key.substr(0, slash), key.substr(slash + 1)};
}

// The recipe's own quantization of one operand: `after` against the (rotated) original `before`.
std::vector<double> recipe_row(const torch::Tensor& before, const torch::Tensor& after) {
  const torch::Tensor a = before.to(torch::kFloat64), q = after.to(torch::kFloat64);
  const double a2 = (a * a).sum().item<double>(), abs_sum = a.abs().sum().item<double>();
  const double nmse = ((q - a) * (q - a)).sum().item<double>() / a2;
  return {nmse, -10 * std::log10(nmse), (q * a).sum().item<double>() / a2, (a.sign() * (q - a)).sum().item<double>() / abs_sum};
}

LabelledTable recipe_table() {
  return LabelledTable(4, "nmse,sqnr_db,alpha,shrinkage: each operand as its recipe quantized it, against its (rotated) original");
}

// One captured step: its layers measured on the device where their operands are, with the recipe's own
// rows gathered while the step ran, written to its step file. A layer (an idle or nearly idle expert)
// with fewer than 16 tokens, a block, is left out and said.
void analyse_step(const RunPlan& p, const std::vector<Grid>& grids, int64_t step, std::map<std::string, torch::Tensor> unrotated, LabelledTable own,
                  const LabelledTable& chain, const StreamComparison& stream) {
  const auto started = std::chrono::steady_clock::now();
  TensorTables t;
  size_t layers = 0;
  std::vector<std::string> skipped;
  for (const auto& [key, x] : unrotated) {
    const auto [layer, operand] = split_key(key);
    if (operand != "fprop.x") continue;
    if (!unrotated.count(layer + "/fprop.w") || !unrotated.count(layer + "/dgrad.dy"))
      throw Error("analyze capture: " + layer + " captured without its weight or output gradient at step " + std::to_string(step));
    const int64_t m = x.size(0) / 16 * 16;  // whole 1x16 blocks along the tokens for WGRAD
    if (m == 0) {
      skipped.push_back(layer);
      continue;
    }
    const torch::Tensor dy = unrotated.at(layer + "/dgrad.dy");
    measure_layer(layer, layer_family(layer), x.narrow(0, 0, m), unrotated.at(layer + "/fprop.w"), dy.narrow(0, 0, m), grids, t);
    ++layers;
  }
  unrotated.clear();
  make_dirs(p.capture.dir);
  H5Writer w(step_file(p, step));
  write_tensor_tables(w, t);
  if (own.rows() > 0) write_labelled_table(w, "recipe", own, /*fp64=*/true);
  if (chain.rows() > 0) {
    write_labelled_table(w, "chain", chain, /*fp64=*/true);
    w.attr("chain_loss_exact", stream.loss_exact);
    w.attr("chain_loss_recipe", stream.loss_recipe);
    w.attr("chain_tokens", stream.tokens);
    w.attr("chain_spec", std::string("the step's last micro-batch through the weights after the step's update, forward and back twice: quantized as the "
                                     "recipe trains and with every operand left as it is; gradients and losses of the LM loss alone; the prediction's "
                                     "alphas are the step's training operands (before the update, dY of the loss with any MoE auxiliary term)"));
  }
  w.attr("run_name", p.name);
  w.attr("run_id", p.run_id);
  w.attr("model", p.model.name);
  w.attr("recipe", p.recipe.name);
  w.attr("data_manifest_sha256", p.data.manifest_sha256);
  w.attr("seed", p.train.seed);
  w.attr("step", step);
  w.attr("steps", p.train.steps);
  w.attr("epochs_at_step", static_cast<double>((step + 1) * p.tokens_per_step) / static_cast<double>(p.data_train_tokens));
  w.attr("capture_tokens", p.capture.tokens);
  w.attr("layers_left_out", join(skipped, ","));
  w.attr("spec", std::string("tensors, bins, scales, gemms: the unrotated operands under each grid, 1x16 blocks, FP32 single-level max scaling (scales: also "
                             "E4M3 and E8M0), RTNE, without (I) and with RHT-16 (H16) along each GEMM's reduction dimension; recipe: the run's own"));
  write_provenance(w);
  w.commit();
  char took[48];
  std::snprintf(took, sizeof took, " in %.1f s", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  log_info("analyze capture: " + p.name + " step " + std::to_string(step) + ": " + std::to_string(layers) + " layers" +
           (skipped.empty() ? "" : " (" + std::to_string(skipped.size()) + " left out: fewer than 16 tokens)") + took + " -> " + step_file(p, step));
}

// Trains the run with its captured steps analysed as they come. The step's last micro-batch is the one
// analysed (the capture keeps each key's last), so its recipe rows replace an earlier micro-batch's.
void train_analysing(const RunPlan& p, const CaptureAnalysisOptions& o, const std::vector<Grid>& grids) {
  std::map<std::string, std::vector<double>> own;
  RunOptions ro;
  ro.device = o.device;
  // Always trained (the same bits as any run of the same id): a finished run or one found elsewhere by its
  // id holds no operands; a checkpoint resumes.
  ro.force = true;
  ro.capture_sink.operand = [&](int64_t, const std::string& key, const torch::Tensor& before, const torch::Tensor& after) {
    own[key] = recipe_row(before, after);
  };
  // The signal chain of the step (one process): measured at the stream's points, predicted from this step's
  // operands (their alpha, column 2 of a recipe row), which are all in by then.
  LabelledTable chain;
  StreamComparison stream;
  ro.capture_sink.stream = [&](int64_t, const StreamComparison& c) {
    std::map<std::string, double> alpha;
    for (const auto& [key, row] : own) alpha[key] = row[2];
    std::vector<MeasuredTap> measured;
    for (const StreamTap& t : c.taps) measured.push_back({t.name, t.alpha_forward, t.error_forward, t.alpha_backward, t.error_backward});
    chain = chain_table(measured, p.model.n_layers, alpha);
    stream = c;
  };
  ro.capture_sink.step = [&](int64_t step, std::map<std::string, torch::Tensor> unrotated) {
    LabelledTable rows = recipe_table();
    for (const auto& [key, row] : own) {
      const auto [layer, operand] = split_key(key);
      rows.add({layer, layer_family(layer), operand, p.recipe.name, "recipe"}, row);
    }
    own.clear();
    analyse_step(p, grids, step, std::move(unrotated), std::move(rows), chain, stream);
    chain = LabelledTable();
  };
  const RunResult r = run_training(p, ro);
  if (r.status == RunStatus::kStopped) throw RuntimeError("analyze capture: " + p.name + " stopped at step " + std::to_string(r.steps_done) + " (run it again to resume)");
  if (r.status == RunStatus::kDiverged) throw RuntimeError("analyze capture: " + p.name + " diverged");
}

void check_captured_steps(const RunPlan& p) {
  if (p.capture.steps.empty()) throw Error(p.manifest_path + ": [capture] steps is empty (analyze capture analyses captured steps)");
  for (const int64_t s : p.capture.steps)
    if (s < 0 || s >= p.train.steps)
      throw Error(p.manifest_path + ": [capture] steps: " + std::to_string(s) + " is not a step of the run (allowed: 0 to " + std::to_string(p.train.steps - 1) + ")");
}

}  // namespace

std::vector<std::string> run_capture_analysis(const CaptureAnalysisOptions& o) {
  std::vector<RunPlan> plans;
  size_t index = 0;
  for (const auto& m : o.manifests)
    for (const auto& r : RunManifest::expand(m))
      if (static_cast<int>(index++ % static_cast<size_t>(o.shards)) == o.shard) plans.push_back(plan_run(r));
  // Every run's captured steps checked before any data is prepared (minutes on a fresh node).
  for (const RunPlan& p : plans) check_captured_steps(p);
  prepare_plans(plans, nullptr);
  std::vector<Grid> grids = o.grids;
  if (grids.empty()) grids = {Grid::from_name("e2m1"), Grid::from_name("e1m2")};
  std::vector<std::string> files;
  for (const RunPlan& p : plans) {
    if (!o.force && all_steps_analysed(p)) {
      log_info("analyze capture: " + p.name + ": every step analysed, skipped");
    } else {
      train_analysing(p, o, grids);
      // A checkpoint from a run that passed a captured step uncaptured (a plain `ufp4 run` stopped part-way):
      // that step is missed on resume; once from the start then.
      if (!all_steps_analysed(p)) {
        log_info("analyze capture: " + p.name + ": a captured step was passed before this call; training it again from the start");
        std::remove(p.checkpoint.path.c_str());
        train_analysing(p, o, grids);
      }
      if (!all_steps_analysed(p)) throw RuntimeError("analyze capture: " + p.name + ": a captured step left no file in " + p.capture.dir);
    }
    for (const int64_t s : p.capture.steps) files.push_back(step_file(p, s));
  }
  return files;
}

}  // namespace ufp4
