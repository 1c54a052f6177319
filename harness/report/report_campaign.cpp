// Reports of campaigns (harness/plan/campaign.h), rendered from their run sets: what was registered
// before the runs, whether the set is complete, each cell's numbers, each claim's registered test and
// verdict beside the paper's effect, the seeds and what they can resolve, the delay of the fast-descent
// transition, how far the seeds lie apart as they train, the loss curves, and the inputs by content hash.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "harness/analysis/campaign_stats.h"
#include "harness/analysis/stats.h"
#include "harness/report/campaign_text.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"

namespace ufp4 {

namespace {

// The run set's completeness, at the top: a report of an incomplete set says so first.
std::string set_status(const RunSet& set) {
  std::ostringstream os;
  const size_t missing = set.missing();
  if (missing == 0) {
    os << "Run set: all " << set.runs.size() << " runs of `" << set.campaign_path << "` have verified results in `" << set.results_dir << "`.\n";
  } else {
    os << "> **Incomplete run set: " << missing << " of " << set.runs.size() << " runs of `" << set.campaign_path
       << "` have no results yet.** Numbers below use the runs present; a verdict needs the registered seeds.\n>\n> Missing:";
    size_t shown = 0;
    for (const auto& r : set.runs)
      if (r.path.empty() && shown++ < 24) os << " `" << r.name << "`";
    if (missing > 24) os << " and " << missing - 24 << " more";
    os << ".\n";
  }
  if (!set.ignored.empty()) {
    os << "\nIgnored (in the results folder, not in the run set):\n";
    for (const auto& why : set.ignored) os << "- " << rel(why) << "\n";
  }
  return os.str();
}

std::string registration_section(const RunSet& set) {
  const Registration& g = set.registration;
  std::ostringstream os;
  // A campaign that reads another's runs was registered before any run of its own, not before those.
  os << "## Registration (" << g.date << ", before any run" << (set.read_dirs.empty() ? "" : " of its own") << "; `" << set.campaign_path << "`)\n\n"
     << "- Metric: " << g.metric << "\n- Secondary: " << g.secondary << "\n- Test: " << g.test << "; alpha " << fmt("%.3g", g.alpha)
     << ", target power " << fmt("%.2g", g.power) << "; Holm within the family `" << g.family << "`\n";
  if (!g.notes.empty()) os << "- " << g.notes << "\n";
  os << "\n| claim | model | statement | contrast (pp) | paper's effect (pp) | source |\n|---|---|---|---|---|---|\n";
  for (const auto& c : g.claims) {
    os << "| " << c.id << " | " << claim_models(c) << " | " << c.text << " | " << c.contrast_text() << (c.direction < 0 ? " < 0" : " > 0") << (c.powered ? "" : " (not powered)") << " | "
       << (c.paper_sized() ? fmt("%+.4f", c.paper_effect) : "not published; effect of interest " + fmt("%+.4f", c.effect_of_interest)) << " | "
       << (c.paper_sized() ? c.paper_source : c.effect_source) << " |\n";
  }
  return os.str();
}

std::string seeds_section(const RunSet& set, const std::vector<ClaimTest>& tests) {
  const SeedPlan& s = set.seeds;
  std::ostringstream os;
  os << "\n## Seeds\n\nPilot: seeds 1-" << s.pilot << " of every cell estimate each claim's paired standard deviation; the registered rule then sets "
     << "each model's seeds to the fewest whose minimal detectable difference reaches the claim's registered effect (the paper's, or an effect of interest where the paper gives no size), within [" << s.min << ", " << s.max
     << "] (the budget), and the pilot's runs count among them.\n\n";
  if (s.source.empty()) {
    os << "The pilot is not complete: no seeds were decided yet.\n";
    return os.str();
  }
  os << "| claim | pilot's paired sd (pp) | seeds for the power | seeds run | minimal detectable difference now (pp) | registered effect (pp) |\n"
     << "|---|---|---|---|---|---|\n";
  for (const auto& t : tests) {
    const std::string id = t.claim.id;
    os << "| " << id << " | " << (s.pilot_sd.count(id) ? fmt("%.3f", s.pilot_sd.at(id)) : "-") << " | "
       << (s.seeds_for_power.count(id) ? std::to_string(s.seeds_for_power.at(id)) : "-") << " | " << t.diff.n << " | " << mdd_text(t.mdd) << " | "
       << fmt("%+.3f", t.claim.effect_of_interest) << (t.claim.paper_sized() ? "" : " (of interest)") << " |\n";
  }
  os << "\nSource: `" << rel(s.source) << "`.\n";
  return os.str();
}

std::string cells_section(const CampaignRuns& runs, const std::string& baseline, const toml::table& paper) {
  std::ostringstream os;
  os << "\n## Cells\n\nMean over seeds with its 95% interval. Gap: (L - L_" << baseline << ") / L_" << baseline << " in percent, per seed "
     << "(recipes of one seed share initial weights and batches). Val: the final validation loss over every window of the validation "
     << "split. Train: the mean training loss of the last K steps (the last tenth).\n\n"
     << "| model | recipe | seeds | steps | K | epochs | val loss | val gap (%) | train loss | train gap (%) | paper model | paper gap (%) |\n"
     << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& [model, rs] : runs) {
    const std::string kind = model.find("moe") != std::string::npos ? "moe" : "dense";  // moe-ne4.0m, tiny-moe
    for (const auto& [recipe, seeds] : rs) {
      std::vector<double> val, train, vgap, tgap;
      int64_t steps = 0, k = 0;
      double epochs = NAN;
      for (const auto& [seed, m] : seeds) {
        val.push_back(m.final_val), train.push_back(m.train_tail);
        steps = m.steps, k = m.last_k, epochs = m.epochs;
        if (rs.count(baseline) && rs.at(baseline).count(seed) && recipe != baseline) {
          const RunMetrics& b = rs.at(baseline).at(seed);
          vgap.push_back(100 * (m.final_val - b.final_val) / b.final_val);
          tgap.push_back(100 * (m.train_tail - b.train_tail) / b.train_tail);
        }
      }
      const double pg = paper[kind][recipe].value_or(NAN);
      os << "| " << model << " | " << recipe << " | " << seeds.size() << " | " << steps << " | " << k << " | " << fmt("%.2f", epochs) << " | "
         << format_interval(mean_interval(val)) << " | " << (vgap.empty() ? "-" : pp_interval(mean_interval(vgap))) << " | " << format_interval(mean_interval(train))
         << " | " << (tgap.empty() ? "-" : pp_interval(mean_interval(tgap))) << " | " << paper[kind]["model"].value_or<std::string>("-") << " | "
         << (std::isnan(pg) ? std::string("-") : fmt("%.4f", pg)) << " |\n";
    }
  }
  return os.str();
}

// One-factor groups (Table 3): per group whether the paper's choice is best, tied within the MDD, or
// beaten, from the group's Holm-adjusted claims; undecided while any of them is an interim look.
std::string groups_section(const RunSet& set, const std::vector<ClaimTest>& tests) {
  const std::vector<GroupAnswer> groups = group_answers(tests);
  if (groups.empty()) return "";
  std::ostringstream os;
  os << "\n## The paper's choices\n\nPer group, the paper's choice against every level searched (Holm within the group): **best** when it is "
        "detectably below every level, **beaten** when a level is detectably below it, otherwise **tied within the MDD**.\n\n"
     << "| group | paper's choice | levels | lowest level (contrast against the choice, pp) | largest MDD (pp) | answer |\n|---|---|---|---|---|---|\n";
  for (const auto& g : groups) {
    bool decided = true;
    for (const auto& t : tests)
      if (t.claim.group == g.group) decided = decided && !interim(set, tests, t);
    std::string levels;
    for (const auto& l : g.levels) levels += (levels.empty() ? "" : ", ") + l;
    const std::string answer = group_answer_text(g);
    os << "| " << g.group << " | " << g.choice << " | " << levels << " | " << lowest_level_text(g) << " | "
       << (std::isnan(g.largest_mdd) ? std::string("-") : fmt("%.3f", g.largest_mdd)) << " | " << (decided ? answer : "not decided (interim look: " + g.answer + ")") << " |\n";
  }
  return os.str();
}

std::string transition_section(const std::vector<TransitionDelay>& delays, const std::string& baseline) {
  if (delays.empty()) return "";
  std::ostringstream os;
  os << "\n## The fast-descent transition\n\nSteps until the training loss (50-step average; a tenth of a shorter run) first reaches the level the " << baseline
     << " runs reach on average at a quarter of their steps, and the delay against " << baseline << " of the same seed (mean [95% interval]).\n\n"
     << "| model | recipe | loss level | steps to reach it | delay against " << baseline << " (steps) |\n|---|---|---|---|---|\n";
  for (const auto& d : delays)
    os << "| " << d.model << " | " << d.recipe << " | " << fmt("%.3f", d.level) << " | " << format_interval(d.steps, "%.0f") << " | "
       << (d.recipe == baseline ? std::string("-") : format_interval(d.delay, "%+.0f")) << " |\n";
  return os.str();
}

std::string spread_section(const std::vector<SeedSpread>& spreads) {
  if (spreads.empty()) return "";
  std::ostringstream os;
  os << "\n## How far the seeds lie apart\n\nThe standard deviation over seeds of the validation loss (nats) at each evaluation, and the last one against the "
        "largest. The design assumes the spread falls after the transition; one that has not fallen by the end (at least "
     << fmt("%.1f", SeedSpread::kNotFallen)
     << " of its largest) marks runs that end in a seed-dependent descent, where the paired sd behind the MDDs above is large too and the MDD "
        "falls only as one over the square root of the seeds from a high level. The evaluations before the last read a fixed part of the split and the "
        "last the whole split (the decisive design's manifests), whose smaller sampling noise makes the ratio lean low.\n\n"
     << "| model | recipe | seeds | sd at each evaluation (steps trained: sd) | end / largest |\n|---|---|---|---|---|\n";
  for (const auto& s : spreads) {
    std::string at;
    for (size_t i = 0; i < s.steps.size(); ++i) at += (i ? ", " : "") + fmt("%.0f", s.steps[i]) + ": " + fmt("%.3f", s.sd[i]);
    const size_t most = *std::max_element(s.seeds.begin(), s.seeds.end());
    const std::string seeds = std::to_string(most) + (s.seeds.back() < most ? " (" + std::to_string(s.seeds.back()) + " at the end)" : "");
    const double ratio = s.end_to_largest();
    const std::string end = std::isnan(ratio) ? std::string("-") : fmt("%.2f", ratio);
    os << "| " << s.model << " | " << s.recipe << " | " << seeds << " | " << at << " | " << (s.not_fallen() ? "**" + end + ": not fallen**" : end) << " |\n";
  }
  return os.str();
}

std::string curves_section(const CampaignRuns& runs, const std::string& figures, const std::string& prefix) {
  if (figures.empty()) return "";
  std::ostringstream os;
  os << "\n## Loss curves\n\nTraining loss, the 50-step average, mean over seeds.\n\n";
  for (const auto& [model, rs] : runs) {
    Figure f;
    f.title = model + ": training loss (50-step average, mean over seeds)";
    f.xlabel = "step";
    f.ylabel = "loss";
    f.extra = "set yrange [*:*]";
    for (const auto& [recipe, seeds] : rs) {
      Series s;
      s.title = recipe;
      s.style = "lines";
      std::vector<double> sum;
      for (const auto& [seed, m] : seeds) {
        if (sum.empty()) sum.assign(m.loss.size(), 0.0);
        for (size_t i = 0; i < std::min(sum.size(), m.loss.size()); ++i) sum[i] += m.loss[i] / static_cast<double>(seeds.size());
      }
      const std::vector<double> ma = moving_average(sum, 50);
      for (size_t j = 0; j < ma.size(); ++j)
        if ((j + 49) % 10 == 9) s.x.push_back(static_cast<double>(j + 49)), s.y.push_back(ma[j]);
      f.series.push_back(s);
    }
    os << figure_markdown(figures, prefix + "-" + model, f);
  }
  return os.str();
}

}  // namespace

