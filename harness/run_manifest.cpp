#include "harness/run_manifest.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <toml++/toml.h>

#include "harness/error.h"
#include "harness/sha256.h"
#include "harness/toml_util.h"

namespace ufp4 {

namespace {

struct Reader {
  std::string file;
  [[noreturn]] void bad(const toml::node& n, const std::string& key, const std::string& msg) const {
    const std::string f = n.source().path ? *n.source().path : file;  // the file that holds the value
    throw Error(f + ":" + std::to_string(n.source().begin.line) + ": " + key + ": " + msg);
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

// The manifest's table with its `extends` chain merged in (parents first).
toml::table load_chain(const std::string& path, std::vector<std::string>& chain) {
  for (const auto& c : chain)
    if (c == path) throw Error(path + ": extends forms a cycle");
  chain.push_back(path);
  toml::table t = toml_parse(path);
  if (auto ext = t.get("extends")) {
    if (!ext->is_string()) Reader{path}.bad(*ext, "extends", "expected a path to another manifest");
    std::string parent = ext->value_or<std::string>("");
    if (!parent.empty() && parent[0] != '/') parent = dir_of(path) + "/" + parent;
    toml::table base = load_chain(parent, chain);
    base.erase("sweep");
    base.erase("ablation");
    toml_merge(base, t);
    base.erase("extends");
    return base;
  }
  return t;
}

RunManifest from_table(const toml::table& t, const std::string& path);

}  // namespace

RunManifest RunManifest::load(const std::string& path) {
  std::vector<std::string> chain;
  return from_table(load_chain(path, chain), path);
}

namespace {

RunManifest from_table(const toml::table& t, const std::string& path) {
  Reader r{path};
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
  r.integer(model, "model", "seq_len", m.seq_len, 0, 1 << 20);
  const toml::table& recipe = sec("recipe");
  r.keys(recipe, "recipe", {"name"});
  r.str(recipe, "recipe", "name", m.recipe);
  const toml::table& data = sec("data");
  r.keys(data, "data", {"path", "prepare", "tokenizer", "vocab_size"});
  r.str(data, "data", "path", m.data_path);
  r.str(data, "data", "prepare", m.data_prepare, {"", "ci", "default"});
  r.str(data, "data", "tokenizer", m.tokenizer, {"bpe", "byte"});
  r.integer(data, "data", "vocab_size", m.vocab_size, 300, 65536);
  const toml::table& train = sec("train");
  r.keys(train, "train", {"steps", "batch", "micro_batch", "lr", "min_lr", "warmup", "schedule", "decay_fraction", "weight_decay", "beta1",
                          "beta2", "eps", "grad_clip", "seed", "checkpoint_every", "log_every", "divergence_factor", "device"});
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
  if (m.batch % m.micro_batch != 0) {
    auto n = train.get("micro_batch");
    throw Error(path + ":" + std::to_string(n ? n->source().begin.line : 1) + ": train.micro_batch: " + std::to_string(m.micro_batch) +
                " must divide train.batch (" + std::to_string(m.batch) + ")");
  }
  const toml::table& ev = sec("eval");
  r.keys(ev, "eval", {"every", "batches"});
  r.integer(ev, "eval", "every", m.eval_every, 0, int64_t(1) << 40);
  r.integer(ev, "eval", "batches", m.eval_batches, 1, 1 << 20);
  const toml::table& cap = sec("capture");
  r.keys(cap, "capture", {"steps", "layers", "tokens", "telemetry_every"});
  if (auto a = cap.get("steps")) {
    if (!a->is_array()) r.bad(*a, "capture.steps", "expected an array of integers");
    for (auto&& e : *a->as_array()) m.capture_steps.push_back(e.value_or<int64_t>(-1));
  }
  if (auto a = cap.get("layers")) {
    if (!a->is_array()) r.bad(*a, "capture.layers", "expected an array of name patterns");
    for (auto&& e : *a->as_array()) m.capture_layers.push_back(e.value_or<std::string>(""));
  }
  r.integer(cap, "capture", "tokens", m.capture_tokens, 0, int64_t(1) << 40);
  r.integer(cap, "capture", "telemetry_every", m.telemetry_every, 0, int64_t(1) << 40);
  const toml::table& out = sec("outputs");
  r.keys(out, "outputs", {"dir", "name"});
  r.str(out, "outputs", "dir", m.out_dir);
  r.str(out, "outputs", "name", m.name);
  return m;
}

// Sets "section.key" of a manifest table to `value` (a copy), validating the path.
void set_field(toml::table& t, const std::string& field, const toml::node& value, const std::string& path, const toml::node& where) {
  const size_t dot = field.find('.');
  if (dot == std::string::npos) Reader{path}.bad(where, field, "a field is written section.key, e.g. recipe.name or train.seed");
  const std::string sec = field.substr(0, dot), key = field.substr(dot + 1);
  if (!t.get(sec)) t.insert(sec, toml::table{});
  if (!t[sec].as_table()) Reader{path}.bad(where, field, "'" + sec + "' is not a section");
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
void sweep_leaves(const toml::table& t, const std::string& prefix, const std::string& path,
                  std::vector<std::pair<std::string, const toml::array*>>& out) {
  for (auto&& [k, v] : t) {
    std::string f = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    if (v.is_table()) sweep_leaves(*v.as_table(), f, path, out);
    else if (v.is_array() && !v.as_array()->empty()) out.emplace_back(f, v.as_array());
    else Reader{path}.bad(v, "sweep." + f, "expected a non-empty list of values");
  }
}

}  // namespace

std::vector<RunManifest> RunManifest::expand(const std::string& path) {
  std::vector<std::string> chain;
  const toml::table base = load_chain(path, chain);
  struct Variant {
    toml::table t;
    std::string differs, suffix;
  };
  std::vector<Variant> variants = {{base, "", ""}};
  if (auto sw = base["sweep"].as_table()) {
    std::vector<std::pair<std::string, const toml::array*>> leaves;
    sweep_leaves(*sw, "", path, leaves);
    for (const auto& [field, values] : leaves) {
      std::vector<Variant> next;
      for (const auto& [t, d, sfx] : variants)
        for (auto&& v : *values) {
          toml::table c = t;
          set_field(c, field, v, path, v);
          next.push_back({c, d + (d.empty() ? "" : ", ") + field + "=" + label(v), sfx + "-" + label(v)});
        }
      variants = std::move(next);
    }
  }
  if (auto ab = base["ablation"].as_table()) {
    std::vector<Variant> next;
    for (const auto& [t, d, sfx] : variants) {
      next.push_back({t, d, sfx});  // the base of the ablation
      for (auto&& [factor, spec] : *ab) {
        const std::string fname(factor.str());
        const toml::table* st = spec.as_table();
        if (!st) Reader{path}.bad(spec, "ablation." + fname, "expected a table with field and levels");
        Reader{path}.keys(*st, "ablation." + fname, {"field", "levels"});
        auto field = (*st)["field"].value<std::string>();
        const toml::array* levels = (*st)["levels"].as_array();
        if (!field) Reader{path}.bad(spec, "ablation." + fname + ".field", "expected a field name such as recipe.name");
        if (!levels || levels->empty()) Reader{path}.bad(spec, "ablation." + fname + ".levels", "expected a non-empty list");
        const std::string sec = field->substr(0, field->find('.')), key = field->substr(field->find('.') + 1);
        for (auto&& v : *levels) {
          const toml::node* cur = t[sec][key].node();
          if (cur && label(*cur) == label(v)) continue;  // the base already has this level
          toml::table c = t;
          set_field(c, *field, v, path, v);
          next.push_back({c, d + (d.empty() ? "" : ", ") + fname + ": " + *field + "=" + label(v), sfx + "-" + fname + "-" + label(v)});
        }
      }
    }
    variants = std::move(next);
  }
  std::vector<RunManifest> runs;
  for (const auto& [t, d, sfx] : variants) {
    RunManifest m = from_table(t, path);
    for (char c : sfx) m.name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
    m.differs = d;
    runs.push_back(m);
  }
  return runs;
}

std::string RunManifest::resolved() const {
  std::ostringstream os;
  os.precision(17);
  os << "[model]\nname = \"" << model << "\"\nseq_len = " << seq_len << "\n\n[recipe]\nname = \"" << recipe << "\"\n\n[data]\npath = \""
     << data_path << "\"\nprepare = \"" << data_prepare << "\"\ntokenizer = \"" << tokenizer << "\"\nvocab_size = " << vocab_size
     << "\n\n[train]\nsteps = " << steps << "\nbatch = " << batch << "\nmicro_batch = " << micro_batch << "\nlr = " << lr
     << "\nmin_lr = " << min_lr << "\nwarmup = " << warmup << "\nschedule = \"" << schedule << "\"\ndecay_fraction = " << decay_fraction
     << "\nweight_decay = " << weight_decay << "\nbeta1 = " << beta1 << "\nbeta2 = " << beta2 << "\neps = " << eps
     << "\ngrad_clip = " << grad_clip << "\nseed = " << seed << "\ndivergence_factor = " << divergence_factor << "\n\n[eval]\nevery = "
     << eval_every << "\nbatches = " << eval_batches << "\n\n[capture]\nsteps = [";
  for (size_t i = 0; i < capture_steps.size(); ++i) os << (i ? ", " : "") << capture_steps[i];
  os << "]\nlayers = [";
  for (size_t i = 0; i < capture_layers.size(); ++i) os << (i ? ", " : "") << "\"" << capture_layers[i] << "\"";
  os << "]\n";
  if (!capture_steps.empty()) os << "tokens = " << capture_tokens << "\n";  // only then: older run ids stay valid
  os << "telemetry_every = " << telemetry_every << "\n";
  // Not part of the identity: device, checkpoint/log cadence, output folder and name.
  return os.str();
}

std::string RunManifest::run_id() const { return sha256_hex(resolved()).substr(0, 16); }

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
