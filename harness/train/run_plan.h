// A run resolved once, before it trains: its manifest, identity and id, the model, recipe and data it
// names, where its files go and how much of the data it will see. The trainer runs a plan; nothing
// downstream reads the manifest's names again.
#pragma once
#include <cstdint>
#include <string>

#include "harness/data/data.h"
#include "harness/train/run_manifest.h"
#include "models/model_config.h"
#include "models/recipe.h"

namespace ufp4 {

struct RunPlan {
  RunManifest manifest;
  RunIdentity identity;
  std::string run_id;  // first 16 hex digits of SHA-256(identity.text)
  ModelConfig model;   // the manifest's seq_len applied
  Recipe recipe;
  DataInfo data;
  int64_t data_train_tokens = 0;
  int64_t tokens_per_step = 0;
  double epochs = 0;  // tokens the run trains on / data_train_tokens
  std::string results_path, checkpoint_path, capture_dir;
};

// Resolves a manifest whose data is prepared (ensure_data). Throws ufp4::Error, naming the manifest,
// when the data's vocabulary exceeds the model's or the run would exceed data.max_epochs.
RunPlan plan_run(const RunManifest& m);

}  // namespace ufp4
