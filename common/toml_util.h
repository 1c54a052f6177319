// TOML helpers shared by recipes and manifests: field-level merge and `extends` chains.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>
#include <toml++/toml.h>

namespace ufp4 {

// Tables merge recursively; any other value in `over` replaces the one in `base`.
void toml_merge(toml::table& base, const toml::table& over);
// Parses `path`, errors as "file:line: message". Throws ufp4::Error.
toml::table toml_parse(const std::string& path);
// Where each value came from. toml++ drops source positions when a node is copied, as merging
// `extends` chains and expanding sweeps must, so positions are recorded once, right after parsing:
// dotted key ("train.steps", "sweep.train.seed") -> file and line. Later files override earlier ones.
struct SourcePos {
  std::string file;
  int64_t line = 0;
};
using SourceMap = std::map<std::string, SourcePos>;
void record_sources(const toml::table& t, const std::string& file, SourceMap& out, const std::string& prefix = "");
// "file:line" of `key`, or of its closest recorded parent ("train" for "train.steps"), or "fallback:1".
std::string source_of(const SourceMap& sources, const std::string& key, const std::string& fallback);

// The directory part of a path ("." when none).
std::string dir_of(const std::string& path);

}  // namespace ufp4
