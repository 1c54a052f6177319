#include "harness/train/run_plan.h"

#include "common/error.h"
#include "common/sha256.h"
#include "harness/train/run_files.h"

namespace ufp4 {

RunPlan plan_run(const RunManifest& m) {
  RunPlan p;
  p.manifest = m;
  p.identity = m.identity();
  p.run_id = sha256_hex(p.identity.text).substr(0, 16);
  p.model = model_config(m.model);
  if (m.seq_len > 0) p.model.seq_len = m.seq_len;
  p.recipe = Recipe::load(m.recipe);
  p.data = load_data_info(m.data_path);
  if (p.data.vocab > p.model.vocab && p.data.tokenizer != "external (llm.c shards)")
    throw Error(m.path + ": data vocabulary " + std::to_string(p.data.vocab) + " exceeds model " + p.model.name + "'s " +
                std::to_string(p.model.vocab));
  p.data_train_tokens = count_train_tokens(p.data);
  m.check_epochs(p.data_train_tokens);
  p.tokens_per_step = m.batch * p.model.seq_len;
  p.epochs = static_cast<double>(m.steps) * p.tokens_per_step / static_cast<double>(p.data_train_tokens);
  p.results_path = results_path(m, p.run_id);
  p.checkpoint_path = checkpoint_path(m, p.run_id);
  p.capture_dir = m.out_dir + "/" + m.name + "-" + p.run_id + ".capture";
  return p;
}

}  // namespace ufp4
