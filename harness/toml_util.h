// TOML helpers shared by recipes and manifests: field-level merge and `extends` chains.
#pragma once
#include <string>
#include <vector>
#include <toml++/toml.h>

namespace ufp4 {

// Tables merge recursively; any other value in `over` replaces the one in `base`.
void toml_merge(toml::table& base, const toml::table& over);
// Parses `path`, errors as "file:line: message". Throws ufp4::Error.
toml::table toml_parse(const std::string& path);
// The directory part of a path ("." when none).
std::string dir_of(const std::string& path);

}  // namespace ufp4
