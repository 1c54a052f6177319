// A run manifest: one TOML table per concern ([model], [recipe], [data], [train], [eval], [capture],
// [outputs]), `extends = "other.toml"` with field-level override, and optionally [sweep] (fields with
// lists of values: every combination) or [ablation.<factor>] (field, levels: each changed alone).
// Validated before anything runs; errors read "file:line: key: message (allowed: ...)". A manifest only
// parses and expands: what it names (model, recipe, data) is resolved once, by plan_run
// (harness/plan/run_plan.h), which hashes the fields that change the result into the run id.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ufp4 {

// The members hold the fields' values and defaults; harness/plan/manifest_fields.cpp describes each
// (type, allowed values, role in the run id, meaning) for the parser, the resolved form and the docs.
struct RunManifest {
  std::string path;
  // [model]
  std::string model = "tiny";
  int64_t seq_len = 0;  // 0: the model's
  // [recipe]
  std::string recipe = "bf16";
  // [data]
  std::string data_path = "data/ci";
  std::string data_prepare = "";  // "", "ci" or "default": what to prepare when data_path lacks data
  std::string tokenizer = "bpe";
  int64_t vocab_size = 32768;
  // A run may see its training data at most this many times (1: one epoch). Not part of the run's
  // identity; above 1 a manifest says why in a comment; never above 4.
  double max_epochs = 1.0;
  // [train]
  int64_t steps = 100, batch = 8, micro_batch = 8;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, eps = 1e-8, grad_clip = 1.0;
  int64_t warmup = 10;
  std::string schedule = "cosine";  // cosine | wsd
  double decay_fraction = 0.2;      // wsd: the final fraction of steps that decays
  int64_t seed = 1, checkpoint_every = 100, log_every = 10;
  double divergence_factor = 3.0;   // a loss above factor x the best smoothed loss (after warmup) stops the run
  std::string device = "auto";
  bool deterministic = true;        // bit-identical GPU runs (harness/train/determinism.h); false only when asked
  bool cuda_graph = true;           // replay the step as a CUDA graph where it can be (harness/train/step_graph.h): the same bits
  std::string rht_signs = "per_seed";  // per_seed | recipe (models/quant_linear.h rht_sign_seed)
  int64_t expert_parallel = 1;      // ranks that split the routed experts (harness/train/data_parallel.h); --ep overrides
  // [eval]
  int64_t eval_every = 50, eval_batches = 4;
  std::string eval_final = "batches";  // batches | split: the last evaluation over every window of the validation split
  // [capture]
  std::vector<int64_t> capture_steps;
  std::vector<std::string> capture_layers;
  int64_t capture_tokens = 2048;  // token-indexed operands keep their first N tokens (0: all)
  int64_t telemetry_every = 0;
  // [outputs]
  std::string out_dir = "results/runs";
  std::string name;     // default: the file's stem; expanded runs append what differs
  std::string differs;  // for runs of a sweep or ablation: the fields changed from the base
  std::map<std::string, std::string> where;  // "file:line" of the keys resolved later (recipe.name, data.path)

  // The base run of a manifest (after `extends`). Throws ufp4::Error.
  static RunManifest load(const std::string& path);
  // Every run of a manifest: the cartesian product of its [sweep] fields, and for [ablation] the base
  // plus each factor's levels changed alone (paper Appendix B style).
  static std::vector<RunManifest> expand(const std::string& path);
  std::string resolved() const;  // canonical TOML of every field (results' "manifest")
  // The fields that make a run what it is, as canonical TOML: those that change the result, a field
  // added later only where it differs from its default (so a new field moves no existing run id), and
  // none that run_plan.h's identity names by content (recipe, data). plan_run hashes it into the run id.
  std::string identity_fields() const { return canonical(true); }

 private:
  std::string canonical(bool identity) const;
};

}  // namespace ufp4
