#include "harness/train/run_manifest.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "common/toml_util.h"
#include "harness/data/data.h"
#include "models/model_config.h"
#include "models/recipe.h"

namespace ufp4 {

namespace {

struct Reader {
  std::string file;
  const SourceMap* sources;  // positions recorded at parse time (copies of nodes lose theirs)
  [[noreturn]] void bad(const toml::node&, const std::string& key, const std::string& msg) const {
    throw Error(source_of(*sources, key, file) + ": " + key + ": " + msg);
  }
  void keys(const toml::table& t, const std::string& section, const std::set<std::string>& allowed) const {
    for (auto&& [k, v] : t)
      if (!allowed.count(std::string(k.str()))) {
        std::string a;
        for (const auto& s : allowed) a += (a.empty() ? "" : ", ") + s;
        bad(v, section + "." + std::string(k.str()), "unknown key (allowed: " + a + ")");
      }
  }
  void str(const toml::table& t, const std::string& sec, const char* key, std::string& out, std::set<std::string> allowed = {}) const {
    auto n = t.get(key);
    if (!n) return;
    if (!n->is_string()) bad(*n, sec + "." + key, "expected a string");
    out = n->value_or<std::string>("");
    if (!allowed.empty() && !allowed.count(out)) {
      std::string a;
      for (const auto& s : allowed) a += (a.empty() ? "" : ", ") + s;
      bad(*n, sec + "." + key, "'" + out + "' (allowed: " + a + ")");
    }
  }
  void integer(const toml::table& t, const std::string& sec, const char* key, int64_t& out, int64_t lo, int64_t hi) const {
    auto n = t.get(key);
    if (!n) return;
    if (!n->is_integer()) bad(*n, sec + "." + key, "expected an integer");
    out = n->value_or<int64_t>(0);
    if (out < lo || out > hi) bad(*n, sec + "." + key, std::to_string(out) + " is out of range (allowed: " + std::to_string(lo) + " to " + std::to_string(hi) + ")");
  }
  void boolean(const toml::table& t, const std::string& sec, const char* key, bool& out) const {
    auto n = t.get(key);
    if (!n) return;
    if (!n->is_boolean()) bad(*n, sec + "." + key, "expected true or false");
    out = n->value_or(false);
  }
  void number(const toml::table& t, const std::string& sec, const char* key, double& out, double lo, double hi) const {
    auto n = t.get(key);
    if (!n) return;
    if (!n->is_number()) bad(*n, sec + "." + key, "expected a number");
    out = n->value_or<double>(0);
    if (!(out >= lo && out <= hi)) {
      std::ostringstream os;
      os << out << " is out of range (allowed: " << lo << " to " << hi << ")";
      bad(*n, sec + "." + key, os.str());
    }
  }
};

}  // namespace

namespace {

// The manifest's table with its `extends` chain merged in (parents first), and where each value
// was written. A parent's [sweep] and [ablation] are its own: a child does not inherit them.
toml::table load_chain(const std::string& path, std::vector<std::string>& chain, SourceMap& sources) {
  ExtendsRules rules;
  rules.parent_of = [](const toml::node& v, const std::string& child, const std::string& where) {
    if (!v.is_string()) throw Error(where + ": extends: expected a path to another manifest");
    std::string parent = v.value_or<std::string>("");
    if (!parent.empty() && parent[0] != '/') parent = dir_of(child) + "/" + parent;
    if (!file_exists(parent) || is_dir(parent)) throw Error(where + ": extends: '" + parent + "' not found");
    return parent;
  };
  rules.not_inherited = {"sweep", "ablation"};
  rules.forget_not_inherited_sources = true;
  return load_extends_chain(path, rules, chain, sources);
}

RunManifest from_table(const toml::table& t, const std::string& path, const SourceMap& sources);

}  // namespace

RunManifest RunManifest::load(const std::string& path) {
  std::vector<std::string> chain;
  SourceMap sources;
  toml::table t = load_chain(path, chain, sources);
  return from_table(t, path, sources);
}

namespace {

RunManifest from_table(const toml::table& t, const std::string& path, const SourceMap& sources) {
  Reader r{path, &sources};
  RunManifest m;
  m.path = path;
  std::string stem = path.substr(path.find_last_of('/') + 1);
  m.name = stem.substr(0, stem.rfind('.'));
  const std::set<std::string> sections = {"model", "recipe", "data", "train", "eval", "capture", "outputs", "sweep", "ablation"};
  for (auto&& [k, v] : t) {
    std::string s(k.str());
    if (!sections.count(s))
      r.bad(v, s, "unknown section (allowed: ablation, capture, data, eval, extends, model, outputs, recipe, sweep, train)");
    if (!v.is_table()) r.bad(v, s, "expected a table");
  }
  static const toml::table empty;
  auto sec = [&](const char* s) -> const toml::table& { return t[s].as_table() ? *t[s].as_table() : empty; };
  const toml::table& model = sec("model");
  r.keys(model, "model", {"name", "seq_len"});
  r.str(model, "model", "name", m.model);
  try {
    model_config(m.model);
  } catch (const Error& e) {
    if (auto n = model.get("name")) r.bad(*n, "model.name", e.what());
    throw;
  }
  r.integer(model, "model", "seq_len", m.seq_len, 0, 1 << 20);
  const toml::table& recipe = sec("recipe");
  r.keys(recipe, "recipe", {"name"});
  r.str(recipe, "recipe", "name", m.recipe);
  for (const char* k : {"recipe.name", "data.path", "model.name", "train.steps", "data.max_epochs"}) m.where[k] = source_of(sources, k, path);
  const toml::table& data = sec("data");
  r.keys(data, "data", {"path", "prepare", "tokenizer", "vocab_size", "max_epochs"});
  r.str(data, "data", "path", m.data_path);
  r.str(data, "data", "prepare", m.data_prepare, {"", "ci", "default"});
  r.str(data, "data", "tokenizer", m.tokenizer, {"bpe", "byte"});
  r.integer(data, "data", "vocab_size", m.vocab_size, 300, 65536);
  r.number(data, "data", "max_epochs", m.max_epochs, 1e-9, 4.0);
  const toml::table& train = sec("train");
  r.keys(train, "train", {"steps", "batch", "micro_batch", "lr", "min_lr", "warmup", "schedule", "decay_fraction", "weight_decay", "beta1",
                          "beta2", "eps", "grad_clip", "seed", "checkpoint_every", "log_every", "divergence_factor", "device",
                          "deterministic"});
  r.integer(train, "train", "steps", m.steps, 1, int64_t(1) << 40);
  r.integer(train, "train", "batch", m.batch, 1, 1 << 20);
  r.integer(train, "train", "micro_batch", m.micro_batch, 1, 1 << 20);
  r.number(train, "train", "lr", m.lr, 0, 10);
  r.number(train, "train", "min_lr", m.min_lr, 0, 10);
  r.integer(train, "train", "warmup", m.warmup, 0, int64_t(1) << 40);
  r.str(train, "train", "schedule", m.schedule, {"cosine", "wsd"});
  r.number(train, "train", "decay_fraction", m.decay_fraction, 0, 1);
  r.number(train, "train", "weight_decay", m.weight_decay, 0, 10);
  r.number(train, "train", "beta1", m.beta1, 0, 0.999999);
  r.number(train, "train", "beta2", m.beta2, 0, 0.999999999);
  r.number(train, "train", "eps", m.eps, 0, 1);
  r.number(train, "train", "grad_clip", m.grad_clip, 0, 1e9);
  r.integer(train, "train", "seed", m.seed, 0, int64_t(1) << 62);
  r.integer(train, "train", "checkpoint_every", m.checkpoint_every, 0, int64_t(1) << 40);
  r.integer(train, "train", "log_every", m.log_every, 1, int64_t(1) << 40);
  r.number(train, "train", "divergence_factor", m.divergence_factor, 1, 1e9);
  r.str(train, "train", "device", m.device, {"auto", "cpu", "cuda"});
  r.boolean(train, "train", "deterministic", m.deterministic);
  if (m.batch % m.micro_batch != 0) {
    const std::string key = train.get("micro_batch") ? "train.micro_batch" : "train.batch";
    throw Error(source_of(sources, key, path) + ": train.micro_batch: " + std::to_string(m.micro_batch) + " must divide train.batch (" +
                std::to_string(m.batch) + ")");
  }
  const toml::table& ev = sec("eval");
  r.keys(ev, "eval", {"every", "batches"});
  r.integer(ev, "eval", "every", m.eval_every, 0, int64_t(1) << 40);
  r.integer(ev, "eval", "batches", m.eval_batches, 1, 1 << 20);
  const toml::table& cap = sec("capture");
  r.keys(cap, "capture", {"steps", "layers", "tokens", "telemetry_every"});
  if (auto a = cap.get("steps")) {
    if (!a->is_array()) r.bad(*a, "capture.steps", "expected an array of integers");
    for (auto&& e : *a->as_array()) {
      if (!e.is_integer() || e.value_or<int64_t>(-1) < 0) r.bad(e, "capture.steps", "expected an array of non-negative integers");
      m.capture_steps.push_back(e.value_or<int64_t>(-1));
    }
  }
  if (auto a = cap.get("layers")) {
    if (!a->is_array()) r.bad(*a, "capture.layers", "expected an array of name patterns");
    for (auto&& e : *a->as_array()) {
      if (!e.is_string()) r.bad(e, "capture.layers", "expected an array of name patterns (strings)");
      m.capture_layers.push_back(e.value_or<std::string>(""));
    }
  }
  r.integer(cap, "capture", "tokens", m.capture_tokens, 0, int64_t(1) << 40);
  r.integer(cap, "capture", "telemetry_every", m.telemetry_every, 0, int64_t(1) << 40);
  const toml::table& out = sec("outputs");
  r.keys(out, "outputs", {"dir", "name"});
  r.str(out, "outputs", "dir", m.out_dir);
  r.str(out, "outputs", "name", m.name);
  return m;
}

// Sets "section.key" of a manifest table to `value` (a copy), validating the path; `at` names the
// key that wrote the value (sweep.<field> or ablation.<factor>.levels), for error positions.
void set_field(toml::table& t, const std::string& field, const toml::node& value, const Reader& r, const std::string& at) {
  const size_t dot = field.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == field.size())
    r.bad(value, at, "'" + field + "': a field is written section.key, e.g. recipe.name or train.seed");
  const std::string sec = field.substr(0, dot), key = field.substr(dot + 1);
  if (!t.get(sec)) t.insert(sec, toml::table{});
  if (!t[sec].as_table()) r.bad(value, at, "'" + sec + "' is not a section");
  t[sec].as_table()->insert_or_assign(key, value);
}

std::string label(const toml::node& v) {
  std::string s;
  if (v.is_string()) s = v.value_or<std::string>("");
  else if (v.is_integer()) s = std::to_string(v.value_or<int64_t>(0));
  else if (v.is_floating_point()) { std::ostringstream os; os << v.value_or(0.0); s = os.str(); }
  else if (v.is_boolean()) s = v.value_or(false) ? "true" : "false";
  else s = "value";
  s = s.substr(s.find_last_of('/') + 1);  // paths: the file's stem
  if (s.size() > 5 && s.compare(s.size() - 5, 5, ".toml") == 0) s.resize(s.size() - 5);
  return s;
}

// Sweep leaves: "section.key" -> array of values (nested tables are dotted keys).
void sweep_leaves(const toml::table& t, const std::string& prefix, const Reader& r,
                  std::vector<std::pair<std::string, const toml::array*>>& out) {
  for (auto&& [k, v] : t) {
    std::string f = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (v.is_table()) sweep_leaves(*v.as_table(), f, r, out);
    else if (v.is_array() && !v.as_array()->empty()) out.emplace_back(f, v.as_array());
    else r.bad(v, "sweep." + f, "expected a non-empty list of values");
  }
}

}  // namespace

