// A run resolved once, before it trains: the only resolved form of a run. plan_run reads the manifest's
// model and recipe once, names the data by content as it stands (prepared, pinned by a campaign, or
// not prepared yet), computes the run id (here and nowhere else), where the run's files go, how much
// of the data it will see, and the typed sections the engine runs from. `ufp4 plan`, `ufp4 run`, the
// scheduler's children, the data-parallel ranks and campaigns all take plans; nothing downstream reads
// the manifest again.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "harness/data/data.h"
#include "harness/plan/run_manifest.h"
#include "models/model_config.h"
#include "models/recipe.h"

namespace ufp4 {

// What makes two runs the same run, hashed into the run id: the manifest's identity fields
// (RunManifest::identity_fields) with the recipe, model and data named by their content (the resolved
// recipe without its name, the model's configuration, the data manifest's SHA-256), not by name or
// path. Editing a recipe file or re-preparing data gives a new id; the ufp4 version is recorded but
// not hashed. Stability rule: a field added to the manifest later enters the text only where it
// differs from its default (manifest_fields.h `since`), so no existing run id moves.
struct RunIdentity {
  std::string text;    // what the id hashes: `fields`, then the three hashes below
  std::string fields;  // RunManifest::identity_fields()
  std::string recipe_sha256, model_sha256, data_sha256;
  bool data_prepared = false;  // false: the id changes once the data exists (unless pinned)
  bool data_pinned = false;    // not prepared here: named by the data manifest a campaign pinned (harness/data/data.h)
};

// The steps and batches, the seed and how the device runs them.
struct TrainSection {
  int64_t steps = 0, batch = 0, micro_batch = 0, seed = 1;
  int64_t micro_batches() const { return batch / micro_batch; }  // a step's accumulation
  double divergence_factor = 3.0;  // a loss above factor x the best smoothed loss (after warmup) stops the run
  std::string device;              // auto | cpu | cuda
  bool deterministic = true, cuda_graph = true;
  bool recipe_rht_signs = false;   // the recipe's RHT signs for every seed (rht_signs = "recipe")
  int64_t expert_parallel = 1;     // ranks an expert group: each holds 1/expert_parallel of the routed experts
};

// AdamW and its learning-rate schedule.
struct OptimizerSection {
  double lr = 0, min_lr = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0, grad_clip = 0;
  int64_t warmup = 0, steps = 0;
  std::string schedule;  // cosine | wsd
  double decay_fraction = 0;
  double lr_at(int64_t step) const;  // warmup, then cosine to min_lr, or WSD (stable, then a linear decay)
};

struct EvalSection {
  int64_t every = 0, batches = 0;
  bool whole_split_at_end = false;  // the last evaluation over every window of the validation split
};

struct CheckpointSection {
  int64_t every = 0;
  std::string path;  // "<out_dir>/<name>-<run id>.ckpt"
};

struct CaptureSection {
  std::vector<int64_t> steps;
  std::vector<std::string> layers;
  int64_t tokens = 0, telemetry_every = 0;
  std::string dir;  // "<out_dir>/<name>-<run id>.capture"
};

struct RunPlan {
  std::string name;               // the run's name (a sweep's or ablation's members append what differs)
  std::string manifest_path;      // the file it came from
  std::string recipe_file;        // the manifest's recipe.name: a preset's name or a file's path
  std::string differs;            // for members of a sweep or ablation: the fields changed from the base
  std::string resolved_manifest;  // canonical TOML of every field (the results' "manifest")
  std::map<std::string, std::string> where;  // "file:line" of keys named in later errors
  ModelConfig model;              // the manifest's seq_len applied
  Recipe recipe;
  DataSource data_source;
  DataInfo data;                  // empty until the data is prepared (data_prepared())
  double max_epochs = 1.0;
  RunIdentity identity;
  std::string run_id;  // first 16 hex digits of SHA-256(identity.text)
  int64_t tokens_per_step = 0, train_tokens = 0;
  int64_t data_train_tokens = 0;  // 0 until the data is prepared
  double epochs = -1;             // train_tokens / data_train_tokens; -1 until the data is prepared
  std::string out_dir, results_path, lock_path;
  TrainSection train;
  OptimizerSection optimizer;
  EvalSection eval;
  CheckpointSection checkpoint;
  CaptureSection capture;
  bool data_prepared() const { return identity.data_prepared; }
};

// A manifest's optimizer and schedule (the benchmarks take a default manifest's).
OptimizerSection optimizer_section(const RunManifest& m);

// Resolves a manifest: its model and recipe (once), the data as it stands, the run id, files, tokens
// and typed sections. Throws ufp4::Error naming the manifest's file:line for a name that resolves to
// nothing.
RunPlan plan_run(const RunManifest& m);

// The name a run's recipe goes by in tables and a campaign's claims: a preset's name, or a recipe file's
// stem (ablations/ufp4_rht_dw.toml -> ufp4_rht_dw).
std::string recipe_stem(const std::string& recipe_file);
// After the data was prepared (ensure_data): names it by content again, and with it the run id, the
// files and the epochs (the model and recipe are not read again); then throws ufp4::Error, naming the
// manifest, unless the plan can train: its data prepared, the data's vocabulary within the model's, and
// the run within data.max_epochs.
void settle_data(RunPlan& p);
// A child of the scheduler trains only the run its parent planned: throws ufp4::Error, prefixed with
// `command`, when `expect_id` is given and the plan's run id is another (its manifest, recipe or data
// changed since the parent planned it).
void check_planned_as(const RunPlan& p, const std::string& expect_id, const std::string& command);
// Throws ufp4::Error naming train.batch when the global batch does not split into `world` ranks of
// whole micro-batches.
void check_data_parallel_batch(const RunPlan& p, int world);
// Throws ufp4::Error naming train.expert_parallel unless its ranks divide `world` and the model's
// routed experts (a MoE model), and the run captures no operands (a rank holds only its experts).
void check_expert_parallel(const RunPlan& p, int world);

}  // namespace ufp4
