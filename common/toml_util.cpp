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

}  // namespace ufp4
