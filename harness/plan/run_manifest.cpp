#include "harness/plan/run_manifest.h"

#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>
#include <variant>
#include <toml++/toml.h>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "common/toml_util.h"
#include "harness/data/data.h"
#include "harness/plan/manifest_fields.h"
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
  // One field of the descriptor list into the manifest, checked against its type, range or allowed values.
  void field(const toml::table& t, const ManifestField& f, RunManifest& m) const {
    const std::string sec = f.section;
    std::visit(
        [&](auto member) {
          auto& out = m.*member;
          using T = std::decay_t<decltype(out)>;
          if constexpr (std::is_same_v<T, std::string>) {
            str(t, sec, f.key, out, std::set<std::string>(f.allowed.begin(), f.allowed.end()));
          } else if constexpr (std::is_same_v<T, int64_t>) {
            integer(t, sec, f.key, out, static_cast<int64_t>(f.lo), static_cast<int64_t>(f.hi));
          } else if constexpr (std::is_same_v<T, double>) {
            number(t, sec, f.key, out, f.lo, f.hi);
          } else if constexpr (std::is_same_v<T, bool>) {
            boolean(t, sec, f.key, out);
          } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
            auto a = t.get(f.key);
            if (!a) return;
            if (!a->is_array()) bad(*a, f.name(), "expected an array of integers");
            for (auto&& e : *a->as_array()) {
              if (!e.is_integer() || e.value_or<int64_t>(-1) < 0) bad(e, f.name(), "expected an array of non-negative integers");
              out.push_back(e.value_or<int64_t>(-1));
            }
          } else {
            auto a = t.get(f.key);
            if (!a) return;
            if (!a->is_array()) bad(*a, f.name(), "expected an array of name patterns");
            for (auto&& e : *a->as_array()) {
              if (!e.is_string()) bad(e, f.name(), "expected an array of name patterns (strings)");
              out.push_back(e.value_or<std::string>(""));
            }
          }
        },
        f.member);
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
  for (const char* sec : kManifestSections) {
    const toml::table& st = t[sec].as_table() ? *t[sec].as_table() : empty;
    std::set<std::string> keys;
    for (const auto& f : manifest_fields())
      if (std::string(f.section) == sec) keys.insert(f.key);
    r.keys(st, sec, keys);
    for (const auto& f : manifest_fields()) {
      if (std::string(f.section) != sec) continue;
      r.field(st, f, m);
      if (f.name() == "model.name") {
        try {
          check_model_name(m.model);
        } catch (const Error& e) {
          if (auto n = st.get("name")) r.bad(*n, "model.name", e.what());
          throw;
        }
      }
    }
  }
  for (const char* k : {"recipe.name", "data.path", "model.name", "train.steps", "train.batch", "data.max_epochs"}) m.where[k] = source_of(sources, k, path);
  if (m.batch % m.micro_batch != 0) {
    const toml::table* train = t["train"].as_table();
    const std::string key = train && train->get("micro_batch") ? "train.micro_batch" : "train.batch";
    throw Error(source_of(sources, key, path) + ": train.micro_batch: " + std::to_string(m.micro_batch) + " must divide train.batch (" +
                std::to_string(m.batch) + ")");
  }
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
    const std::string base_name = base["outputs"]["name"].value_or(std::string());
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
          c.suffix += "-" + (fname == base_name ? "" : fname + "-") + label(v);  // "rht_size-ufp4_rht32", not "rht_size-rht_size-ufp4_rht32"
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
    // Two runs under one name could not be told apart by --only, logs or reports: refuse, naming both
    // and the line of a level that made the name.
    for (const auto& other : runs)
      if (other.name == m.name) {
        const std::string at = var.moved.empty() ? path + ":1: sweep" : var.moved.begin()->second.file + ":" + std::to_string(var.moved.begin()->second.line) + ": " + var.moved.begin()->first;
        throw Error(at + ": two runs are both named '" + m.name + "' (" + (other.differs.empty() ? "the base" : other.differs) + "; " +
                    (m.differs.empty() ? "the base" : m.differs) + "): give levels that differ once made file-safe");
      }
    runs.push_back(m);
  }
  return runs;
}

std::string RunManifest::resolved() const { return canonical(false); }

std::string RunManifest::canonical(bool identity) const {
  static const RunManifest defaults;
  std::ostringstream os;
  bool first = true;
  for (const char* sec : kManifestSections) {
    std::string body;
    for (const auto& f : manifest_fields()) {
      if (std::string(f.section) != sec || f.role == FieldRole::kOperational) continue;
      if (identity && f.role == FieldRole::kByContent) continue;  // the identity names these by content (RunIdentity)
      if (f.name() == "capture.tokens" && capture_steps.empty()) continue;  // no capture: the token count does not matter
      if (f.since > 1 && field_value_text(f, *this) == field_value_text(f, defaults)) continue;  // a later field at its default
      body += std::string(f.key) + " = " + field_value_text(f, *this) + "\n";
    }
    // [data] stays in the identity with no fields, as every run id so far has hashed it.
    if (body.empty() && std::string(sec) != "data") continue;
    os << (first ? "" : "\n") << "[" << sec << "]\n" << body;
    first = false;
  }
  return os.str();
}

}  // namespace ufp4