std::vector<RunManifest> RunManifest::expand(const std::string& path) {
  std::vector<std::string> chain;
  SourceMap sources;
  const toml::table base = load_chain(path, chain, sources);
  const Reader r{path, &sources};
  for (auto&& [k, v] : base)
    if ((k.str() == "sweep" || k.str() == "ablation") && !v.is_table()) r.bad(v, std::string(k.str()), "expected a table");
  struct Variant {
    toml::table t;
    std::string differs, suffix;
    SourceMap moved;  // fields a sweep or ablation set -> where that value was written
  };
  std::vector<Variant> variants = {{base, "", "", {}}};
  if (auto sw = base["sweep"].as_table()) {
    std::vector<std::pair<std::string, const toml::array*>> leaves;
    sweep_leaves(*sw, "", r, leaves);
    for (const auto& [field, values] : leaves) {
      std::vector<Variant> next;
      for (const auto& var : variants)
        for (auto&& v : *values) {
          Variant c = var;
          set_field(c.t, field, v, r, "sweep." + field);
          c.moved[field] = sources["sweep." + field];
          c.differs += (c.differs.empty() ? "" : ", ") + field + "=" + label(v);
          c.suffix += "-" + label(v);
          next.push_back(std::move(c));
        }
      variants = std::move(next);
    }
  }
  if (auto ab = base["ablation"].as_table()) {
    std::vector<Variant> next;
    for (const auto& var : variants) {
      next.push_back(var);  // the base of the ablation
      for (auto&& [factor, spec] : *ab) {
        const std::string fname(factor.str()), at = "ablation." + fname;
        const toml::table* st = spec.as_table();
        if (!st) r.bad(spec, at, "expected a table with field and levels");
        r.keys(*st, at, {"field", "levels"});
        auto field = (*st)["field"].value<std::string>();
        const toml::array* levels = (*st)["levels"].as_array();
        if (!field) r.bad(spec, at + ".field", "expected a field name such as recipe.name");
        if (!levels || levels->empty()) r.bad(spec, at + ".levels", "expected a non-empty list");
        const size_t dot = field->find('.');
        if (dot == std::string::npos) r.bad(spec, at + ".field", "'" + *field + "': a field is written section.key, e.g. recipe.name");
        const std::string sec = field->substr(0, dot), key = field->substr(dot + 1);
        for (auto&& v : *levels) {
          const toml::node* cur = var.t[sec][key].node();
          if (cur && label(*cur) == label(v)) continue;  // the base already has this level
          Variant c = var;
          set_field(c.t, *field, v, r, at + ".levels");
          c.moved[*field] = sources[at + ".levels"];
          c.differs += (c.differs.empty() ? "" : ", ") + fname + ": " + *field + "=" + label(v);
          c.suffix += "-" + fname + "-" + label(v);
          next.push_back(std::move(c));
        }
      }
    }
    variants = std::move(next);
  }
  std::vector<RunManifest> runs;
  for (const auto& var : variants) {
    SourceMap where = sources;
    for (const auto& kv : var.moved) where[kv.first] = kv.second;
    RunManifest m = from_table(var.t, path, where);
    for (char c : var.suffix) m.name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    m.differs = var.differs;
    runs.push_back(m);
  }
  return runs;
}

