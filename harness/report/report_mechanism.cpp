// The shrinkage-bias mechanism measured on current-corpus training runs (`ufp4 analyze capture`: one
// step file a captured step, harness/campaign/capture_analysis.h), claim by claim beside the paper's
// numbers (reports/paper/analysis.toml): each quantity is the mean over a run's layers at a step, then
// the mean, sd and 95% t interval over the seeds of the same model, training recipe and step.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <sstream>
#include <utility>
#include <toml++/toml.h>

#include "common/error.h"
#include "common/fs.h"
#include "harness/analysis/stats.h"
#include "harness/io/array_io.h"
#include "harness/io/labelled_table.h"
#include "harness/report/report.h"

namespace ufp4 {

namespace {

struct StepFile {
  std::string path, run_name, run_id, model, recipe, data_sha, commit, device;
  int64_t seed = 0, step = 0, steps = 0;
  double epochs = NAN;
  LabelledTable tensors, bins, scales, gemms, own;
  LabelledTable chain;  // empty in step files made before the signal chain was measured
  double chain_loss_exact = NAN, chain_loss_recipe = NAN;
};

StepFile load_step_file(const std::string& path) {
  verify_h5_content(path);
  StepFile f;
  f.path = path;
  auto a = read_h5_string_attrs(path);
  auto n = read_h5_numeric_attrs(path);
  if (!a.count("run_id") || !n.count("step")) throw Error(path + ": not a step file of `ufp4 analyze capture` (no run_id or step attribute)");
  f.run_name = a["run_name"], f.run_id = a["run_id"], f.model = a["model"], f.recipe = a["recipe"], f.data_sha = a["data_manifest_sha256"];
  f.commit = a["git_commit"], f.device = a["device"];
  f.seed = static_cast<int64_t>(n["seed"]), f.step = static_cast<int64_t>(n["step"]), f.steps = static_cast<int64_t>(n["steps"]);
  f.epochs = n["epochs_at_step"];
  f.tensors = read_labelled_table(path, "tensors");
  f.bins = read_labelled_table(path, "bins");
  f.scales = read_labelled_table(path, "scales");
  f.gemms = read_labelled_table(path, "gemms");
  const auto datasets = list_h5_datasets(path);
  if (std::find(datasets.begin(), datasets.end(), "recipe") != datasets.end()) f.own = read_labelled_table(path, "recipe");
  if (std::find(datasets.begin(), datasets.end(), "chain") != datasets.end()) {
    f.chain = read_labelled_table(path, "chain");
    f.chain_loss_exact = n["chain_loss_exact"], f.chain_loss_recipe = n["chain_loss_recipe"];
  }
  return f;
}

// Rows are labelled layer, family, what, grid, transform. A selector matches family ("" any), what
// ("" any), grid, transform and layer ("" any).
struct Select {
  Select(std::string family_, std::string what_, std::string grid_, std::string transform_, std::string layer_ = "")
      : family(std::move(family_)), what(std::move(what_)), grid(std::move(grid_)), transform(std::move(transform_)), layer(std::move(layer_)) {}
  std::string family, what, grid, transform;
  std::string layer;  // "" any; ending in '.', every layer it begins (a block's experts)
  bool matches(const std::vector<std::string>& l) const {
    const bool layer_ok = layer.empty() || (layer.back() == '.' ? l[0].rfind(layer, 0) == 0 : l[0] == layer);
    return layer_ok && (family.empty() || l[1] == family) && (what.empty() || l[2] == what) && l[3] == grid && l[4] == transform;
  }
};

// The mean over the matching rows of column `col` (NaN entries left out); NaN when none match.
double row_mean(const LabelledTable& t, const Select& s, size_t col) {
  double sum = 0;
  size_t n = 0;
  for (size_t i = 0; i < t.rows(); ++i)
    if (s.matches(t.labels[i]) && !std::isnan(t.at(i, col))) sum += t.at(i, col), ++n;
  return n ? sum / static_cast<double>(n) : NAN;
}

// The runs' files of one model, training recipe and step: one a seed.
struct Cell {
  std::string model, recipe;
  int64_t step = 0;
  bool end = false;  // the run's last step
  std::vector<const StepFile*> seeds;
};

std::string interval_text(const Interval& i, const char* f = "%.2f") {
  if (i.n == 0) return "-";
  if (!i.defined()) return fmt(f, i.mean) + " (1 seed)";
  std::string unsigned_f = f;  // a spread has no sign
  unsigned_f.erase(std::remove(unsigned_f.begin(), unsigned_f.end(), '+'), unsigned_f.end());
  return fmt(f, i.mean) + " ± " + fmt(unsigned_f.c_str(), i.sd) + " [" + fmt(f, i.lo) + ", " + fmt(f, i.hi) + "]";
}

// A quantity of each seed's file, over the cell's seeds.
template <typename Of>
Interval over_seeds(const Cell& c, Of of) {
  std::vector<double> v;
  for (const StepFile* f : c.seeds) v.push_back(of(*f));
  return mean_interval(v);
}

struct Mechanism {
  std::vector<StepFile> files;
  std::vector<Cell> cells;  // by model, recipe, step
  toml::table paper;
  std::vector<Cell> end_cells() const {
    std::vector<Cell> out;
    for (const auto& c : cells)
      if (c.end) out.push_back(c);
    return out;
  }
};

Mechanism load_mechanism(const std::string& root, const std::string& dir) {
  Mechanism m;
  std::vector<std::string> paths;
  if (!is_dir(dir)) throw Error("report mechanism: no folder " + dir + " (make it with `ufp4 analyze capture experiments/analysis/mechanism_*.toml`)");
  walk_files(dir, ".tensors.h5", paths);
  std::sort(paths.begin(), paths.end());
  for (const auto& p : paths) m.files.push_back(load_step_file(p));
  if (m.files.empty()) throw Error("report mechanism: no step files (*.tensors.h5 of `ufp4 analyze capture`) in " + dir);
  // One cell a model, training recipe, step and data: files of one seed twice (a run id of an earlier
  // manifest or corpus left in the folder) would count as two seeds.
  std::map<std::tuple<std::string, std::string, int64_t, std::string>, Cell> by;
  for (const auto& f : m.files) {
    Cell& c = by[{f.model, f.recipe, f.step, f.data_sha}];
    for (const StepFile* other : c.seeds)
      if (other->seed == f.seed)
        throw Error("report mechanism: seed " + std::to_string(f.seed) + " of " + f.model + " " + f.recipe + " step " + std::to_string(f.step) + " twice: " +
                    rel(other->path) + " and " + rel(f.path) + " (remove the stale run's capture folder)");
    c.model = f.model, c.recipe = f.recipe, c.step = f.step, c.end = f.step == f.steps - 1;
    c.seeds.push_back(&f);
  }
  std::set<std::string> data;
  for (const auto& f : m.files) data.insert(f.data_sha);
  if (data.size() > 1) throw Error("report mechanism: the captures in " + rel(dir) + " come from " + std::to_string(data.size()) + " corpora (data manifests); one is expected");
  for (auto& [k, c] : by) m.cells.push_back(c);
  m.paper = toml::parse_file(root + "/reports/paper/analysis.toml");
  return m;
}

// Each claim's verdicts over the rows that judge it, in the order the report first judges them: the summary at its top.
struct Tally {
  struct Claim {
    std::string name, section;
    std::vector<std::pair<std::string, int>> counts;  // verdict, rows; in order of first appearance
  };
  std::vector<Claim> claims;
  void add(const std::string& claim, const std::string& section, const std::string& verdict) {
    auto c = std::find_if(claims.begin(), claims.end(), [&](const Claim& x) { return x.name == claim; });
    if (c == claims.end()) c = claims.insert(claims.end(), Claim{claim, section, {}});
    auto v = std::find_if(c->counts.begin(), c->counts.end(), [&](const auto& x) { return x.first == verdict; });
    if (v == c->counts.end()) c->counts.push_back({verdict, 1});
    else ++v->second;
  }
};

void write_tally(std::ostream& os, const Tally& t) {
  os << "## The claims at a glance\n\n"
     << "Each claim's verdicts (the paper's, and ours where marked) over the rows of the section that judges it (a row: a model, "
     << "recipe, step, family or operand, each judged over its seeds as that section says).\n\n| claim | section | rows: verdict |\n|---|---|---|\n";
  for (const auto& c : t.claims) {
    int n = 0;
    std::string v;
    for (const auto& [verdict, k] : c.counts) n += k, v += (v.empty() ? "" : ", ") + std::to_string(k) + " " + verdict;
    os << "| " << c.name << " | " << c.section << " | " << n << ": " << v << " |\n";
  }
  os << "\n";
}

void write_provenance_table(std::ostream& os, const Mechanism& m) {
  os << "## Provenance\n\nEvery capture, as its file records it: the run, what it trained on and where in training it was taken.\n\n"
     << "| run | model | recipe | seed | run id | data manifest | step | epochs at the step | commit, device | file |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& f : m.files)
    os << "| " << f.run_name << " | " << f.model << " | " << f.recipe << " | " << f.seed << " | `" << f.run_id << "` | `" << f.data_sha.substr(0, 12)
       << "…` | " << f.step << " of " << f.steps << " | " << fmt("%.3f", f.epochs) << " | " << f.commit << ", " << f.device << " | `" << rel(f.path) << "` |\n";
  os << "\n";
}

constexpr size_t kSqnr = 1, kAlpha = 2, kBeff = 3;  // columns of the tensors table

// Key Finding 2 on linear_fc2's input: E2M1 above E1M2 without RHT, below it with RHT-16, seed by seed.
void write_ranking(std::ostream& os, const Mechanism& m, Tally& tally) {
  os << "## Key Finding 2: RHT reverses the ranking of the grids (linear_fc2/fwd_x)\n\n"
     << "SQNR (dB) of linear_fc2's input (a MoE model's routed experts' apart, as experts.linear_fc2) under each grid without (I) and with RHT-16 (H16), the mean over layers, then over seeds "
     << "(mean ± sd [95% t interval]). The claim holds for a run set when, seed by seed, E2M1 - E1M2 is positive without RHT and "
     << "negative with it, each interval excluding zero; contradicted when an interval lies on the other side; else inconclusive.\n\n"
     << "| model | family | trained with | step | E2M1 I | E1M2 I | E2M1 H16 | E1M2 H16 | E2M1 - E1M2, I | E2M1 - E1M2, H16 | verdict |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  const std::string x = "fwd_x";
  // A MoE model's fc2 inputs are its routed experts' (and its dense first layer's): each family its own row.
  for (const std::string fc2 : {"linear_fc2", "experts.linear_fc2"})
  for (const auto& c : m.cells) {
    auto sq = [&](const char* g, const char* t) { return [=](const StepFile& f) { return row_mean(f.tensors, {fc2, x, g, t}, kSqnr); }; };
    const Interval ei = over_seeds(c, sq("e2m1", "I")), ui = over_seeds(c, sq("e1m2", "I")), eh = over_seeds(c, sq("e2m1", "H16")),
                   uh = over_seeds(c, sq("e1m2", "H16"));
    if (std::isnan(ei.mean)) continue;  // a model without linear_fc2 captured
    const Interval di = over_seeds(c, [&](const StepFile& f) { return sq("e2m1", "I")(f) - sq("e1m2", "I")(f); });
    const Interval dh = over_seeds(c, [&](const StepFile& f) { return sq("e2m1", "H16")(f) - sq("e1m2", "H16")(f); });
    const Verdict a = verdict(di, +1), b = verdict(dh, -1);
    const Verdict v = a == Verdict::kHolds && b == Verdict::kHolds                   ? Verdict::kHolds
                      : a == Verdict::kContradicted || b == Verdict::kContradicted ? Verdict::kContradicted
                                                                                   : Verdict::kInconclusive;
    os << "| " << c.model << " | " << fc2 << " | " << c.recipe << " | " << c.step << " | " << interval_text(ei) << " | " << interval_text(ui) << " | " << interval_text(eh)
       << " | " << interval_text(uh) << " | " << interval_text(di) << " | " << interval_text(dh) << " | **" << verdict_name(v) << "** |\n";
    tally.add("Key Finding 2: RHT-16 reverses the ranking of E2M1 and E1M2 on linear_fc2's input", "Key Finding 2", verdict_name(v));
  }
  auto P = [&](const char* k) { return m.paper["fc2_fwd_x"][k].value_or(NAN); };
  os << "| paper | linear_fc2 | - | - | " << fmt("%.2f", P("e2m1_I")) << " | " << fmt("%.2f", P("e1m2_I")) << " | " << fmt("%.2f", P("e2m1_H16")) << " | "
     << fmt("%.2f", P("e1m2_H16")) << " | " << fmt("%+.2f", P("e2m1_I") - P("e1m2_I")) << " | " << fmt("%+.2f", P("e2m1_H16") - P("e1m2_H16"))
     << " | - |\n\n";
}

// Figures 4-7 and 12: Delta SQNR and B_eff per family and operand or GEMM, per grid, at each run's last step.
void write_families(std::ostream& os, const Mechanism& m) {
  os << "## Figures 4-7 and 12: what RHT-16 does to each family's tensors and GEMM outputs\n\n"
     << "Delta SQNR = SQNR(H16) - SQNR(I) (dB) of each operand (fwd_x, fwd_w, bwd_dy) and each GEMM's output (fwd_y, bwd_dx, bwd_dw), "
     << "and B_eff = exp(H) / 8 over E2M1's or E1M2's magnitude buckets (Eq. 6), the mean over layers at the run's last step, then over seeds. "
     << "The paper's numbers where it gives them (linear_fc2 and linear_fc1 inputs); its B_eff of linear_fc2's input names no grid, "
     << "so it stands beside both grids' columns.\n\n"
     << "| model | trained with | family | tensor | Delta SQNR E2M1 | Delta SQNR E1M2 | B_eff E2M1 I -> H16 | B_eff E1M2 I -> H16 | paper Delta E2M1 / E1M2 |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& c : m.end_cells()) {
    std::set<std::pair<std::string, std::string>> keys;  // (family, what) of tensors and of GEMMs
    for (const auto& l : c.seeds.front()->tensors.labels) keys.insert({l[1], l[2]});
    for (const auto& l : c.seeds.front()->gemms.labels) keys.insert({l[1], l[2]});
    for (const auto& [family, what] : keys) {
      const bool gemm = what == "fwd_y" || what == "bwd_dx" || what == "bwd_dw";
      auto delta = [&, family = family, what = what](const char* g) {
        return over_seeds(c, [&](const StepFile& f) {
          const LabelledTable& t = gemm ? f.gemms : f.tensors;
          const size_t col = gemm ? 0 : kSqnr;
          return row_mean(t, {family, what, g, "H16"}, col) - row_mean(t, {family, what, g, "I"}, col);
        });
      };
      auto beff = [&, family = family, what = what](const char* g) -> std::string {
        if (gemm) return "-";
        const Interval i = over_seeds(c, [&](const StepFile& f) { return row_mean(f.tensors, {family, what, g, "I"}, kBeff); });
        const Interval h = over_seeds(c, [&](const StepFile& f) { return row_mean(f.tensors, {family, what, g, "H16"}, kBeff); });
        return fmt("%.3f", i.mean) + " -> " + fmt("%.3f", h.mean);
      };
      std::string paper = "-";
      const std::string pkey = family == "linear_fc2" && what == "fwd_x" ? "fc2_fwd_x" : family == "linear_fc1" && what == "fwd_x" ? "fc1_fwd_x" : "";
      if (!pkey.empty())
        paper = fmt("%+.3f", m.paper[pkey]["delta_e2m1"].value_or(NAN)) + " / " + fmt("%+.3f", m.paper[pkey]["delta_e1m2"].value_or(NAN));
      // The paper's B_eff names no grid; it is shown once, to set beside both grids' columns.
      if (m.paper[pkey]["beff_I"].is_value())
        paper += "; B_eff " + fmt("%.2f", m.paper[pkey]["beff_I"].value_or(NAN)) + " -> " + fmt("%.2f", m.paper[pkey]["beff_H16"].value_or(NAN)) + " (grid not stated)";
      os << "| " << c.model << " | " << c.recipe << " | " << family << " | " << what << " | " << interval_text(delta("e2m1")) << " | "
         << interval_text(delta("e1m2")) << " | " << beff("e2m1") << " | " << beff("e1m2") << " | " << paper << " |\n";
    }
  }
  os << "\n";
}

// The paper's words on GEMM outputs (Figures 4-7, 12): E2M1 loses to RHT on linear_fc2's FPROP and on the attention
// block's backward GEMMs, where E1M2 gains. Each path at the run's last step, mean over layers, over seeds.
void write_gemm_claims(std::ostream& os, const Mechanism& m, Tally& tally) {
  const std::pair<const char*, const char*> paths[] = {
      {"linear_fc2", "fwd_y"}, {"experts.linear_fc2", "fwd_y"}, {"linear_qkv", "bwd_dx"}, {"linear_qkv", "bwd_dw"}, {"linear_proj", "bwd_dx"}, {"linear_proj", "bwd_dw"}};
  os << "### The paper on GEMM outputs: E2M1 loses on linear_fc2's FPROP and the attention backward GEMMs, E1M2 gains\n\n"
     << "The paper states it without numbers. Read here as the Delta SQNR of each such GEMM's output: linear_fc2's FPROP (fwd_y; a MoE model's routed "
     << "experts' too), and "
     << "DGRAD and WGRAD (bwd_dx, bwd_dw) of the attention block's linears (linear_qkv, linear_proj; the attention products themselves "
     << "run in BF16 here). Per grid, the claim holds where the interval lies on its side of zero (below for E2M1, above for E1M2), "
     << "is contradicted where it lies wholly on the other side, else inconclusive.\n\n"
     << "| model | trained with | GEMM output | Delta SQNR E2M1 | E2M1 loses | Delta SQNR E1M2 | E1M2 gains |\n|---|---|---|---|---|---|---|\n";
  for (const auto& c : m.end_cells())
    for (const auto& [family, what] : paths) {
      auto delta = [&](const char* g) {
        return over_seeds(c, [&](const StepFile& f) { return row_mean(f.gemms, {family, what, g, "H16"}, 0) - row_mean(f.gemms, {family, what, g, "I"}, 0); });
      };
      const Interval e = delta("e2m1"), u = delta("e1m2");
      if (std::isnan(e.mean)) continue;
      const char *loses = verdict_name(verdict(e, -1)), *gains = verdict_name(verdict(u, +1));
      tally.add("E2M1 loses to RHT-16 on linear_fc2's FPROP and the attention block's backward GEMMs", "The paper on GEMM outputs", loses);
      tally.add("E1M2 gains from RHT-16 on the same GEMMs", "The paper on GEMM outputs", gains);
      os << "| " << c.model << " | " << c.recipe << " | " << family << "/" << what << " | " << interval_text(e) << " | **" << loses << "** | "
         << interval_text(u) << " | **" << gains << "** |\n";
    }
  os << "\n";
}

// Key Finding 1 by bin: each level's part of b_G (Eq. 2 for every bin), pooled over every operand of every
// linear at the last step, for runs trained in BF16 (the operands no recipe's rounding has shaped).
void write_bins(std::ostream& os, const Mechanism& m, Tally& tally) {
  os << "## Key Finding 1: where the bias comes from, bin by bin\n\n"
     << "Each grid level's share of the elements, its mean rounding error E[q - t | bin] (grid units) beside Eq. 2's prediction "
     << "under a locally uniform density, and its part of b_G, the mean over every operand (fwd_x, fwd_w, bwd_dy) of every linear "
     << "and layer at the last step, then over seeds; FP32 single-level scales, so each block's maximum (the last row) is exact. "
     << "The interior levels (neither zero nor the top) carry the grid's own shrinkage: Key Finding 1 holds when E2M1's interior "
     << "parts sum below zero and E1M2's interval contains zero or lies within a tenth of E2M1's.\n\n";
  int shown = 0;
  for (const auto& c : m.end_cells()) {
    if (c.recipe != "bf16") continue;
    ++shown;
    std::map<std::string, Interval> interior;
    for (const char* g : {"e2m1", "e1m2"})
      for (const char* tr : {"I", "H16"}) {
        os << "**" << c.model << ", " << g << ", " << tr << "** (" << c.seeds.size() << (c.seeds.size() == 1 ? " seed" : " seeds") << ")\n\n"
           << "| level | Eq. 2 | share | mean error | part of b_G |\n|---|---|---|---|---|\n";
        const Select s{"", "", g, tr};
        const StepFile& first = *c.seeds.front();
        size_t levels = 0;
        for (size_t b = 0; b < 9; ++b)
          if (!std::isnan(row_mean(first.bins, s, b * 6))) ++levels;
        for (size_t b = 0; b < levels; ++b) {
          auto col = [&](size_t k) { return over_seeds(c, [&](const StepFile& f) { return row_mean(f.bins, s, b * 6 + k); }); };
          const bool top_row = b + 1 == levels;
          os << "| " << (top_row ? "block maxima" : fmt("%g", col(0).mean)) << " | " << fmt("%+.4f", col(3).mean) << " | " << fmt("%.4f", col(1).mean)
             << " | " << interval_text(col(2), "%+.4f") << " | " << interval_text(col(4), "%+.5f") << " |\n";
        }
        const Interval total = over_seeds(c, [&](const StepFile& f) { return row_mean(f.scales, s, 0); });
        interior[std::string(g) + tr] = over_seeds(c, [&](const StepFile& f) {
          double sum = 0;
          for (size_t b = 1; b + 2 < levels; ++b) sum += row_mean(f.bins, s, b * 6 + 4);  // levels 1 .. top - 1
          return sum;
        });
        os << "| b_G | | 1 | | " << interval_text(total, "%+.5f") << " |\n| interior levels | | | | " << interval_text(interior[std::string(g) + tr], "%+.5f")
           << " |\n\n";
      }
    for (const char* tr : {"I", "H16"}) {
      const Interval& e = interior[std::string("e2m1") + tr];
      const Interval& u = interior[std::string("e1m2") + tr];
      const bool holds = verdict(e, -1) == Verdict::kHolds && ((u.lo <= 0 && u.hi >= 0) || std::fabs(u.mean) < 0.1 * std::fabs(e.mean));
      os << "- " << c.model << ", " << tr << ": E2M1's interior part " << interval_text(e, "%+.5f") << ", E1M2's " << interval_text(u, "%+.5f")
         << ": Key Finding 1 **" << (holds ? "holds" : "does not hold as stated") << "**\n";
      tally.add("Key Finding 1: E2M1's interior bins shrink, a uniform grid's do not", "Key Finding 1",
                std::string(holds ? "holds" : "does not hold as stated") + (std::string(tr) == "I" ? " without RHT" : " with RHT-16"));
    }
    os << "\n";
  }
  if (shown == 0) os << "_No BF16-trained run among the captures._\n\n";
}

// linear_fc1's input, which the paper finds well behaved (RHT neutral for both grids): the verdict against the
// registered band, then layer by layer, with the paper's own mechanism as the test of any departure: RHT should help
// E1M2 most where the unrotated tensor uses its buckets least (B_eff, Eq. 6).
// The block of a layer label "layers.N.<rest>": N, or -1 for any other label (not numbered so, or with leading zeros,
// which the prefix "layers.N." would not find again).
long long block_index(const std::string& label) {
  if (label.rfind("layers.", 0) != 0) return -1;
  const size_t end = label.find('.', 7);
  const std::string digits = label.substr(7, end == std::string::npos ? std::string::npos : end - 7);
  if (end == std::string::npos || digits.empty() || digits.size() > 9 || (digits.size() > 1 && digits[0] == '0')) return -1;
  for (char ch : digits)
    if (ch < '0' || ch > '9') return -1;
  return std::stoll(digits);
}

void write_fc1(std::ostream& os, const Mechanism& m, Tally& tally) {
  const double band = m.paper["fc1_fwd_x"]["well_behaved_db"].value_or(0.1);
  os << "## linear_fc1's input: well behaved, as in the paper?\n\n"
     << "The paper finds RHT neutral on linear_fc1's input (Delta SQNR " << fmt("%+.3f", m.paper["fc1_fwd_x"]["delta_e2m1"].value_or(NAN)) << " dB E2M1, "
     << fmt("%+.3f", m.paper["fc1_fwd_x"]["delta_e1m2"].value_or(NAN)) << " dB E1M2). Registered band: |Delta SQNR| below " << fmt("%.2f", band)
     << " dB for both grids (`reports/paper/analysis.toml`). Holds when both grids' intervals lie inside the band, contradicted when either lies "
     << "wholly outside it, else inconclusive; at each run's last step, mean over layers (a MoE model's routed experts each a "
     << "row of their own), then over seeds; the routed experts' fc1 (experts.linear_fc1) and the shared expert's beside the "
     << "dense fc1.\n\n"
     << "| model | family | trained with | step | Delta SQNR E2M1 | Delta SQNR E1M2 | verdict |\n|---|---|---|---|---|---|---|\n";
  const std::string families[] = {"linear_fc1", "shared_expert.linear_fc1", "experts.linear_fc1"};
  for (const std::string& fc1 : families)
  for (const auto& c : m.end_cells()) {
    auto delta = [&](const char* g) {
      return over_seeds(c, [&](const StepFile& f) {
        return row_mean(f.tensors, {fc1, "fwd_x", g, "H16"}, kSqnr) - row_mean(f.tensors, {fc1, "fwd_x", g, "I"}, kSqnr);
      });
    };
    const Interval e = delta("e2m1"), u = delta("e1m2");
    if (std::isnan(e.mean)) continue;
    auto inside = [&](const Interval& i) { return i.lo > -band && i.hi < band; };
    auto outside = [&](const Interval& i) { return i.lo > band || i.hi < -band; };
    const char* v = inside(e) && inside(u) ? "holds" : outside(e) || outside(u) ? "contradicted" : "inconclusive";
    tally.add("RHT-16 is neutral on linear_fc1's input (Delta SQNR within +-" + fmt("%.2f", band) + " dB)", "linear_fc1's input", v);
    os << "| " << c.model << " | " << fc1 << " | " << c.recipe << " | " << c.step << " | " << interval_text(e) << " | " << interval_text(u) << " | **" << v << "** |\n";
  }
  os << "\nLayer by layer (each run's last step, mean over seeds), with E1M2's bucket usage before and after RHT; the slope of E1M2's Delta "
     << "SQNR on its unrotated B_eff over the blocks (a MoE block's experts at their mean; t interval, blocks - 2 degrees of freedom) tests whether the departure is the paper's "
     << "mechanism at work: a negative slope whose interval excludes zero says RHT gains most where the tensor fills the grid least.\n\n";
  for (const std::string& fc1 : families)
  for (const auto& c : m.end_cells()) {
    const StepFile& first = *c.seeds.front();
    // One row a block: a MoE block's experts at their mean.
    std::set<long long> blocks;
    for (const auto& l : first.tensors.labels)
      if (l[1] == fc1 && l[2] == "fwd_x") {
        const long long b = block_index(l[0]);
        if (b >= 0) blocks.insert(b);
      }
    std::vector<std::string> layers;
    for (long long b : blocks) layers.push_back("layers." + std::to_string(b) + ".");
    if (layers.empty()) continue;
    os << "**" << c.model << ", " << fc1 << ", " << c.recipe << "** (step " << c.step << ")\n\n"
       << "| block | Delta SQNR E2M1 | Delta SQNR E1M2 | B_eff E1M2 I | B_eff E1M2 H16 |\n|---|---|---|---|---|\n";
    std::vector<double> beff, gain;
    for (const auto& layer : layers) {
      auto mean = [&](const char* g, const char* tr, size_t col) {
        return over_seeds(c, [&](const StepFile& f) { return row_mean(f.tensors, {fc1, "fwd_x", g, tr, layer}, col); }).mean;
      };
      const double de = mean("e2m1", "H16", kSqnr) - mean("e2m1", "I", kSqnr), du = mean("e1m2", "H16", kSqnr) - mean("e1m2", "I", kSqnr);
      beff.push_back(mean("e1m2", "I", kBeff));
      gain.push_back(du);
      os << "| " << layer.substr(0, layer.size() - 1) << " | " << fmt("%+.3f", de) << " | " << fmt("%+.3f", du) << " | " << fmt("%.3f", beff.back()) << " | "
         << fmt("%.3f", mean("e1m2", "H16", kBeff)) << " |\n";
    }
    if (layers.size() < 3) {
      os << "\n" << layers.size() << (layers.size() == 1 ? " block" : " blocks") << " with this family: too few for a slope over blocks.\n\n";
      continue;
    }
    const Interval slope = slope_interval(beff, gain);
    if (!slope.defined() || std::isnan(slope.lo)) {
      os << "\nSlope of E1M2's Delta SQNR on its unrotated B_eff: undefined (B_eff does not vary over the blocks).\n\n";
      continue;
    }
    os << "\nSlope of E1M2's Delta SQNR on its unrotated B_eff: " << interval_text(slope, "%.2f") << " dB per unit of B_eff ("
       << (slope.defined() && slope.hi < 0 ? "negative, the interval excluding zero: the departure goes with bucket usage, as the paper's mechanism has it"
                                           : "the interval does not exclude a slope of zero or above: bucket usage does not account for it here")
       << ").\n\n";
  }
}

// The scale's own bias: b_G and alpha under FP32, E4M3 (with an FP32 tensor scale) and E8M0 block scales.
void write_scales(std::ostream& os, const Mechanism& m) {
  os << "## The scale's own bias\n\nb_G (grid units) and alpha of the same operands under FP32, E4M3 and E8M0 block scales, the mean over "
     << "every operand of every linear at the last step, then over seeds (mean ± sd). A rounded scale moves every element, so "
     << "b_G(E4M3) - b_G(FP32) is the scale's own part; the block maxima's part is shown beside each.\n\n"
     << "| model | trained with | grid | A | b_G FP32 | b_G E4M3 | b_G E8M0 | block maxima's part, E4M3 / E8M0 | alpha FP32 | alpha E4M3 | alpha E8M0 |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& c : m.end_cells())
    for (const char* g : {"e2m1", "e1m2"})
      for (const char* tr : {"I", "H16"}) {
        auto col = [&](size_t k) { return over_seeds(c, [&](const StepFile& f) { return row_mean(f.scales, {"", "", g, tr}, k); }); };
        auto pm = [](const Interval& i, const char* f) { return fmt(f, i.mean) + (i.defined() ? " ± " + fmt("%.5f", i.sd) : std::string(" (1 seed)")); };
        os << "| " << c.model << " | " << c.recipe << " | " << g << " | " << tr << " | " << pm(col(0), "%+.5f") << " | " << pm(col(4), "%+.5f") << " | "
           << pm(col(8), "%+.5f") << " | " << fmt("%+.5f", col(5).mean) << " / " << fmt("%+.5f", col(9).mean) << " | " << pm(col(2), "%.4f") << " | "
           << pm(col(6), "%.4f") << " | " << pm(col(10), "%.4f") << " |\n";
      }
  os << "\n";
}

// alpha of every GEMM operand of every family as each quantized recipe trained, and the endpoint account of alpha > 1.
void write_alpha(std::ostream& os, const Mechanism& m, Tally& tally) {
  os << "## alpha of each GEMM operand, as each recipe trained\n\nalpha = <A_hat, A> / ||A||^2 (Eq. 3) of each operand as the run's "
     << "recipe rotated and quantized it, against its rotated original, the mean over layers at the last step, then over seeds; "
     << "shrinkage = E[sign(a)(q - a)] / E[|a|].\n\n"
     << "| model | recipe | family | operand | alpha | shrinkage | SQNR (dB) |\n|---|---|---|---|---|---|---|\n";
  for (const auto& c : m.end_cells()) {
    const StepFile& first = *c.seeds.front();
    if (first.own.rows() == 0) continue;
    std::set<std::pair<std::string, std::string>> keys;
    for (const auto& l : first.own.labels) keys.insert({l[1], l[2]});
    for (const auto& [family, operand] : keys) {
      auto col = [&, family = family, operand = operand](size_t k) {
        return over_seeds(c, [&](const StepFile& f) { return row_mean(f.own, {family, operand, c.recipe, "recipe"}, k); });
      };
      os << "| " << c.model << " | " << c.recipe << " | " << family << " | " << operand << " | " << interval_text(col(2), "%.4f") << " | "
         << interval_text(col(3), "%+.4f") << " | " << interval_text(col(1), "%.2f") << " |\n";
    }
  }
  os << "\n### alpha > 1: the endpoint bin\n\nUnder max scaling the top level's bin rounds up (Eq. 2's +l/2), the one bin that expands. "
     << "For every family and operand whose alpha exceeds 1 under a grid (FP32 scales, the paper's setting), the top level's part of "
     << "alpha - 1 and alpha - 1 without it, at the last step (mean over seeds): the account holds where removing that bin leaves "
     << "alpha - 1 at or below zero.\n\n"
     << "| model | trained with | family | tensor | grid | A | alpha - 1 | top level's part | alpha - 1 without it | account |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  int rows = 0, held = 0;
  for (const auto& c : m.end_cells()) {
    std::set<std::pair<std::string, std::string>> keys;
    for (const auto& l : c.seeds.front()->tensors.labels) keys.insert({l[1], l[2]});
    for (const auto& [family, what] : keys)
      for (const char* g : {"e2m1", "e1m2"})
        for (const char* tr : {"I", "H16"}) {
          const Select s{family, what, g, tr};
          const Interval a = over_seeds(c, [&](const StepFile& f) { return row_mean(f.tensors, s, kAlpha) - 1; });
          if (!(a.mean > 0)) continue;
          const size_t top = 7;  // E2M1 and E1M2 have 8 magnitude levels each: the top level is bin 7, the block maxima bin 8
          const Interval part = over_seeds(c, [&](const StepFile& f) { return row_mean(f.bins, s, top * 6 + 5); });
          const double without = a.mean - part.mean;
          ++rows, held += without <= 0;
          tally.add("(ours) alpha > 1 comes from the endpoint bin alone", "alpha > 1: the endpoint bin", without <= 0 ? "holds" : "does not hold");
          os << "| " << c.model << " | " << c.recipe << " | " << family << " | " << what << " | " << g << " | " << tr << " | " << fmt("%+.5f", a.mean) << " | "
             << fmt("%+.5f", part.mean) << " | " << fmt("%+.5f", without) << " | " << (without <= 0 ? "holds" : "**does not**") << " |\n";
        }
  }
  if (rows == 0) os << "| (no operand has alpha > 1) | | | | | | | | | |\n";
  os << "\nThe endpoint account holds for " << held << " of " << rows << " operands with alpha > 1.\n\n";
}

// Over training: the headline quantities at each captured step.
void write_over_training(std::ostream& os, const Mechanism& m) {
  os << "## Over training\n\nThe fc2 inputs at each captured step (mean over seeds; a MoE model's routed experts as experts.linear_fc2): "
     << "Delta SQNR per grid, and b_G of E2M1 and E1M2 (FP32 scales, no RHT, every operand).\n\n"
     << "| model | family | trained with | step | epochs | Delta SQNR E2M1 | Delta SQNR E1M2 | b_G E2M1 | b_G E1M2 |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string fc2 : {"linear_fc2", "experts.linear_fc2"})
  for (const auto& c : m.cells) {
    auto d = [&](const char* g) {
      return over_seeds(c, [&](const StepFile& f) {
               return row_mean(f.tensors, {fc2, "fwd_x", g, "H16"}, kSqnr) - row_mean(f.tensors, {fc2, "fwd_x", g, "I"}, kSqnr);
             }).mean;
    };
    if (std::isnan(d("e2m1"))) continue;
    auto b = [&](const char* g) { return over_seeds(c, [&](const StepFile& f) { return row_mean(f.scales, {"", "", g, "I"}, 0); }).mean; };
    os << "| " << c.model << " | " << fc2 << " | " << c.recipe << " | " << c.step << " | " << fmt("%.3f", c.seeds.front()->epochs) << " | " << fmt("%+.3f", d("e2m1"))
       << " | " << fmt("%+.3f", d("e1m2")) << " | " << fmt("%+.5f", b("e2m1")) << " | " << fmt("%+.5f", b("e1m2")) << " |\n";
  }
  os << "\n";
}

// A column of a step file's chain table at one tap and direction; NaN where the file has none.
double chain_at(const StepFile& f, const std::string& tap, const char* direction, size_t col) {
  for (size_t i = 0; i < f.chain.rows(); ++i)
    if (f.chain.labels[i][0] == tap && f.chain.labels[i][1] == direction) return f.chain.at(i, col);
  return NAN;
}

// The stream's far end in one direction: the point after the last block forward (before the final norm), the
// embedding backward.
std::string chain_end(const StepFile& f, const char* direction) {
  if (std::string(direction) == "backward") return "embedding";
  std::string last;
  for (const auto& l : f.chain.labels)
    if (l[0] != "final_norm" && l[0] != "logits") last = l[0];
  return last;
}

// Column k of the chain table at the stream's far end, seed by seed in the order of `seeds`.
std::vector<double> chain_end_of(const Cell& c, const std::vector<int64_t>& seeds, const char* direction, size_t k) {
  std::vector<double> v;
  for (int64_t s : seeds)
    for (const StepFile* f : c.seeds)
      if (f->seed == s) v.push_back(chain_at(*f, chain_end(*f, direction), direction, k));
  return v;
}

// Two claims of Eq. 5 tested on the measured chain, paired by seed at the stream's far ends: its size (measured alpha
// minus predicted; the prediction matches when the interval holds zero), and its ranking of two recipes (the gap of
// |1 - alpha| between them, measured beside predicted: seen when the measured interval excludes zero on the predicted side).
void write_chain_verdicts(std::ostream& os, const std::vector<const Cell*>& cells, Tally& tally) {
  auto seeds_of = [](const Cell& c) {
    std::vector<int64_t> s;
    for (const StepFile* f : c.seeds) s.push_back(f->seed);
    std::sort(s.begin(), s.end());
    return s;
  };
  auto size_verdict = [](const Interval& i) {
    if (!i.defined() || std::isnan(i.lo) || std::isnan(i.hi)) return "inconclusive";
    return i.lo > 0 || i.hi < 0 ? "contradicted" : "not contradicted";
  };
  os << "**Eq. 5's size.** Measured alpha minus Eq. 5's prediction at the stream's far ends (forward after the last block, backward at "
     << "the embedding), paired by seed: the prediction is contradicted where the interval excludes zero (a positive difference: "
     << "the measured signal larger than Eq. 5 predicts), and not contradicted where it holds zero (no band of equivalence is "
     << "tested). One candidate reason: a residual stream dilutes each branch's delta by the branch's share w of the stream's "
     << "energy, so alpha falls as exp(-w sum delta); a synthetic stream of random square GEMMs, whose branches are uncorrelated "
     << "with the stream, follows it (`ufp4 analyze chain --residual G`, w = G^2 / (1 + G^2); `tests/test_analysis.cpp`). It is not "
     << "tested on the trained network, where branches may correlate with the stream, the stream's scale changes with depth and "
     << "each pre-norm, being scale-invariant, undoes part of a shrinkage by itself. The share w = ln(measured) / ln(predicted) "
     << "that would make the diluted Eq. 5 exact is given over the seeds where both lie in (0, 1); where Eq. 5 predicts a gain, "
     << "no dilution turns it into a loss. A w that differs between directions or steps argues against one architectural share.\n\n"
     << "| model | recipe | step | forward: measured - predicted | verdict | share w, forward | backward: measured - predicted | verdict | share w, backward |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const Cell* c : cells) {
    const auto s = seeds_of(*c);
    const Interval f = paired_difference(chain_end_of(*c, s, "forward", 0), chain_end_of(*c, s, "forward", 2));
    const Interval b = paired_difference(chain_end_of(*c, s, "backward", 0), chain_end_of(*c, s, "backward", 2));
    // The share over the seeds where both lie in (0, 1); the cell says why where a seed cannot give one.
    auto share = [&](const char* dir) -> std::string {
      const auto meas = chain_end_of(*c, s, dir, 0), pred = chain_end_of(*c, s, dir, 2);
      std::vector<double> w;
      size_t gain = 0, none = 0;
      for (size_t i = 0; i < meas.size() && i < pred.size(); ++i) {
        if (!(pred[i] > 0 && pred[i] < 1)) ++gain;
        else if (!(meas[i] > 0 && meas[i] < 1)) ++none;
        else w.push_back(std::log(meas[i]) / std::log(pred[i]));
      }
      if (gain > 0) return "- (Eq. 5 predicts a gain)";
      if (w.empty()) return "-";
      std::string t = interval_text(mean_interval(w), "%.3f");
      if (none > 0) t += " (" + std::to_string(w.size()) + " of " + std::to_string(meas.size()) + " seeds: measured alpha >= 1 in the rest)";
      return t;
    };
    tally.add("Eq. 5 gives the size of the chain's attenuation, forward", "The chain, measured", size_verdict(f));
    tally.add("Eq. 5 gives the size of the chain's attenuation, backward", "The chain, measured", size_verdict(b));
    os << "| " << c->model << " | " << c->recipe << " | " << c->step << " | " << interval_text(f, "%+.4f") << " | **" << size_verdict(f) << "** | "
       << share("forward") << " | " << interval_text(b, "%+.4f") << " | **" << size_verdict(b) << "** | " << share("backward") << " |\n";
  }
  os << "\n**Eq. 5's ranking.** For two recipes of one model and step, |1 - alpha| of the first minus that of the second at the stream's "
     << "far end, paired by seed, measured beside Eq. 5's: the ranking is seen when the measured interval excludes zero on the side "
     << "Eq. 5 predicts, reversed when it excludes zero on the other side, else not resolved; where Eq. 5's own interval holds zero "
     << "it predicts no ranking.\n\n";
  bool header = false;
  for (size_t i = 0; i < cells.size(); ++i)
    for (size_t j = i + 1; j < cells.size(); ++j) {
      const Cell &a = *cells[i], &b = *cells[j];
      if (a.model != b.model || a.step != b.step) continue;
      std::vector<int64_t> s;
      const auto sa = seeds_of(a), sb = seeds_of(b);
      std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(s));
      for (const char* dir : {"forward", "backward"}) {
        auto gap = [&](size_t k) {
          auto da = chain_end_of(a, s, dir, k), db = chain_end_of(b, s, dir, k);
          for (auto& x : da) x = std::fabs(1 - x);
          for (auto& x : db) x = std::fabs(1 - x);
          return paired_difference(da, db);
        };
        const Interval meas = gap(0), pred = gap(2);
        const bool predicted = pred.defined() && (pred.lo > 0 || pred.hi < 0);  // false for NaN bounds too
        const Verdict seen = verdict(meas, pred.lo > 0 ? +1 : -1);
        const char* v = !predicted ? "no predicted ranking"
                        : seen == Verdict::kHolds ? "seen"
                        : seen == Verdict::kContradicted ? "reversed"
                                                         : "not resolved";
        tally.add(std::string("Eq. 5 ranks the recipes' attenuation, ") + dir, "The chain, measured", v);
        if (!header) os << "| model | step | recipes | direction | measured | predicted | verdict |\n|---|---|---|---|---|---|---|\n", header = true;
        os << "| " << a.model << " | " << a.step << " | " << a.recipe << " - " << b.recipe << " | " << dir << " | " << interval_text(meas, "%+.4f") << " | "
           << interval_text(pred, "%+.4f") << " | **" << v << "** |\n";
      }
    }
  os << "\n";
}

