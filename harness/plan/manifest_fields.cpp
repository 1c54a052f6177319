#include "harness/plan/manifest_fields.h"

#include <sstream>

namespace ufp4 {

namespace {

using M = RunManifest;
constexpr double kSteps = static_cast<double>(int64_t(1) << 40), kSize = 1 << 20;
constexpr FieldRole kId = FieldRole::kIdentity, kContent = FieldRole::kByContent, kOp = FieldRole::kOperational;

}  // namespace

const std::vector<ManifestField>& manifest_fields() {
  static const std::vector<ManifestField> fields = {
      {"model", "name", &M::model, kContent, 0, 0, {}, "a model of the registry (`ufp4 plan --model NAME` shows one; models/model_config.cpp)"},
      {"model", "seq_len", &M::seq_len, kId, 0, kSize, {}, "tokens per sequence; 0: the model's"},
      {"recipe", "name", &M::recipe, kContent, 0, 0, {}, "a recipe name (models/recipes/) or a path to a recipe .toml"},
      {"data", "path", &M::data_path, kContent, 0, 0, {}, "folder of the prepared data (data.toml and shards)"},
      {"data", "prepare", &M::data_prepare, kContent, 0, 0, {"", "ci", "default"},
       "what `ufp4 run` prepares when the folder has no data: the synthetic CI corpus or the default corpus; empty: nothing"},
      {"data", "tokenizer", &M::tokenizer, kContent, 0, 0, {"bpe", "byte"}, "for prepare: SentencePiece BPE or bytes"},
      {"data", "vocab_size", &M::vocab_size, kContent, 300, 65536, {}, "for prepare with bpe: the vocabulary size"},
      {"data", "max_epochs", &M::max_epochs, kOp, 1e-9, 4.0, {},
       "the most passes over the training tokens a run may make; above 1 the manifest says why in a comment"},
      {"train", "steps", &M::steps, kId, 1, kSteps, {}, "optimizer steps"},
      {"train", "batch", &M::batch, kId, 1, kSize, {}, "sequences per step"},
      {"train", "micro_batch", &M::micro_batch, kId, 1, kSize, {}, "sequences per forward-backward pass (divides batch; gradients accumulate)"},
      {"train", "lr", &M::lr, kId, 0, 10, {}, "peak learning rate"},
      {"train", "min_lr", &M::min_lr, kId, 0, 10, {}, "learning rate at the end of the schedule"},
      {"train", "warmup", &M::warmup, kId, 0, kSteps, {}, "linear warmup steps"},
      {"train", "schedule", &M::schedule, kId, 0, 0, {"cosine", "wsd"}, "after warmup: cosine decay, or warmup-stable-decay"},
      {"train", "decay_fraction", &M::decay_fraction, kId, 0, 1, {}, "wsd: the final fraction of the steps that decays"},
      {"train", "weight_decay", &M::weight_decay, kId, 0, 10, {}, "AdamW weight decay"},
      {"train", "beta1", &M::beta1, kId, 0, 0.999999, {}, "AdamW beta1"},
      {"train", "beta2", &M::beta2, kId, 0, 0.999999999, {}, "AdamW beta2"},
      {"train", "eps", &M::eps, kId, 0, 1, {}, "AdamW epsilon"},
      {"train", "grad_clip", &M::grad_clip, kId, 0, 1e9, {}, "global gradient-norm clipping threshold"},
      {"train", "seed", &M::seed, kId, 0, static_cast<double>(int64_t(1) << 62), {},
       "initial weights, data order, SR and RHT keys; recipes of one seed share weights and batches"},
      {"train", "rht_signs", &M::rht_signs, kId, 0, 0, {"per_seed", "recipe"},
       "RHT sign vectors: drawn from the recipe's seed and train.seed (each seed its own draw; seed 1 keeps the recipe's), or the recipe's for every seed", 2},
      {"train", "checkpoint_every", &M::checkpoint_every, kOp, 0, kSteps, {}, "steps between checkpoints (0: only when stopped)"},
      {"train", "log_every", &M::log_every, kOp, 1, kSteps, {}, "steps between progress lines"},
      {"train", "divergence_factor", &M::divergence_factor, kId, 1, 1e9, {},
       "a loss above this factor times the best smoothed loss (after warmup) stops the run as diverged"},
      {"train", "device", &M::device, kOp, 0, 0, {"auto", "cpu", "cuda"}, "auto: CUDA when this build and the machine have it"},
      {"train", "deterministic", &M::deterministic, kId, 0, 0, {}, "bit-identical reruns and resumes on one GPU model; false only when asked"},
      {"train", "cuda_graph", &M::cuda_graph, kOp, 0, 0, {},
       "on a GPU, replay the training step as a CUDA graph where it can be (the same bits as uncaptured; the log says why not)"},
      {"train", "expert_parallel", &M::expert_parallel, kOp, 1, 4096, {},
       "ranks that split a MoE model's routed experts (divides the ranks and the experts; 1: every rank holds every expert); `ufp4 run --ep N` overrides it. "
       "Like the number of ranks it moves the bits (summation order) and is recorded in the results"},
      {"eval", "every", &M::eval_every, kId, 0, kSteps, {}, "steps between validation losses (0: none)"},
      {"eval", "batches", &M::eval_batches, kId, 1, kSize, {}, "validation batches per evaluation"},
      {"eval", "final", &M::eval_final, kId, 0, 0, {"batches", "split"},
       "the last evaluation: eval.batches batches like the others, or every window of the validation split (the campaigns' metric)", 2},
      {"capture", "steps", &M::capture_steps, kId, 0, 0, {}, "steps whose GEMM operands are captured for the analysis"},
      {"capture", "layers", &M::capture_layers, kId, 0, 0, {}, "name patterns of the captured layers (e.g. \"layers.*\")"},
      {"capture", "tokens", &M::capture_tokens, kId, 0, kSteps, {}, "token-indexed operands keep their first N tokens (0: all); in the run id when capturing"},
      {"capture", "telemetry_every", &M::telemetry_every, kId, 0, kSteps, {}, "steps between per-layer telemetry rows (0: none)"},
      {"outputs", "dir", &M::out_dir, kOp, 0, 0, {}, "folder of results, checkpoints and logs"},
      {"outputs", "name", &M::name, kOp, 0, 0, {}, "run name; default: the manifest's stem (runs of a sweep or ablation append what differs)"},
  };
  return fields;
}

std::string field_value_text(const ManifestField& f, const RunManifest& m) {
  std::ostringstream os;
  os.precision(17);
  std::visit(
      [&](auto member) {
        const auto& v = m.*member;
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          os << "\"" << v << "\"";
        } else if constexpr (std::is_same_v<T, bool>) {
          os << (v ? "true" : "false");
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          os << "[";
          for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << "\"" << v[i] << "\"";
          os << "]";
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          os << "[";
          for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
          os << "]";
        } else {
          os << v;
        }
      },
      f.member);
  return os.str();
}

