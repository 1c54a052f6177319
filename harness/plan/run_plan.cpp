#include "harness/plan/run_plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "harness/plan/run_files.h"

namespace ufp4 {

namespace {

// "file:line: key: message", or the manifest's path where the key's line is unknown.
std::string at_key(const RunPlan& p, const std::string& key) {
  return p.where.count(key) ? p.where.at(key) + ": " + key : p.manifest_path + ": " + key;
}

ModelConfig resolve_model(const RunManifest& m) {
  try {
    ModelConfig c = model_config(m.model);
    if (m.seq_len > 0) c.seq_len = m.seq_len;
    return c;
  } catch (const Error& e) {
    throw Error(m.where.count("model.name") ? m.where.at("model.name") + ": model.name: " + e.what() : m.path + ": " + e.what());
  }
}

Recipe resolve_recipe(const RunManifest& m) {
  try {
    return Recipe::load(m.recipe);
  } catch (const Error& e) {
    const std::string msg = e.what();
    // An error inside the recipe file names that file's line; one about finding it names ours.
    if (msg.rfind("recipe:", 0) == 0 && m.where.count("recipe.name")) throw Error(m.where.at("recipe.name") + ": recipe.name: " + msg.substr(8));
    throw;
  }
}

TrainSection train_section(const RunManifest& m) {
  return {m.steps, m.batch, m.micro_batch, m.seed, m.divergence_factor, m.device, m.deterministic, m.cuda_graph, m.rht_signs == "recipe", m.expert_parallel};
}


// A prepared folder's description and training tokens, read once per folder and content in this
// process: a campaign plans every run of its seeds against the same folder.
struct PreparedData {
  DataInfo info;
  int64_t train_tokens = 0;
};
const PreparedData& prepared_data(const std::string& dir, const std::string& content) {
  static std::map<std::string, PreparedData> read;
  const std::string key = dir + "\n" + content;
  if (auto it = read.find(key); it != read.end()) return it->second;
  PreparedData d;
  d.info = load_data_info(dir);
  d.train_tokens = count_train_tokens(d.info);
  return read.emplace(key, std::move(d)).first->second;
}

// The data's part of the identity and everything that follows from the run id: the data named by
// content as it stands now (prepared here, pinned by a campaign, or not prepared yet), the id, the
// files, and the epochs once the data exists.
void resolve_data(RunPlan& p) {
  RunIdentity& id = p.identity;
  const DataSource& s = p.data_source;
  id.data_prepared = data_ready(s.path);
  const std::string pin = pinned_data_manifest(s.path);
  id.data_sha256 = id.data_prepared ? data_identity(s.path)
                   : !pin.empty()   ? sha256_hex(read_text_file(pin))
                                    : "not prepared (" + s.prepare + ", " + s.tokenizer + ", vocab " + std::to_string(s.vocab_size) + ")";
  id.data_pinned = !id.data_prepared && !pin.empty();
  id.text = id.fields + "\n[identity]\nrecipe_sha256 = \"" + id.recipe_sha256 + "\"\nmodel_sha256 = \"" + id.model_sha256 +
            "\"\ndata_manifest_sha256 = \"" + id.data_sha256 + "\"\n";
  p.run_id = sha256_hex(id.text).substr(0, 16);  // the one place a run id is computed
  const std::string stem = run_file_stem(p.out_dir, p.name, p.run_id);
  p.results_path = stem + ".h5";
  p.checkpoint.path = stem + ".ckpt";
  p.lock_path = stem + ".lock";
  p.capture.dir = stem + ".capture";
  if (id.data_prepared) {
    const PreparedData& d = prepared_data(s.path, id.data_sha256);
    p.data = d.info;
    p.data_train_tokens = d.train_tokens;
  } else {
    p.data = DataInfo{};
    p.data_train_tokens = 0;
  }
  p.epochs = !id.data_prepared        ? -1
             : p.data_train_tokens > 0 ? static_cast<double>(p.train_tokens) / static_cast<double>(p.data_train_tokens)
                                       : INFINITY;
}

}  // namespace

double OptimizerSection::lr_at(int64_t step) const {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const double pi = 3.14159265358979323846;
  if (schedule == "cosine") {
    double t = steps > warmup ? static_cast<double>(step - warmup) / static_cast<double>(steps - warmup) : 1.0;
    return min_lr + 0.5 * (lr - min_lr) * (1 + std::cos(pi * std::min(1.0, t)));
  }
  // WSD: warmup, stable at lr, then linear decay to min_lr over the final decay_fraction of steps.
  const int64_t decay_start = steps - static_cast<int64_t>(std::llround(decay_fraction * static_cast<double>(steps)));
  if (step < decay_start) return lr;
  double t = static_cast<double>(step - decay_start) / std::max<double>(1.0, static_cast<double>(steps - decay_start));
  return lr + (min_lr - lr) * std::min(1.0, t);
}

std::string recipe_stem(const std::string& recipe_file) {
  std::string r = recipe_file.substr(recipe_file.find_last_of('/') + 1);
  if (r.size() > 5 && r.compare(r.size() - 5, 5, ".toml") == 0) r.resize(r.size() - 5);
  return r;
}

OptimizerSection optimizer_section(const RunManifest& m) {
  return {m.lr, m.min_lr, m.weight_decay, m.beta1, m.beta2, m.eps, m.grad_clip, m.warmup, m.steps, m.schedule, m.decay_fraction};
}

RunPlan plan_run(const RunManifest& m) {
  RunPlan p;
  p.name = m.name;
  p.manifest_path = m.path;
  p.differs = m.differs;
  p.recipe_file = m.recipe;
  p.resolved_manifest = m.resolved();
  p.where = m.where;
  p.model = resolve_model(m);
  p.recipe = resolve_recipe(m);
  p.data_source = {m.data_path, m.data_prepare, m.tokenizer, m.vocab_size};
  p.max_epochs = m.max_epochs;
  p.identity.recipe_sha256 = sha256_hex(p.recipe.content());
  p.identity.model_sha256 = sha256_hex(p.model.canonical());
  p.tokens_per_step = m.batch * p.model.seq_len;
  p.train_tokens = m.steps * p.tokens_per_step;
  p.out_dir = m.out_dir;
  p.train = train_section(m);
  p.optimizer = optimizer_section(m);
  p.eval = {m.eval_every, m.eval_batches, m.eval_final == "split"};
  p.checkpoint.every = m.checkpoint_every;
  p.capture.steps = m.capture_steps;
  p.capture.layers = m.capture_layers;
  p.capture.tokens = m.capture_tokens;
  p.capture.telemetry_every = m.telemetry_every;
  p.identity.fields = m.identity_fields();
  resolve_data(p);
  return p;
}

namespace {

void check_trainable(const RunPlan& p) {
  if (!p.data_prepared()) (void)load_data_info(p.data_source.path);  // throws, naming what the folder lacks
  if (p.data.vocab > p.model.vocab && p.data.tokenizer != "external (llm.c shards)")
    throw Error(p.manifest_path + ": data vocabulary " + std::to_string(p.data.vocab) + " exceeds model " + p.model.name + "'s " +
                std::to_string(p.model.vocab));
  if (p.epochs <= p.max_epochs) return;
  std::ostringstream os;
  os.precision(3);
  os << (p.where.count("train.steps") ? p.where.at("train.steps") : p.manifest_path + ":1") << ": train.steps: run " << p.name << " asks for "
     << static_cast<double>(p.train_tokens) << " tokens, " << p.epochs << " epochs of the " << p.data_train_tokens << " training tokens in "
     << p.data_source.path << " (allowed: at most data.max_epochs = " << p.max_epochs
     << "; repeating data turns pretraining into memorisation: use more data, fewer steps, or raise data.max_epochs, up to 4, and say why)";
  throw Error(os.str());
}

}  // namespace

void settle_data(RunPlan& p) {
  resolve_data(p);
  check_trainable(p);
}

void check_planned_as(const RunPlan& p, const std::string& expect_id, const std::string& command) {
  if (!expect_id.empty() && p.run_id != expect_id)
    throw Error(command + ": " + p.name + " plans as run " + p.run_id + ", not the run " + expect_id +
                " it was started for: its manifest, recipe or data changed since the parent planned it");
}

void check_data_parallel_batch(const RunPlan& p, int world) {
  const TrainSection& t = p.train;
  if (t.batch % (world * t.micro_batch) == 0) return;
  throw Error(at_key(p, "train.batch") + ": " + std::to_string(t.batch) + " sequences do not split over " + std::to_string(world) +
              " ranks in micro-batches of " + std::to_string(t.micro_batch) + " (allowed: a multiple of " + std::to_string(world * t.micro_batch) + ")");
}

void check_expert_parallel(const RunPlan& p, int world) {
  const int64_t ep = p.train.expert_parallel;
  if (ep <= 1) return;
  const std::string at = at_key(p, "train.expert_parallel") + ": " + std::to_string(ep) + " ranks";
  if (!p.model.is_moe()) throw Error(at + ": " + p.model.name + " has no routed experts (allowed: 1, or a MoE model)");
  if (p.model.n_experts % ep != 0)
    throw Error(at + " do not split " + p.model.name + "'s " + std::to_string(p.model.n_experts) + " experts (allowed: a divisor of the experts)");
  if (world % ep != 0)
    throw Error(at + " do not divide the run's " + std::to_string(world) + " rank(s) (allowed: a divisor of the ranks; launch with --nproc-per-node, torchrun or srun)");
  if (!p.capture.steps.empty()) throw Error(at + ": [capture] is not allowed with expert parallelism (a rank sees only its own experts' operands)");
}

}  // namespace ufp4