// The chain measured through the trained network (Eq. 5 on the model itself), each quantized recipe's runs: at the
// stream's far ends, then point by point at the last step.
void write_chain(std::ostream& os, const Mechanism& m, Tally& tally) {
  os << "## The chain, measured: Eq. 5 through the trained network\n\n"
     << "At each captured step the step's micro-batch goes forward and back twice through the weights after the step's update: "
     << "quantized as the run's recipe trains, and with every operand left as it is (the same GEMMs in the compute dtype, BF16 on "
     << "the GPU; an FP32-emulated recipe's exact pass runs BF16 GEMMs too). alpha = <q, e> / ||e||^2 of the recipe's pass on the "
     << "exact one where the residual stream runs: forward, the activations; backward, the LM loss's gradient there. Eq. 5 "
     << "predicts exp(-sum delta) over the GEMMs the signal crossed (forward: every FPROP before the point; backward: every DGRAD "
     << "after it), delta = 1 - alpha_A alpha_B of each GEMM's operands as the recipe quantized them in the step's training pass "
     << "(before the update; a MoE layer's experts side by side: each of its linears once, at their mean). Eq. 5 counts the GEMMs "
     << "in series, while a residual stream also carries the signal past every branch; an operand's alpha above 1 (the endpoint "
     << "bin) makes its delta negative. Mean ± sd [95% t interval] over seeds.\n\n";
  std::vector<const Cell*> cells;
  std::vector<std::string> partial;  // quantized cells where some seeds lack the chain
  for (const auto& c : m.cells) {
    const auto with = std::count_if(c.seeds.begin(), c.seeds.end(), [](const StepFile* f) { return f->chain.rows() > 0 && f->own.rows() > 0; });
    if (with == static_cast<long>(c.seeds.size())) cells.push_back(&c);
    else if (std::all_of(c.seeds.begin(), c.seeds.end(), [](const StepFile* f) { return f->own.rows() > 0; }))
      partial.push_back(c.model + " " + c.recipe + " step " + std::to_string(c.step) + " (" + std::to_string(with) + " of " + std::to_string(c.seeds.size()) + ")");
  }
  if (!partial.empty()) {
    os << "Left out, a chain in none or only some of their seeds' step files (made before the chain was measured; `ufp4 analyze "
       << "capture` makes them again): ";
    for (size_t i = 0; i < partial.size(); ++i) os << (i ? ", " : "") << partial[i];
    os << ".\n\n";
  }
  if (cells.empty()) {
    os << "_No step file holds a chain table (captures made before the chain was measured: `ufp4 analyze capture` makes them again)._\n\n";
    return;
  }
  os << "| model | recipe | step | forward alpha, last block | predicted | backward alpha, embedding | predicted | LM loss, recipe - exact |\n"
     << "|---|---|---|---|---|---|---|---|\n";
  for (const Cell* c : cells) {
    const std::string last = chain_end(*c->seeds.front(), "forward");
    auto col = [&](const std::string& tap, const char* dir, size_t k) { return over_seeds(*c, [&](const StepFile& f) { return chain_at(f, tap, dir, k); }); };
    const Interval dloss = over_seeds(*c, [](const StepFile& f) { return f.chain_loss_recipe - f.chain_loss_exact; });
    os << "| " << c->model << " | " << c->recipe << " | " << c->step << " | " << interval_text(col(last, "forward", 0), "%.4f") << " | "
       << interval_text(col(last, "forward", 2), "%.4f") << " | " << interval_text(col("embedding", "backward", 0), "%.4f") << " | "
       << interval_text(col("embedding", "backward", 2), "%.4f") << " | " << interval_text(dloss, "%+.4f") << " |\n";
  }
  os << "\n";
  write_chain_verdicts(os, cells, tally);
  os << "Point by point at each run's last step (mean over seeds): measured alpha beside the predicted one, and the measured relative error, "
     << "forward and backward.\n\n";
  for (const Cell* c : cells) {
    if (!c->end) continue;
    os << "**" << c->model << ", " << c->recipe << "** (step " << c->step << ", " << c->seeds.size() << (c->seeds.size() == 1 ? " seed" : " seeds") << ")\n\n"
       << "| point | forward alpha | predicted | error | backward alpha | predicted | error |\n|---|---|---|---|---|---|---|\n";
    const LabelledTable& t = c->seeds.front()->chain;
    for (size_t i = 0; i < t.rows(); i += 2) {
      const std::string& tap = t.labels[i][0];
      auto mean = [&](const char* dir, size_t k) { return over_seeds(*c, [&](const StepFile& f) { return chain_at(f, tap, dir, k); }).mean; };
      os << "| " << tap << " | " << fmt("%.4f", mean("forward", 0)) << " | " << fmt("%.4f", mean("forward", 2)) << " | " << fmt("%.4f", mean("forward", 1))
         << " | " << fmt("%.4f", mean("backward", 0)) << " | " << fmt("%.4f", mean("backward", 2)) << " | " << fmt("%.4f", mean("backward", 1)) << " |\n";
    }
    os << "\n";
  }
}

}  // namespace