namespace {

std::string type_name(const FieldMember& m) {
  switch (m.index()) {
    case 0: return "string";
    case 1: return "integer";
    case 2: return "number";
    case 3: return "boolean";
    case 4: return "list of integers";
    default: return "list of strings";
  }
}

std::string allowed_text(const ManifestField& f) {
  if (!f.allowed.empty()) {
    std::string a;
    for (const auto& s : f.allowed) a += (a.empty() ? "" : ", ") + (s.empty() ? std::string("\"\"") : s);
    return a;
  }
  if (f.member.index() == 1 || f.member.index() == 2) {
    std::ostringstream os;
    if (f.member.index() == 1) os << static_cast<int64_t>(f.lo) << " to " << static_cast<int64_t>(f.hi);
    else os << f.lo << " to " << f.hi;
    return os.str();
  }
  return "-";
}

}  // namespace

std::string manifest_fields_markdown() {
  const RunManifest defaults;
  std::ostringstream os;
  os << "# Run manifest fields\n\n"
     << "Generated by `ufp4 plan --fields` from `harness/plan/manifest_fields.cpp`, the one list the parser, the resolved\n"
     << "manifest and the run id read (a test holds this file to it). A manifest may also hold `extends = \"other.toml\"`\n"
     << "(field-level override), `[sweep]` (fields with lists of values: every combination) and `[ablation.<factor>]`\n"
     << "(`field`, `levels`: each level changed alone); see experiments/README.md.\n\n"
     << "Role: **run** = in the resolved manifest and hashed into the run id; **content** = in the resolved manifest, the run id\n"
     << "hashing what it names (the recipe's resolved content, the model's configuration, the data manifest's SHA-256);\n"
     << "**operational** = neither (changing it reuses the run's results). **run, when set**: a field added after the first run ids, which\n"
     << "enters the run id only when a manifest sets it away from its default, so that adding a field changes no earlier run id.\n";
  for (const char* sec : kManifestSections) {
    os << "\n## [" << sec << "]\n\n| key | type | default | allowed | role | meaning |\n|---|---|---|---|---|---|\n";
    for (const auto& f : manifest_fields()) {
      if (std::string(f.section) != sec) continue;
      std::string def = field_value_text(f, defaults);
      if (std::string(f.section) == "outputs" && std::string(f.key) == "name") def = "(the file's stem)";
      const char* role = f.role == FieldRole::kIdentity ? (f.since > 1 ? "run, when set" : "run") : f.role == FieldRole::kByContent ? "content" : "operational";
      os << "| `" << f.key << "` | " << type_name(f.member) << " | `" << def << "` | " << allowed_text(f) << " | " << role << " | " << f.doc << " |\n";
    }
  }
  return os.str();
}

}  // namespace ufp4