std::string RunManifest::resolved() const { return canonical(false); }

std::string RunManifest::canonical(bool identity) const {
  std::ostringstream os;
  os.precision(17);
  // In the identity the recipe, model and data are named by their content (RunIdentity), not here.
  if (!identity) os << "[model]\nname = \"" << model << "\"\nseq_len = " << seq_len << "\n\n[recipe]\nname = \"" << recipe << "\"\n\n";
  else os << "[model]\nseq_len = " << seq_len << "\n\n";
  os << "[data]\n";
  if (!identity) os << "path = \"" << data_path << "\"\nprepare = \"" << data_prepare << "\"\ntokenizer = \"" << tokenizer << "\"\nvocab_size = " << vocab_size << "\n";
  os << "\n[train]\nsteps = " << steps << "\nbatch = " << batch << "\nmicro_batch = " << micro_batch << "\nlr = " << lr
     << "\nmin_lr = " << min_lr << "\nwarmup = " << warmup << "\nschedule = \"" << schedule << "\"\ndecay_fraction = " << decay_fraction
     << "\nweight_decay = " << weight_decay << "\nbeta1 = " << beta1 << "\nbeta2 = " << beta2 << "\neps = " << eps
     << "\ngrad_clip = " << grad_clip << "\nseed = " << seed << "\ndivergence_factor = " << divergence_factor
     << "\ndeterministic = " << (deterministic ? "true" : "false") << "\n\n[eval]\nevery = " << eval_every << "\nbatches = " << eval_batches
     << "\n\n[capture]\nsteps = [";
  for (size_t i = 0; i < capture_steps.size(); ++i) os << (i ? ", " : "") << capture_steps[i];
  os << "]\nlayers = [";
  for (size_t i = 0; i < capture_layers.size(); ++i) os << (i ? ", " : "") << "\"" << capture_layers[i] << "\"";
  os << "]\n";
  if (!capture_steps.empty()) os << "tokens = " << capture_tokens << "\n";
  os << "telemetry_every = " << telemetry_every << "\n";
  // Not part of the run: device, checkpoint/log cadence, output folder and name.
  return os.str();
}

