// Every field of a run manifest, once: its section and key, type, default (the RunManifest member's
// initial value), allowed values or range, whether it is part of the run, and what it means. The
// parser (run_manifest.cpp), the resolved manifest and run identity (RunManifest::resolved, identity)
// and the field reference (`ufp4 plan --fields`, experiments/FIELDS.md) all read this list.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "harness/plan/run_manifest.h"

namespace ufp4 {

// How a field enters a run's records.
enum class FieldRole {
  kIdentity,     // in the resolved manifest and hashed into the run id
  kByContent,    // in the resolved manifest; the run id hashes what it names (recipe, model, data), not the name
  kOperational,  // neither: how and where the run goes (device, cadence of logs and checkpoints, outputs)
};

using FieldMember = std::variant<std::string RunManifest::*, int64_t RunManifest::*, double RunManifest::*, bool RunManifest::*,
                                 std::vector<int64_t> RunManifest::*, std::vector<std::string> RunManifest::*>;

struct ManifestField {
  const char* section;
  const char* key;
  FieldMember member;
  FieldRole role;
  double lo = 0, hi = 0;              // numbers: the allowed range
  std::vector<std::string> allowed;   // strings: the allowed values (empty: any)
  const char* doc = "";
  // Fields of the first identity text (1) are always in it; a field added later (2, ...) enters the run
  // id only when a manifest sets it away from its default, so adding a field changes no earlier run id.
  int since = 1;
  std::string name() const { return std::string(section) + "." + key; }
};

// In the order of the resolved manifest; sections in kManifestSections' order.
const std::vector<ManifestField>& manifest_fields();
inline const char* const kManifestSections[] = {"model", "recipe", "data", "train", "eval", "capture", "outputs"};

// A field's value in a manifest, as the resolved manifest writes it (strings quoted, lists bracketed).
std::string field_value_text(const ManifestField& f, const RunManifest& m);

// The field reference as Markdown: one table per section (key, type, default, allowed, role, meaning).
std::string manifest_fields_markdown();

}  // namespace ufp4
