#include "common/toml_util.h"

#include "common/error.h"

namespace ufp4 {

void toml_merge(toml::table& base, const toml::table& over) {
  for (auto&& [k, v] : over) {
    if (v.is_table() && base.get(k) && base.get(k)->is_table()) toml_merge(*base.get(k)->as_table(), *v.as_table());
    else base.insert_or_assign(k, v);
  }
}

toml::table toml_parse(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw Error(path + ":" + std::to_string(e.source().begin.line) + ": " + std::string(e.description()));
  } catch (const std::exception& e) {
    throw Error(path + ": cannot read (" + e.what() + ")");
  }
}

void record_sources(const toml::table& t, const std::string& file, SourceMap& out, const std::string& prefix) {
  for (auto&& [k, v] : t) {
    const std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
    const auto& src = v.source();
    // A value's own position; a key of an inline or implicit table may carry only the key's.
    int64_t line = static_cast<int64_t>(src.begin.line);
    if (line == 0) line = static_cast<int64_t>(k.source().begin.line);
    out[key] = {src.path ? *src.path : file, line};
    if (const toml::table* sub = v.as_table()) record_sources(*sub, file, out, key);
  }
}

std::string source_of(const SourceMap& sources, const std::string& key, const std::string& fallback) {
  for (std::string k = key;;) {
    auto it = sources.find(k);
    if (it != sources.end() && it->second.line > 0) return it->second.file + ":" + std::to_string(it->second.line);
    const size_t dot = k.find_last_of('.');
    if (dot == std::string::npos) break;
    k.resize(dot);
  }
  return fallback + ":1";
}

std::string dir_of(const std::string& path) {
  size_t s = path.find_last_of('/');
  return s == std::string::npos ? "." : path.substr(0, s);
}

toml::table load_extends_chain(const std::string& path, const ExtendsRules& rules, std::vector<std::string>& chain, SourceMap& sources) {
  for (const auto& c : chain)
    if (c == path) throw Error(path + ":1: extends forms a cycle (" + chain.front() + ")");
  chain.push_back(path);
  toml::table t = toml_parse(path);
  if (rules.check) rules.check(path, t);
  SourceMap own;
  record_sources(t, path, own);
  toml::table merged;
  if (const toml::node* ext = t.get("extends")) {
    merged = load_extends_chain(rules.parent_of(*ext, path, source_of(own, "extends", path)), rules, chain, sources);
    for (const auto& key : rules.not_inherited) {
      merged.erase(key);
      if (rules.forget_not_inherited_sources)
        for (auto it = sources.begin(); it != sources.end();)
          it = (it->first == key || it->first.rfind(key + ".", 0) == 0) ? sources.erase(it) : std::next(it);
    }
    toml_merge(merged, t);
    merged.erase("extends");
  } else {
    merged = std::move(t);
  }
  for (auto& kv : own) sources[kv.first] = kv.second;
  return merged;
}

}  // namespace ufp4