RunIdentity RunManifest::identity() const {
  RunIdentity id;
  Recipe r = Recipe::load(recipe);
  id.recipe_sha256 = sha256_hex(r.content());
  ModelConfig mc = model_config(model);
  if (seq_len > 0) mc.seq_len = seq_len;
  id.model_sha256 = sha256_hex(mc.canonical());
  id.data_prepared = data_ready(data_path);
  id.data_sha256 = id.data_prepared ? data_identity(data_path)
                                    : "not prepared (" + data_prepare + ", " + tokenizer + ", vocab " + std::to_string(vocab_size) + ")";
  id.text = canonical(true) + "\n[identity]\nrecipe_sha256 = \"" + id.recipe_sha256 + "\"\nmodel_sha256 = \"" + id.model_sha256 +
            "\"\ndata_manifest_sha256 = \"" + id.data_sha256 + "\"\n";
  return id;
}

std::string RunManifest::run_id() const { return sha256_hex(identity().text).substr(0, 16); }

void RunManifest::check_resolvable() const {
  try {
    model_config(model);
  } catch (const Error& e) {
    throw Error(where.count("model.name") ? where.at("model.name") + ": model.name: " + e.what() : path + ": " + e.what());
  }
  try {
    Recipe::load(recipe);
  } catch (const Error& e) {
    const std::string msg = e.what();
    // An error inside the recipe file names that file's line; one about finding it names ours.
    if (msg.rfind("recipe:", 0) == 0 && where.count("recipe.name")) throw Error(where.at("recipe.name") + ": recipe.name: " + msg.substr(8));
    throw;
  }
}

int64_t RunManifest::train_tokens() const {
  ModelConfig mc = model_config(model);
  return steps * batch * (seq_len > 0 ? seq_len : mc.seq_len);
}

void RunManifest::check_epochs(int64_t corpus_tokens) const {
  const double epochs = corpus_tokens > 0 ? static_cast<double>(train_tokens()) / static_cast<double>(corpus_tokens) : INFINITY;
  if (epochs <= max_epochs) return;
  std::ostringstream os;
  os.precision(3);
  os << (where.count("train.steps") ? where.at("train.steps") : path + ":1") << ": train.steps: run " << name << " asks for "
     << static_cast<double>(train_tokens()) << " tokens, " << epochs << " epochs of the " << corpus_tokens << " training tokens in "
     << data_path << " (allowed: at most data.max_epochs = " << max_epochs
     << "; repeating data turns pretraining into memorisation: use more data, fewer steps, or raise data.max_epochs, up to 4, and say why)";
  throw Error(os.str());
}

double RunManifest::lr_at(int64_t step) const {
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

}  // namespace ufp4
