// Data-parallel sections of reports/bench.md: scaling (tokens/s, efficiency, memory a GPU against the
// plan) from `ufp4 bench scaling`, and correctness (a proxy trained on N GPUs against one GPU with the
// same global batch, and two N-GPU runs against each other) from run results.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/text.h"
#include "harness/io/array_io.h"
#include "harness/io/bench_files.h"
#include "harness/io/run_results.h"
#include "harness/plan/plan_estimates.h"
#include "harness/report/report.h"
#include "models/model_config.h"

namespace ufp4 {

namespace {

// The plan's GB a GPU for a row: its BF16 estimate, and for a 4-bit recipe's step that plus the columnwise
// weight operands the recipe keeps for DGRAD (four_bit_operand_gb at the row's EP), shown as the sum.
std::string plan_memory_cell(const ScalingBenchRow& r) {
  if (!std::isfinite(r.plan_memory_gb) || r.plan_memory_gb <= 0) return "-";
  if (r.recipe == "bf16") return fmt("%.1f", r.plan_memory_gb);
  int ep = 1;
  if (r.layout.rfind("EP ", 0) == 0) ep = std::atoi(r.layout.c_str() + 3);
  const double four_bit = four_bit_operand_gb(model_config(r.model), std::max(ep, 1));
  return fmt("%.1f", r.plan_memory_gb + four_bit) + " (" + fmt("%.1f", r.plan_memory_gb) + " + " + fmt("%.1f", four_bit) + " 4-bit)";
}

// Whether two runs agree bit for bit in every curve and in their final weights; else where they first part.
std::string bit_difference(const RunResults& a, const RunResults& b) {
  const auto ca = named_curves(a), cb = named_curves(b);
  for (size_t c = 0; c < ca.size() && c < cb.size(); ++c) {
    const auto &x = ca[c].values, &y = cb[c].values;
    if (x.size() != y.size()) return ca[c].name + " has " + std::to_string(x.size()) + " values against " + std::to_string(y.size());
    for (size_t i = 0; i < x.size(); ++i)
      if (std::memcmp(&x[i], &y[i], sizeof(double)) != 0)
        return ca[c].name + " differs first at index " + std::to_string(i) + " (" + fmt("%.9g", x[i]) + " against " + fmt("%.9g", y[i]) + ")";
  }
  if (a.weights_sha256 != b.weights_sha256) return "the final weights differ";
  return "";
}

// The efficiency bar's row of the Targets table: the bar's model's worst efficiency over recipes at the
// bar's world size, or the largest world measured where that size was not.
std::string efficiency_row(const DataParallelTargets& t, std::map<int64_t, double>& worst_at, const std::set<int64_t>& sizes) {
  std::ostringstream rows;
  const std::string bar_name = "data-parallel efficiency, " + t.efficiency_model + " on " + std::to_string(t.efficiency_gpus) + " GPUs (each recipe)";
  if (worst_at.count(t.efficiency_gpus)) {
    const double e = worst_at[t.efficiency_gpus];
    rows << "| " << bar_name << " | >= " << fmt("%.0f%%", 100 * t.efficiency_min) << " | " << fmt("%.1f%%", 100 * e) << " | "
         << (e >= t.efficiency_min ? "**met**" : "**not met**") << " |\n";
  } else {
    const int64_t largest = *sizes.rbegin();
    rows << "| " << bar_name << " | >= " << fmt("%.0f%%", 100 * t.efficiency_min) << " | not measured: the largest world here is "
         << largest << " GPUs" << (largest > 1 && worst_at.count(largest) ? " (" + fmt("%.1f%%", 100 * worst_at[largest]) + " there)" : "")
         << " | **not run** |\n";
  }
  return rows.str();
}

// "## Data-parallel scaling": step time, tokens/s, efficiency and memory a GPU against the plan at each world
// size (scaling.h5); its source, and the efficiency bar's row of the Targets table.
std::string scaling_section(const std::string& scaling_h5, const DataParallelTargets& t, std::vector<std::string>& sources,
                            std::ostringstream& rows) {
  std::ostringstream md;
  // By world size: `bench scaling --append` keeps the rows in the order their commands ran.
  auto v = read_scaling_rows(scaling_h5);
  std::stable_sort(v.begin(), v.end(), [](const ScalingBenchRow& a, const ScalingBenchRow& b) { return a.gpus < b.gpus; });
  sources.push_back(provenance_line(scaling_h5));
  std::map<std::pair<std::string, std::string>, double> one;  // (model, recipe) -> tokens/s on one GPU
  for (const auto& r : v)
    if (r.gpus == 1) one[{r.model, r.recipe}] = r.tokens_per_s;
  std::set<int64_t> sizes;
  for (const auto& r : v) sizes.insert(r.gpus);
  const ScalingBenchRow& r0 = v.front();
  std::string backend = "none: one GPU only";
  for (const auto& r : v)
    if (r.gpus > 1) backend = r.backend;
  md << "## Data-parallel scaling\n\n"
     << "The engine's data-parallel step (`harness/train/data_parallel.h`: gradient buckets reduce-scattered while backward "
     << "still runs, the AdamW state split over the ranks (ZeRO-1), the updated weights all-gathered) on N GPUs of one machine, "
     << "one rank a GPU started by `ufp4 bench scaling` (backend " << backend << "), at a fixed batch a GPU: " << r0.batch
     << " sequences of " << r0.seq_len << " tokens in micro-batches of " << r0.micro_batch << ", random tokens, deterministic mode. "
     << "N = 1 is one process without data parallelism, as `ufp4 run` trains on one GPU (a CUDA graph where the trainer uses one). "
     << "Step: the slowest rank's median over " << r0.steps << " timed steps after warm-up (CUDA events). Efficiency: "
     << "tokens/s / (N x one GPU's tokens/s). Memory: the caching allocator's peak on the largest rank, beside the plan's "
     << "estimate (`ufp4 plan --model M --gpus N --micro-batch " << r0.micro_batch << "`: FP32 weights and a BF16 copy, FP32 "
     << "gradients, AdamW moments split N ways with the reduce-scattered gradient shard, one micro-batch of activations). "
     << "World sizes measured: ";
  for (auto it = sizes.begin(); it != sizes.end(); ++it) md << (it == sizes.begin() ? "" : ", ") << *it;
  md << ".\n\n| model | recipe | GPUs | step ms | tokens/s | efficiency | MFU | peak GB a GPU | plan GB a GPU |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  std::map<int64_t, double> worst_at;  // world size -> the bar's model's worst efficiency over recipes
  for (const auto& r : v) {
    const auto base = one.find({r.model, r.recipe});
    const double eff = base != one.end() && base->second > 0 ? r.tokens_per_s / (static_cast<double>(r.gpus) * base->second) : NAN;
    if (r.model == t.efficiency_model && std::isfinite(eff))
      worst_at[r.gpus] = worst_at.count(r.gpus) ? std::min(worst_at[r.gpus], eff) : eff;
    md << "| " << r.model << " | " << r.recipe << " | " << r.gpus << " | " << fmt("%.1f", r.step_ms) << " ± " << fmt("%.1f", r.step_ms_sd) << " | "
       << fmt("%.0f", r.tokens_per_s) << " | " << (std::isfinite(eff) ? fmt("%.1f%%", 100 * eff) : "n/a") << " | "
       << (r.mfu > 0 ? fmt("%.1f%%", 100 * r.mfu) : "n/a") << " | " << fmt("%.1f", r.peak_memory_gb)
       << (r.gpus > 1 && std::fabs(r.peak_memory_gb - r.peak_memory_gb_min) > 0.05 ? " (smallest " + fmt("%.1f", r.peak_memory_gb_min) + ")" : "") << " | "
       << fmt("%.1f", r.plan_memory_gb) << " |\n";
  }
  md << "\n";
  rows << efficiency_row(t, worst_at, sizes);
  return md.str();
}

// "## Expert parallelism": `ufp4 bench scaling --ep E [--moe-layer]` (expert_parallel.h5, expert_parallel_layer.h5): MoE models with
// their experts split over ranks, the training step or one MoE layer, beside one GPU where it was measured.
std::string expert_parallel_section(const std::vector<std::string>& files, std::vector<std::string>& sources) {
  std::vector<ScalingBenchRow> v;
  for (const auto& h5 : files) {
    const auto rows = read_scaling_rows(h5);
    v.insert(v.end(), rows.begin(), rows.end());
    sources.push_back(provenance_line(h5));
  }
  std::map<std::tuple<std::string, std::string, std::string>, double> one;  // (model, recipe, unit) -> tokens/s on one GPU
  for (const auto& r : v)
    if (r.gpus == 1) one[{r.model, r.recipe, r.unit}] = r.tokens_per_s;
  std::ostringstream md;
  md << "## Expert parallelism\n\n"
     << "MoE models with their routed experts split over the ranks of an expert group (`ufp4 bench scaling --ep E`, as `ufp4 run --ep E` "
     << "trains: the tokens' rows exchanged by all-to-all, the experts' gradients summed over the ranks that hold the same experts, "
     << "everything else data-parallel with ZeRO-1), one rank a GPU, random tokens, deterministic mode; timed: the training step, or one "
     << "routed MoE layer's forward and backward at the model's real shapes (no optimizer; `--moe-layer`), batch x sequence tokens a rank. "
     << "Efficiency: tokens/s / (N x one GPU's tokens/s) where one GPU was measured. A MoE layer can pass 100%: each rank keeps its "
     << "batch x sequence tokens, so at EP N each of its experts receives the rows of N ranks, and the grouped GEMMs run N times as "
     << "many rows an expert. MFU counts the active parameters. Plan: `ufp4 plan "
     << "--model M --gpus N` at the row's layout (a step only): for a 4-bit recipe its BF16 estimate plus the columnwise weight "
     << "operands the recipe keeps from FPROP to DGRAD (the plan's \"4-bit GB a GPU\"); the activation operands it keeps are not "
     << "counted, so a 4-bit step's peak can still pass it.\n\n"
     << "| model | recipe | timed | GPUs | layout | ms | tokens/s | efficiency | MFU | peak GB a GPU | plan GB a GPU |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : v) {
    const auto base = one.find({r.model, r.recipe, r.unit});
    const double eff = base != one.end() && base->second > 0 ? r.tokens_per_s / (static_cast<double>(r.gpus) * base->second) : NAN;
    md << "| " << r.model << " | " << r.recipe << " | " << (r.unit.empty() ? "step" : r.unit) << " | " << r.gpus << " | " << r.layout << " | "
       << fmt("%.1f", r.step_ms) << " ± " << fmt("%.1f", r.step_ms_sd) << " | " << fmt("%.0f", r.tokens_per_s) << " | "
       << (std::isfinite(eff) ? fmt("%.1f%%", 100 * eff) : "n/a") << " | " << (r.mfu > 0 ? fmt("%.1f%%", 100 * r.mfu) : "n/a") << " | "
       << fmt("%.1f", r.peak_memory_gb) << " | " << plan_memory_cell(r) << " |\n";
  }
  md << "\n";
  return md.str();
}

// One `ufp4 check` log: its passed lines, its failures (FAIL lines, and any other line but a note: an error that cut the
// check short leaves its message there), and whether every passed line compared bit for bit (a note says --exact fell back
// to the tolerance, for runs of different GPU models).
struct CheckLog {
  int ok = 0, failed = 0;
  bool exact = true;
};

CheckLog read_check_log(const std::string& path) {
  CheckLog c;
  for (const auto& line : split(read_text_file(path), '\n', /*skip_empty=*/true)) {
    if (line.rfind("ok ", 0) == 0) {
      ++c.ok;
      if (line.find("bit-identical") == std::string::npos) c.exact = false;
    } else if (line.rfind("note", 0) == 0) {
      c.exact = false;
    } else {
      ++c.failed;
    }
  }
  return c;
}

// "### Expert-parallel correctness": the `ufp4 check` logs of tools/gpu-expert-parallel.sh's correctness stage that
// reports/targets.toml names (the runs stayed on the device, so the logs are the record), one row a log, and a target row a
// family: the learning-rate-0 layouts within the tolerance of one process, the reruns and the resume bit for bit. A log
// named but absent makes its family not run.
std::string expert_checks_section(const DataParallelTargets& t, std::vector<std::string>& sources, std::ostringstream& rows) {
  std::ostringstream md;
  md << "### Expert-parallel correctness\n\n"
     << "`tools/gpu-expert-parallel.sh`'s correctness stage (`" << rel(t.expert_checks) << "/`, whose README says what each run is): "
     << "the MoE proxy at learning rate 0 by one process and by 4 ranks at EP 1, 2 and 4 (every layout computes the same function of "
     << "the same tokens, so each loss must agree with one process's within `ufp4 check`'s tolerance), and trained at EP 2 x DP 2 twice "
     << "and once stopped and resumed (`--exact`). Each row is one `ufp4 check` log that `reports/targets.toml` names: its lines that "
     << "passed and those that did not, and whether every passed line compared bit for bit.\n\n"
     << "| check | must | ok | failed | bit for bit |\n|---|---|---|---|---|\n";
  auto family = [&](const std::vector<std::string>& names, bool must_be_exact, const std::string& what) {
    if (names.empty()) return;
    int failed = 0;
    std::vector<std::string> missing;
    for (const auto& name : names) {
      const std::string path = t.expert_checks + "/" + name;
      if (!file_exists(path)) {
        missing.push_back(name);
        md << "| " << name << " | " << (must_be_exact ? "bit for bit" : "within the tolerance") << " | - | - | missing |\n";
        continue;
      }
      const CheckLog c = read_check_log(path);
      sources.push_back(rel(path));
      if (c.failed > 0 || c.ok == 0 || (must_be_exact && !c.exact)) ++failed;
      md << "| " << name << " | " << (must_be_exact ? "bit for bit" : "within the tolerance") << " | " << c.ok << " | " << c.failed << " | "
         << (!must_be_exact ? "not asked" : c.ok > 0 && c.exact ? "yes" : "no") << " |\n";
    }
    const std::string bar = what + " (" + std::to_string(names.size()) + " `ufp4 check` logs)";
    if (!missing.empty())
      rows << "| " << bar << " | all pass | not run: " << join(missing, ", ") << " missing in " << rel(t.expert_checks) << " | **not run** |\n";
    else
      rows << "| " << bar << " | all pass | " << (failed == 0 ? "all pass" : std::to_string(failed) + " did not") << " | "
           << (failed == 0 ? "**met**" : "**not met**") << " |\n";
  };
  family(t.expert_tolerance_logs, false, "expert parallelism: each layout against one process at learning rate 0, within the tolerance");
  family(t.expert_exact_logs, true, "expert parallelism: reruns and a resume bit for bit");
  md << "\n";
  return md.str();
}

// The correctness runs in the folder (run results only), by recipe, in path order.
std::map<std::string, std::vector<RunResults>> correctness_runs(const std::string& correctness_dir) {
  std::vector<std::string> files;
  if (is_dir(correctness_dir)) walk_files(correctness_dir, ".h5", files);
  std::sort(files.begin(), files.end());
  std::map<std::string, std::vector<RunResults>> by_recipe;
  for (const auto& f : files)
    if (is_run_results(f)) {
      RunResults r = read_run_results(f);
      by_recipe[r.recipe].push_back(std::move(r));
    }
  return by_recipe;
}

// "## Data-parallel correctness": the run compared, how, and the tolerance.
std::string correctness_intro(const RunResults& any) {
  std::ostringstream md;
  md << "## Data-parallel correctness\n\n"
     << "`" << any.model << "` trained for " << any.steps_done << " steps (" << fmt("%.2f", any.epochs) << " epochs of its corpus) with "
     << "the same global batch on one GPU and with data parallelism on N GPUs (`ufp4 run --nproc-per-node N`, backend and "
     << "ZeRO-1 as below). One process sums its micro-batches' gradients in sequence, N ranks sum N partial sums (and the "
     << "clipping norm is taken in FP64 over the shards), so the curves agree closely, not bit for bit; a 4-bit recipe turns "
     << "last-bit differences into different codes. The tolerance: at each evaluation the ratio of "
     << "|N-GPU - one GPU| (seed 1 both) to the mean |difference| between pairs of one-GPU seeds (1, 2, 3), and the median of "
     << "these ratios over the evaluations at most 1: the rank layout moves the curve less than a change of seed does. The "
     << "median, not every point: once the last-bit differences have grown, an N-GPU run is close to a fresh draw, and a "
     << "fresh draw lands outside the range of three seeds at a single point about 29% of the time (simulated, normal "
     << "draws), while a wrong data-parallel step (a mis-scaled or missing gradient) moves the curve at every evaluation, "
     << "in one direction. Two N-GPU runs of one manifest must agree bit for bit (every curve and the final "
     << "weights' SHA-256).\n\n";
  return md.str();
}

// One recipe on n GPUs against one GPU (base: seed 1; seeds: every one-GPU seed): the validation loss at each
// evaluation, the final training loss, and two n-GPU runs against each other; the Targets table's two rows.
void world_size_comparison(const std::string& recipe, int64_t n, const std::vector<const RunResults*>& reps,
                           const std::map<int64_t, const RunResults*>& seeds, const RunResults& base, std::ostringstream& md,
                           std::ostringstream& rows) {
  const RunResults& dp = *reps.front();
  md << "### " << recipe << ", " << n << " GPUs (" << dp.backend << ", " << dp.optimizer_sharding << ") against one\n\n| step |";
  for (const auto& s : seeds) md << " 1 GPU seed " << s.first << " |";
  md << " seed pairs' mean difference | " << n << " GPUs | difference | ratio |\n|---|";
  for (size_t i = 0; i < seeds.size() + 4; ++i) md << "---|";
  md << "\n";
  std::vector<double> ratios;
  double worst = 0, worst_step = 0;
  for (size_t e = 0; e < base.curves.eval_step.size() && e < dp.curves.eval_loss.size(); ++e) {
    std::vector<double> l;
    md << "| " << static_cast<int64_t>(base.curves.eval_step[e]) + 1 << " |";
    for (const auto& s : seeds) {
      l.push_back(e < s.second->curves.eval_loss.size() ? s.second->curves.eval_loss[e] : NAN);
      md << " " << fmt("%.4f", l.back()) << " |";
    }
    double pair_sum = 0;
    int pairs = 0;
    for (size_t i = 0; i < l.size(); ++i)
      for (size_t j = i + 1; j < l.size(); ++j, ++pairs) pair_sum += std::fabs(l[i] - l[j]);
    const double seed_diff = pairs > 0 ? pair_sum / pairs : NAN;
    const double d = dp.curves.eval_loss[e] - base.curves.eval_loss[e];
    const double ratio = std::fabs(d) / seed_diff;
    ratios.push_back(ratio);
    if (ratio > worst) { worst = ratio; worst_step = base.curves.eval_step[e] + 1; }
    md << " " << fmt("%.4f", seed_diff) << " | " << fmt("%.4f", dp.curves.eval_loss[e]) << " | " << fmt("%+.4f", d) << " | "
       << fmt("%.2f", ratio) << " |\n";
  }
  std::sort(ratios.begin(), ratios.end());
  const size_t k = ratios.size();
  const double median = k == 0 ? NAN : k % 2 ? ratios[k / 2] : 0.5 * (ratios[k / 2 - 1] + ratios[k / 2]);
  const bool within = seeds.size() >= 3 && median <= 1.0;
  md << "\nFinal training loss (mean of the last " << base.last_k << " steps): one GPU " << fmt("%.4f", base.mean_loss_last_k) << ", "
     << n << " GPUs " << fmt("%.4f", dp.mean_loss_last_k) << ".";
  std::string rerun = "not rerun";
  if (reps.size() >= 2) {
    const std::string diff = bit_difference(*reps[0], *reps[1]);
    rerun = diff.empty() ? "bit-identical" : "differ: " + diff;
    md << " Two " << n << "-GPU runs: " << (diff.empty() ? "bit-identical (every curve; final weights SHA-256 " + reps[0]->weights_sha256.substr(0, 16) + ")" : rerun)
       << ".";
  }
  md << "\n\n";
  rows << "| " << recipe << " on " << n << " GPUs against one: validation loss, median over evaluations of the absolute difference over the "
       << "seed pairs' mean absolute difference | <= 1 (" << seeds.size() << " seeds) | " << fmt("%.2f", median) << " (largest " << fmt("%.2f", worst)
       << " at step " << fmt("%.0f", worst_step) << ") | " << (within ? "**met**" : "**not met**") << " |\n";
  rows << "| " << recipe << " on " << n << " GPUs: two runs bit-identical | identical | " << rerun << " | "
       << (rerun == "bit-identical" ? "**met**" : "**not met**") << " |\n";
}

// One recipe's runs: their sources, then each world size against one GPU, or why they cannot be compared.
void recipe_correctness(const std::string& recipe, const std::vector<RunResults>& runs, std::vector<std::string>& sources,
                        std::ostringstream& md, std::ostringstream& rows) {
  std::map<int64_t, const RunResults*> seeds;   // one GPU: seed -> run
  std::map<int64_t, std::vector<const RunResults*>> multi;  // world size -> runs of seed 1
  for (const auto& r : runs) {
    sources.push_back(rel(r.path) + ": " + r.device_name + ", commit " + r.attr("git_commit") + ", world " + std::to_string(r.world_size) +
                      " (" + r.backend + ", " + r.optimizer_sharding + "), seed " + std::to_string(r.seed));
    if (r.world_size == 1) seeds[r.seed] = &r;
    else multi[r.world_size].push_back(&r);
  }
  if (!seeds.count(1) || multi.empty()) {
    md << "### " << recipe << "\n\nIncomplete: the one-GPU seed-1 run or an N-GPU run is missing.\n\n";
    return;
  }
  const RunResults& base = *seeds.at(1);
  for (const auto& [n, reps] : multi) world_size_comparison(recipe, n, reps, seeds, base, md, rows);
}

}  // namespace