std::string report_campaign(const RunSet& set, const std::string& figures) {
  const toml::table paper = set.paper.empty() ? toml::table{} : load_paper(set.paper);  // relative to where the campaign is read from, as its other paths
  const CampaignRuns runs = read_campaign_runs(set);
  const std::vector<ClaimTest> tests = test_claims(set.registration, runs);
  const std::string baseline = baseline_recipe(set.registration);
  std::ostringstream os;
  os << "# " << set.title << "\n\n" << set_status(set) << "\n";
  if (!set.paper.empty()) {
    const std::string what = paper["metric"].value_or(paper["claim"].value_or<std::string>(""));
    os << "Paper: " << paper["source"].value_or<std::string>("") << " (" << (what.empty() ? "" : what + "; ") << "`" << set.paper << "`). ";
  }
  os << "Ours: the campaign below, paired by seed; how to read it: `reports/README.md`.\n\n";
  os << registration_section(set) << seeds_section(set, tests) << cells_section(runs, baseline, paper) << verdicts_section(set, tests, set.registration.alpha) << groups_section(set, tests);
  if (const auto* large = paper["moe_large"].as_table())
    os << "- " << (*large)["model"].value_or<std::string>("") << ": no proxy of its own; the MoE proxy stands for both MoE sizes.\n";
  os << transition_section(transition_delays(runs, baseline), baseline) << spread_section(seed_spreads(runs)) << curves_section(runs, figures, set.campaign);
  std::vector<std::string> sources;
  for (const auto& [model, rs] : runs)
    for (const auto& [recipe, seeds] : rs)
      for (const auto& [seed, m] : seeds)
        sources.push_back(rel(m.path) + " (commit " + m.commit + ", " + m.device + ", content " + m.content_sha256.substr(0, 12) + ")");
  os << footer("build/ufp4 report " + set.report + " --campaign " + set.campaign_path, sources);
  return os.str();
}

}  // namespace ufp4
