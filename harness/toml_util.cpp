#include "harness/toml_util.h"

#include "harness/error.h"

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

std::string dir_of(const std::string& path) {
  size_t s = path.find_last_of('/');
  return s == std::string::npos ? "." : path.substr(0, s);
}

}  // namespace ufp4
