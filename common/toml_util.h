// TOML helpers shared by recipes and manifests: field-level merge and `extends` chains.
#pragma once
#include <cstdint>
#include <functional>
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

// An `extends` chain, as recipes and manifests both read theirs: the file at `path` merged over its
// parents (field by field, the child's values winning), with where each value was written (a
// child's positions replace its parent's). What differs between the two kinds of file is in the rules.
struct ExtendsRules {
  // The parent's path for a child's `extends` value, written at `where` ("file:line"); throws ufp4::Error.
  std::function<std::string(const toml::node& value, const std::string& child, const std::string& where)> parent_of;
  // Checks each file as parsed, before merging (optional).
  std::function<void(const std::string& path, const toml::table& t)> check;
  // Top-level keys a child never inherits from its parent.
  std::vector<std::string> not_inherited;
  bool forget_not_inherited_sources = false;  // and drop their recorded positions too
};
// `chain` receives the files read, the given one first. A file that extends itself, directly or
// not, is an error ("file:1: extends forms a cycle (first file)"). The result has no `extends` key.
toml::table load_extends_chain(const std::string& path, const ExtendsRules& rules, std::vector<std::string>& chain, SourceMap& sources);

}  // namespace ufp4