std::string report_mechanism(const std::string& root, const std::string& dir) {
  const Mechanism m = load_mechanism(root, dir);
  std::set<std::string> models, recipes, data;
  std::set<int64_t> seeds;
  double epochs = 0;
  for (const auto& f : m.files) models.insert(f.model), recipes.insert(f.recipe), seeds.insert(f.seed), data.insert(f.data_sha), epochs = std::max(epochs, f.epochs);
  std::ostringstream os;
  os << "# The shrinkage-bias mechanism on the runs we judge\n\n"
     << "Operands captured from training runs (" << m.files.size() << " captured steps of " << models.size() << " model(s), " << recipes.size()
     << " training recipe(s), " << seeds.size() << " seed(s), " << data.size() << " data manifest(s); the latest capture at "
     << fmt("%.2f", epochs) << " epochs; `ufp4 analyze capture`), "
     << "each analysed as it trained on its unrotated operands: 1x16 blocks, FP32 single-level max scaling (E4M3 and E8M0 beside it "
     << "where named), RTNE, without (I) and with RHT-16 (H16) along each GEMM's reduction dimension. Means over layers, then mean ± "
     << "sd [95% t interval] over seeds. Paper: " << m.paper["source"].value_or<std::string>("") << ".\n\n";
  Tally tally;
  std::ostringstream body;
  write_ranking(body, m, tally);
  write_families(body, m);
  write_gemm_claims(body, m, tally);
  write_fc1(body, m, tally);
  write_bins(body, m, tally);
  write_scales(body, m);
  write_alpha(body, m, tally);
  write_over_training(body, m);
  write_chain(body, m, tally);
  write_provenance_table(body, m);
  write_tally(os, tally);
  os << body.str();
  os << "---\nregenerate: `ufp4 report mechanism --results " << rel(dir) << "`\n";
  return os.str();
}

}  // namespace ufp4