DataParallelReport report_data_parallel(const std::string& scaling_h5, const std::string& correctness_dir, const DataParallelTargets& t) {
  DataParallelReport out;
  std::ostringstream md, rows;
  if (file_exists(scaling_h5)) md << scaling_section(scaling_h5, t, out.sources, rows);
  const size_t slash = scaling_h5.find_last_of('/');
  const std::string dir = slash == std::string::npos ? std::string(".") : scaling_h5.substr(0, slash);
  std::vector<std::string> ep_files;
  for (const char* f : {"/expert_parallel.h5", "/expert_parallel_layer.h5"})
    if (file_exists(dir + f)) ep_files.push_back(dir + f);
  if (!ep_files.empty()) md << expert_parallel_section(ep_files, out.sources);
  if (!t.expert_checks.empty()) md << expert_checks_section(t, out.sources, rows);
  if (!t.paper_budgets.empty()) md << projection_section(dir, t.paper_budgets);

  // Correctness: runs grouped by recipe; one GPU (seeds) against N GPUs (reruns of one seed).
  const std::map<std::string, std::vector<RunResults>> by_recipe = correctness_runs(correctness_dir);
  if (!by_recipe.empty()) {
    md << correctness_intro(by_recipe.begin()->second.front());
    for (const auto& [recipe, runs] : by_recipe) recipe_correctness(recipe, runs, out.sources, md, rows);
  }
  out.markdown = md.str();
  out.target_rows = rows.str();
  return out;
}

}  // namespace ufp4
