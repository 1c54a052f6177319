// Training reports: Table 1 (recipes), Table 2 (UFP4 component ablation), Figure 8 (BF16-relative gap).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/analysis/stats.h"
#include "harness/io/array_io.h"
#include "harness/io/run_results.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"
#include "models/recipe.h"

namespace ufp4 {

namespace {

std::string normalize(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string out, word;
  std::istringstream in(s);
  while (in >> word) {
    word.erase(std::remove(word.begin(), word.end(), '('), word.end());
    word.erase(std::remove(word.begin(), word.end(), ')'), word.end());
    if (word == "only" || word == "uniform" || word.empty()) continue;
    out += (out.empty() ? "" : " ") + word;
  }
  return out;
}

bool cell_matches(const std::string& ours, const std::string& paper) {
  size_t start = 0;
  while (start <= paper.size()) {
    size_t slash = paper.find(" / ", start);
    std::string alt = paper.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (normalize(alt) == normalize(ours)) return true;
    if (slash == std::string::npos) break;
    start = slash + 3;
  }
  return false;
}

// A bar chart, one bar a series in each category; the series titled and still empty.
Figure bar_chart(const std::string& title, const std::string& ylabel, const std::vector<std::string>& series_titles) {
  Figure f;
  f.kind = Figure::Kind::kBars;
  f.title = title;
  f.ylabel = ylabel;
  for (const auto& t : series_titles) {
    Series s;
    s.title = t;
    f.series.push_back(s);
  }
  return f;
}

// Table 2's runs: the sweep's model and length with the most runs, with the full-UFP4 runs of the same model
// and length, and the seeds every setting has.
struct Table2Runs {
  std::map<std::string, std::map<int64_t, RunSummary>> runs;  // recipe -> seed -> run
  std::string model;
  int64_t steps = 0;
  std::vector<int64_t> seeds;
  // A recipe's final validation loss (val) or mean training loss of the last K steps, seed for seed; empty if not run.
  std::vector<double> values(const std::string& recipe, bool val) const {
    std::vector<double> v;
    if (runs.count(recipe))
      for (int64_t s : seeds) v.push_back(val ? runs.at(recipe).at(s).final_eval : runs.at(recipe).at(s).tail_mean);
    return v;
  }
};

Table2Runs load_table2_runs(const std::vector<std::string>& dirs, int64_t k) {
  std::vector<std::string> files;
  for (const auto& d : dirs) walk_files(d, ".h5", files);
  // The table2 sweep's runs, and the full-UFP4 runs of the same model and length (the Figure 8
  // campaign's ufp4 member): recipe -> seed -> run.
  std::vector<RunSummary> all;
  std::map<std::string, int> models;
  for (const auto& f : files) {
    all.push_back(summarize(f, k));
    if (all.back().name.rfind("table2", 0) == 0 && all.back().steps >= 100) ++models[all.back().model + "/" + std::to_string(all.back().steps)];
  }
  if (models.empty()) throw Error("table2: no Table 2 runs found (train them with: build/ufp4 run experiments/table2/proxy.toml)");
  const std::string key = std::max_element(models.begin(), models.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  Table2Runs sweep;
  for (const auto& r : all) {
    if (r.model + "/" + std::to_string(r.steps) != key) continue;
    if (r.name.rfind("table2", 0) != 0 && r.recipe != "ufp4") continue;
    sweep.runs[r.recipe][r.seed] = r;
    sweep.model = r.model, sweep.steps = r.steps;
  }
  // Seeds every setting has: the pairs.
  for (const auto& [seed, r] : sweep.runs.begin()->second) {
    bool everywhere = true;
    for (const auto& [recipe, ss] : sweep.runs) everywhere = everywhere && ss.count(seed);
    if (everywhere) sweep.seeds.push_back(seed);
  }
  return sweep;
}

// The recipe a row of the paper's table names.
std::string row_recipe(const toml::table& paper, const std::string& row) { return paper["rows"][row]["recipe"].value_or<std::string>(""); }

// What each row of the table gives the figure, the verdicts and the footer.
struct Table2Rows {
  std::map<std::string, Interval> delta;             // row -> paired difference from the row it is measured against
  std::map<std::string, double> paper_delta, sd;     // row -> the paper's delta; our seed-to-seed sd of the loss
  std::vector<std::string> sources;
};

// The table's rows in the paper's order: ours (loss, delta, final validation loss) beside the paper's.
std::string table2_rows(const toml::table& paper, const Table2Runs& sweep, Table2Rows& out) {
  std::ostringstream os;
  os << "| setting | SR | fwd_y | bwd_dx | bwd_dw | epochs | loss (ours) | delta (ours) | final val loss (ours) | loss (paper) | delta (paper) |\n";
  os << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::set<std::string> listed;
  for (auto&& key_node : *paper["order"].as_array()) {
    const std::string row = key_node.value_or<std::string>("");
    auto t = paper["rows"][row];
    const std::string recipe = row_recipe(paper, row), against = t["against"].value_or<std::string>("");
    auto mark = [](bool b) { return b ? "x" : ""; };
    auto rht = t["rht"].as_array();
    const std::string head = "| " + t["setting"].value_or<std::string>("") + " | " + (t["sr"].value_or(false) ? "yes" : "no") + " | " +
                             mark((*rht)[0].value_or(false)) + " | " + mark((*rht)[1].value_or(false)) + " | " + mark((*rht)[2].value_or(false)) + " | ";
    if (!sweep.runs.count(recipe) || sweep.seeds.empty()) {
      os << head << " | not run | | | | |\n";
      continue;
    }
    const Interval loss = mean_interval(sweep.values(recipe, false));
    out.sd[row] = loss.sd;
    out.paper_delta[row] = t["delta"].value_or(NAN);
    const bool base = row == against;
    if (!base && sweep.runs.count(row_recipe(paper, against))) out.delta[row] = paired_difference(sweep.values(recipe, false), sweep.values(row_recipe(paper, against), false));
    os << head << fmt("%.2f", sweep.runs.at(recipe).begin()->second.epochs) << " | " << format_interval(loss, "%.4f") << " | "
       << (base ? "-" : out.delta.count(row) ? format_interval(out.delta[row], "%+.4f") : "?") << " | "
       << format_interval(mean_interval(sweep.values(recipe, true)), "%.4f") << " | " << fmt("%.5f", t["loss"].value_or(NAN)) << " | "
       << fmt("%+.5f", out.paper_delta[row]) << " |\n";
    if (listed.insert(recipe).second)
      for (int64_t s : sweep.seeds) out.sources.push_back(rel(sweep.runs.at(recipe).at(s).path) + " (commit " + sweep.runs.at(recipe).at(s).commit + ", " + sweep.runs.at(recipe).at(s).device + ")");
  }
  return os.str();
}

// The figure: each row's delta, ours beside the paper's.
std::string table2_figure(const toml::table& paper, const Table2Rows& rows, const std::string& figures) {
  Figure f = bar_chart("Table 2: loss delta of each setting (negative = better), mean over seeds", "delta loss", {"ours", "paper"});
  for (auto&& key_node : *paper["order"].as_array()) {
    const std::string row = key_node.value_or<std::string>("");
    if (!rows.delta.count(row)) continue;
    f.categories.push_back(paper["rows"][row]["setting"].value_or(std::string(row)));
    f.series[0].y.push_back(rows.delta.at(row).mean);
    f.series[1].y.push_back(rows.paper_delta.at(row));
  }
  return "\n" + figure_markdown(figures, "table2", f);
}

// "## Verdicts": the paper's claims judged on the paired runs, and the seed-to-seed spread of the loss.
std::string table2_verdicts(const toml::table& paper, const std::string& root, const Table2Runs& sweep, const Table2Rows& rows) {
  std::ostringstream os;
  // Verdicts: each claim a paired comparison of two settings (or several, all of which must hold).
  os << "\n## Verdicts\n\n";
  auto compare = [&](const std::string& a, const std::string& b) {  // loss(a) - loss(b), per seed
    return paired_difference(sweep.values(row_recipe(paper, a), false), sweep.values(row_recipe(paper, b), false));
  };
  auto line = [&](const std::string& what, const Interval& d, double paper_effect) {
    return what + ": " + format_interval(d, "%+.4f") + " nats (" + verdict_name(verdict(d, -1)) + "; detectable at " +
           std::to_string(d.n) + " seeds: " + fmt("%.4f", minimal_detectable_difference(d.sd, d.n)) + "; paper " + fmt("%+.5f", paper_effect) + ")";
  };
  auto claim = [&](const std::string& text, const std::vector<std::pair<std::string, std::string>>& pairs) {
    std::vector<std::string> parts;
    int holds = 0, contradicted = 0;
    for (const auto& [a, b] : pairs) {
      if (!sweep.runs.count(row_recipe(paper, a)) || !sweep.runs.count(row_recipe(paper, b))) {
        os << "- \"" << text << "\": needs the rows " << a << " and " << b << ".\n";
        return;
      }
      const Interval d = compare(a, b);
      const Verdict v = verdict(d, -1);
      holds += v == Verdict::kHolds;
      contradicted += v == Verdict::kContradicted;
      const double pe = paper["rows"][a]["loss"].value_or(NAN) - paper["rows"][b]["loss"].value_or(NAN);
      parts.push_back(line(paper["rows"][a]["setting"].value_or(a) + " minus " + paper["rows"][b]["setting"].value_or(b), d, pe));
    }
    const char* v = contradicted ? "contradicted" : holds == static_cast<int>(pairs.size()) ? "holds" : "inconclusive";
    os << "- \"" << text << "\" — **" << v << "**.";
    for (const auto& p : parts) os << "\n  - " << p;
    os << "\n";
  };
  for (const PaperClaim& c : paper_claims(paper, root + "/reports/paper/table2.toml")) claim(c.text, c.pairs);
  os << "- Seed-to-seed standard deviation of the loss:";
  for (const auto& [row, v] : rows.sd)
    if (row != "full_sr") os << " " << row << " " << fmt("%.4f", v) << ";";
  os << " nats. A claim holds when each of its paired intervals lies below zero, is contradicted when one lies above, and is "
        "inconclusive otherwise.\n";
  return os.str();
}


// Paths as the repository names them.
}  // namespace

std::string report_table1(const std::string& root) {
  toml::table paper = load_paper(root + "/reports/paper/table1.toml");
  std::vector<Recipe> rs;
  std::vector<std::string> names;
  for (auto&& n : *paper["recipes"].as_array()) names.push_back(n.value_or<std::string>(""));
  for (const auto& n : names) rs.push_back(Recipe::load(n));
  // Our rows, as the recipes command prints them.
  std::map<std::string, std::vector<std::string>> ours;
  for (auto& row : Recipe::table1_rows(rs)) ours[row.first] = std::move(row.second);
  std::ostringstream os;
  os << "# Table 1: the recipes\n\nOurs: the resolved presets `models/recipes/{" << names[0] << "," << names[1]
     << "}.toml`. Paper: " << paper["source"].value_or<std::string>("") << " (`reports/paper/table1.toml`).\n\n";
  os << "| | " << names[0] << " (ours) | " << names[0] << " (paper) | " << names[1] << " (ours) | " << names[1] << " (paper) | match |\n";
  os << "|---|---|---|---|---|---|\n";
  int mismatches = 0;
  for (auto&& key : *paper["order"].as_array()) {  // the paper's row order
    std::string row = key.value_or<std::string>("");
    std::vector<std::string> p;
    if (auto cells = paper["rows"][row].as_array())
      for (auto&& e : *cells) p.push_back(e.value_or<std::string>(""));
    if (p.size() != 2) throw Error("reports/paper/table1.toml: rows." + row + ": expected two cells");
    const auto& o = ours[row];
    bool m = o.size() == 2 && cell_matches(o[0], p[0]) && cell_matches(o[1], p[1]);
    mismatches += !m;
    os << "| " << row << " | " << (o.size() > 0 ? o[0] : "?") << " | " << p[0] << " | " << (o.size() > 1 ? o[1] : "?") << " | " << p[1]
       << " | " << (m ? "yes" : "**no**") << " |\n";
  }
  os << "\n**Verdict:** " << (mismatches ? std::to_string(mismatches) + " field(s) differ from the paper's Table 1"
                                         : "every field of the presets matches the paper's Table 1")
     << " (cells compared case-insensitively, ignoring parentheses and the words \"only\" and \"uniform\"; a paper cell "
        "with alternatives such as \"E1M2 / INT4\" matches either).\n";
  std::string src0 = rs[0].source, src1 = rs[1].source;
  for (std::string* src : {&src0, &src1})
    *src = rel(*src);
  os << footer("make reproduce-table-1", {"recipes: " + src0 + "; " + src1});
  if (mismatches) throw RuntimeError("table1: " + std::to_string(mismatches) + " field(s) differ from the paper");
  return os.str();
}

std::string report_table2(const std::string& root, const std::vector<std::string>& dirs, int64_t k, const std::string& figures) {
  toml::table paper = load_paper(root + "/reports/paper/table2.toml");
  const Table2Runs sweep = load_table2_runs(dirs, k);
  std::ostringstream os;
  os << "# Table 2: UFP4 component ablation (RHT scope x SR)\n\nOurs: " << sweep.model << ", " << sweep.steps << " steps (experiments/archive/1600-steps/table2/proxy.toml; the "
     << "full-UFP4 row is the ufp4 run of the Figure 8 campaign), " << sweep.seeds.size() << " seeds paired across settings (same initial weights and "
     << "batches); loss = mean training loss of the last K = " << k << " steps, mean over seeds with its 95% Student-t interval; delta = the "
     << "paired per-seed difference from the row it is measured against, with its interval. How to read intervals and verdicts: "
     << "`reports/README.md`. Paper: Dense 1.5B, E1M2, >100B tokens, mean LM loss (" << paper["source"].value_or<std::string>("") << ").\n\n";
  Table2Rows rows;
  os << table2_rows(paper, sweep, rows);
  os << table2_figure(paper, rows, figures);
  os << table2_verdicts(paper, root, sweep, rows);
  os << footer(regenerate_command("table2", dirs), rows.sources);
  return os.str();
}

namespace {

// Runs of `dirs` whose name starts with `prefix`, summarized.
std::vector<RunSummary> runs_named(const std::vector<std::string>& dirs, const std::string& prefix, int64_t k) {
  std::vector<std::string> files;
  for (const auto& d : dirs) walk_files(d, ".h5", files);
  std::vector<RunSummary> out;
  for (const auto& f : files) {
    if (is_run_results(f) && read_run_results(f, /*with_curves=*/false).run_name.rfind(prefix, 0) == 0) out.push_back(summarize(f, k));
  }
  return out;
}

}  // namespace

std::string report_table3(const std::string& root, const std::vector<std::string>& dirs, int64_t k, const std::string& figures) {
  toml::table paper = load_paper(root + "/reports/paper/table3.toml");
  std::vector<RunSummary> all = runs_named(dirs, "table3", k);
  if (all.empty()) throw Error("table3: no Table 3 runs found (train them with: make reproduce-table-3)");
  const std::string base_recipe = paper["base"].value_or<std::string>("e2m1_ref");
  // The campaign with the most runs (model and length), recipe -> seed -> run.
  std::map<std::string, int> groups;
  for (const auto& r : all) ++groups[r.model + "/" + std::to_string(r.steps)];
  const std::string group = std::max_element(groups.begin(), groups.end(), [](auto& a, auto& b) { return a.second < b.second; })->first;
  std::map<std::string, std::map<int64_t, RunSummary>> runs;
  std::string model;
  for (const auto& r : all)
    if (r.model + "/" + std::to_string(r.steps) == group) runs[r.recipe][r.seed] = r, model = r.model;
  if (!runs.count(base_recipe)) throw Error("table3: the base run (" + base_recipe + ") is missing");
  std::vector<int64_t> seeds;  // seeds every level has: the pairs
  for (const auto& [seed, r] : runs[base_recipe]) {
    bool everywhere = true;
    for (const auto& [recipe, ss] : runs) everywhere = everywhere && ss.count(seed);
    if (everywhere) seeds.push_back(seed);
  }
  auto loss = [&](const std::string& recipe, bool val = false) {
    std::vector<double> v;
    for (int64_t s : seeds) v.push_back(val ? runs[recipe][s].final_eval : runs[recipe][s].tail_mean);
    return v;
  };
  const RunSummary& base = runs[base_recipe].begin()->second;
  std::ostringstream os;
  os << "# Table 3: the E2M1 reference's one-factor search\n\nOurs: " << model << ", " << base.steps << " steps ("
     << (std::isnan(base.epochs) ? std::string("epochs not recorded") : fmt("%.2f", base.epochs) + " epochs") << "), each factor changed alone from the base (the E2M1 reference), " << seeds.size() << " seed(s) paired across levels (same "
     << "initial weights and batches); loss = mean training loss of the last K = " << base.k << " steps, mean over seeds with its 95% "
     << "Student-t interval; delta = the paired per-seed difference from the base (`reports/README.md`). Paper: Dense 1.5B, 200B tokens, "
     << "winner = lowest mean loss over the final 1,000 steps (" << paper["source"].value_or<std::string>("") << "); it publishes the "
     << "choice, not the losses.\n\n";
  std::vector<std::string> sources, verdicts;
  for (auto&& fk : *paper["order"].as_array()) {
    const std::string factor = fk.value_or<std::string>("");
    auto f = paper["factors"][factor];
    const std::string chosen = f["chosen"].value_or<std::string>("");
    os << "## " << factor << " (searched: " << f["searched"].value_or<std::string>("") << ")\n\n| level | recipe | loss (ours) | delta vs base | "
       << "final val loss | paper's choice |\n|---|---|---|---|---|---|\n";
    const toml::table* labels = f["labels"].as_table();
    std::string best;
    double best_loss = INFINITY;
    int present = 0;
    for (auto&& [rk, lv] : *labels) {
      const std::string recipe(rk.str());
      const bool is_chosen = recipe == chosen;
      if (!runs.count(recipe) || seeds.empty()) {
        os << "| " << lv.value_or<std::string>("") << " | " << recipe << " | not run | | | " << (is_chosen ? "**chosen**" : "") << " |\n";
        continue;
      }
      ++present;
      const Interval l = mean_interval(loss(recipe));
      if (l.mean < best_loss) best_loss = l.mean, best = recipe;
      os << "| " << lv.value_or<std::string>("") << " | " << recipe << " | " << format_interval(l, "%.4f") << " | "
         << (recipe == base_recipe ? std::string("0 (base)") : format_interval(paired_difference(loss(recipe), loss(base_recipe)), "%+.4f")) << " | "
         << format_interval(mean_interval(loss(recipe, true)), "%.4f") << " | " << (is_chosen ? "**chosen**" : "") << " |\n";
      if (recipe != base_recipe)
        for (int64_t s : seeds) sources.push_back(rel(runs[recipe][s].path) + " (commit " + runs[recipe][s].commit + ", " + runs[recipe][s].device + ")");
    }
    os << "\nPaper: " << f["remark"].value_or<std::string>("") << ".\n\n";
    if (present != static_cast<int>(labels->size())) {
      verdicts.push_back("- " + factor + ": " + std::to_string(present) + " of " + std::to_string(labels->size()) + " levels run; no verdict yet");
      continue;
    }
    // "The paper's choice is the best level": the choice minus each other level, per seed. Holds when
    // every interval lies below zero, contradicted when one lies above, inconclusive otherwise.
    int holds = 0, against = 0, others = 0;
    std::string worst_detail;
    double widest_mdd = 0;
    for (auto&& [rk, lv] : *labels) {
      const std::string recipe(rk.str());
      if (recipe == chosen) continue;
      ++others;
      const Interval d = paired_difference(loss(chosen), loss(recipe));
      const Verdict v = verdict(d, -1);
      holds += v == Verdict::kHolds;
      if (v == Verdict::kContradicted) {
        ++against;
        worst_detail += " " + lv.value_or<std::string>("") + " is lower by " + format_interval(d, "%+.4f") + ";";
      }
      widest_mdd = std::max(widest_mdd, minimal_detectable_difference(d.sd, d.n));
    }
    const char* v = against ? "contradicted" : holds == others ? "holds" : "inconclusive";
    verdicts.push_back("- " + factor + ": \"the paper's choice (" + (*labels)[chosen].value_or(std::string(chosen)) + ") is the best level\" — **" + v +
                       "**. Our lowest mean: \"" + (*labels)[best].value_or(std::string(best)) + "\"; the choice is below " + std::to_string(holds) +
                       " of " + std::to_string(others) + " other levels with 95% confidence;" + worst_detail +
                       (seeds.size() < 2 ? std::string(" one seed: no interval.")
                                         : " detectable differences up to " + fmt("%.4f", widest_mdd) + " nats at " + std::to_string(seeds.size()) + " seeds."));
  }
  for (int64_t s : seeds) sources.insert(sources.begin(), rel(runs[base_recipe][s].path) + " (commit " + runs[base_recipe][s].commit + ", " + runs[base_recipe][s].device + ")");
  {
    Figure f = bar_chart("Table 3: loss delta of each level against the E2M1 reference (negative = better), mean over seeds", "delta loss",
                         {"ours"});
    for (auto&& fk : *paper["order"].as_array()) {
      const std::string factor = fk.value_or<std::string>("");
      for (auto&& [rk, lv] : *paper["factors"][factor]["labels"].as_table()) {
        const std::string recipe(rk.str());
        if (recipe == base_recipe || !runs.count(recipe) || seeds.empty()) continue;
        f.categories.push_back(factor + ": " + lv.value_or<std::string>(""));
        f.series[0].y.push_back(paired_difference(loss(recipe), loss(base_recipe)).mean);
      }
    }
    os << figure_markdown(figures, "table3", f);
  }
  os << "## Verdicts\n\n";
  if (seeds.size() < 2)
    os << "One seed per level: differences have no interval, so no claim can hold or be contradicted here (results made before seeds "
          "were an axis; experiments/table3/proxy.toml now runs three).\n\n";
  for (const auto& v : verdicts) os << v << "\n";
  os << footer(regenerate_command("table3", dirs), sources);
  return os.str();
}

std::string report_figure10(const std::string& root, const std::vector<std::string>& dirs, int64_t k, const std::string& figures) {
  toml::table paper = load_paper(root + "/reports/paper/figure10.toml");
  // The E2M1 range-restricted runs and, by content, the bf16 / e2m1_ref runs of the same model and
  // length: "model/steps" -> recipe -> seed -> run.
  std::vector<RunSummary> all = runs_named(dirs, "", k);
  std::map<std::string, std::map<std::string, std::map<int64_t, RunSummary>>> by;
  for (const auto& r : all)
    if (r.recipe == "bf16" || r.recipe == "e2m1_ref" || r.recipe == "e2m1_rr") {
      if (r.name.rfind("figure9", 0) == 0 || r.name.rfind("table", 0) == 0 || r.name.rfind("analysis", 0) == 0) continue;
      auto& slot = by[r.model + "/" + std::to_string(r.steps)][r.recipe][r.seed];
      if (slot.path.empty() || r.name.rfind("figure10", 0) == 0) slot = r;
    }
  std::ostringstream os;
  os << "# Figure 10: range-restricted E2M1\n\nOurs: E2M1 with max_fpx 2 and RHT-16 on all three GEMMs (`ablations/e2m1_rr.toml`) "
     << "against the E2M1 reference and BF16, paired by seed (same initial weights and batches); loss = mean training loss of the last "
     << "K = " << k << " steps, gap = (L - L_bf16) / L_bf16, each the mean over seeds with its 95% Student-t interval (`reports/README.md`). "
     << "Paper: " << paper["source"].value_or<std::string>("") << " (claim only; values not recovered).\n\n";
  os << "| model | steps | seeds | epochs | bf16 | e2m1_ref | gap | e2m1_rr | gap |\n|---|---|---|---|---|---|---|---|---|\n";
  std::vector<std::string> sources, verdicts;
  std::map<std::string, std::pair<double, double>> bars;  // key -> mean gaps (ref, rr)
  for (auto& [key, rs] : by) {
    if (!rs.count("e2m1_rr")) continue;
    std::vector<int64_t> seeds;  // seeds every recipe present has
    for (const auto& [seed, r] : rs["e2m1_rr"]) {
      bool all_have = true;
      for (const auto& [rec, ss] : rs) all_have = all_have && ss.count(seed);
      if (all_have) seeds.push_back(seed);
    }
    auto loss = [&](const std::string& rec) {
      std::vector<double> v;
      if (rs.count(rec))
        for (int64_t s : seeds) v.push_back(rs[rec][s].tail_mean);
      return v;
    };
    auto gap = [&](const std::string& rec) {
      std::vector<double> v;
      if (rs.count(rec) && rs.count("bf16"))
        for (int64_t s : seeds) v.push_back(100 * (rs[rec][s].tail_mean - rs["bf16"][s].tail_mean) / rs["bf16"][s].tail_mean);
      return v;
    };
    const RunSummary& rr = rs["e2m1_rr"].begin()->second;
    const bool have_ref = rs.count("e2m1_ref") > 0, have_b = rs.count("bf16") > 0;
    auto cell = [](const std::vector<double>& v, const char* f, const char* unit) { return v.empty() ? std::string("-") : format_interval(mean_interval(v), f) + unit; };
    os << "| " << rr.model << " | " << rr.steps << " | " << seeds.size() << " | " << fmt("%.2f", rr.epochs) << " | " << cell(loss("bf16"), "%.4f", "")
       << " | " << cell(loss("e2m1_ref"), "%.4f", "") << " | " << cell(gap("e2m1_ref"), "%+.3f", "%") << " | " << cell(loss("e2m1_rr"), "%.4f", "")
       << " | " << cell(gap("e2m1_rr"), "%+.3f", "%") << " |\n";
    for (const auto& [rec, ss] : rs)
      for (int64_t s : seeds) sources.push_back(rel(ss.at(s).path) + " (commit " + ss.at(s).commit + ", " + ss.at(s).device + ")");
    if (have_ref) {
      const Interval d = paired_difference(loss("e2m1_rr"), loss("e2m1_ref"));
      verdicts.push_back("- " + rr.model + ": \"" + paper["claim"].value_or<std::string>("") + "\" — **" + verdict_name(verdict(d, +1)) +
                         "**. Paired difference e2m1_rr - e2m1_ref: " + format_interval(d, "%+.4f") + " nats over " + std::to_string(d.n) +
                         " seed(s); minimal detectable difference: " + fmt("%.4f", minimal_detectable_difference(d.sd, d.n)) +
                         " nats; paper: worse (no value recovered).");
      if (have_b) bars[key] = {mean_interval(gap("e2m1_ref")).mean, mean_interval(gap("e2m1_rr")).mean};
    }
  }
  if (sources.empty()) throw Error("figure10: no e2m1_rr runs found (train them with: make reproduce-figure-10)");
  {
    Figure f = bar_chart("Figure 10: BF16-relative gap of the E2M1 reference and range-restricted E2M1 (mean over seeds)", "gap (%)",
                         {"e2m1_ref", "e2m1_rr (max_fpx 2, full RHT)"});
    for (const auto& [key, g] : bars) {
      f.categories.push_back(key);
      f.series[0].y.push_back(g.first);
      f.series[1].y.push_back(g.second);
    }
    os << "\n" << figure_markdown(figures, "figure10", f);
  }
  os << "\n## Verdicts\n\n";
  for (const auto& v : verdicts) os << v << "\n";
  os << footer(regenerate_command("figure10", dirs), sources);
  return os.str();
}

}  // namespace ufp4
