#include "harness/report/report_registry.h"

#include <algorithm>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/run_set.h"
#include "harness/plan/campaign.h"
#include "harness/report/report.h"

namespace ufp4 {

namespace {

// The archived shrinkage-bias inputs (results/archive/README.md), until captures of current runs replace them.
std::string report_archived_analysis(const ReportInputs& in) {
  const std::string analysis = in.root + "/results/archive/analysis-stdlib-corpus";
  std::vector<std::string> chains = in.chains;
  if (chains.empty()) {
    std::vector<std::string> files;
    if (is_dir(analysis)) walk_files(analysis, ".h5", files);
    for (const auto& f : files)
      if (f.find("/chain-") != std::string::npos) chains.push_back(f);
    std::sort(chains.begin(), chains.end());
  }
  return report_analysis(in.root, in.tensors.empty() ? analysis + "/tensors-dense113m.h5" : in.tensors, chains, in.figures);
}

// Every committed campaign (experiments/*/campaign.toml whose results live under results/: not the demo's), the
// paper's tables and figures in its order and any other after them by name; or the one --campaign names.
std::string report_all_verdicts(const ReportInputs& in) {
  std::vector<Campaign> campaigns;
  if (!in.campaign.empty()) campaigns.push_back(Campaign::load(in.campaign));
  const std::vector<std::string> order = {"figure8", "figure10", "table2", "factorial", "table3", "figure9", "emulation"};
  const auto rank = [&](const Campaign& c) {
    const std::string dir = c.path.substr(0, c.path.rfind('/'));
    return std::find(order.begin(), order.end(), dir.substr(dir.rfind('/') + 1)) - order.begin();
  };
  if (in.campaign.empty()) {
    for (const auto& f : campaign_files(in.root + "/experiments")) {
      Campaign c = Campaign::load(f.substr(in.root.size() + 1));  // as the campaigns name their paths: from the checkout's root
      if (c.results_dir.rfind("results/", 0) == 0) campaigns.push_back(std::move(c));
    }
    std::stable_sort(campaigns.begin(), campaigns.end(), [&](const Campaign& a, const Campaign& b) { return rank(a) < rank(b); });
  }
  std::vector<RunSet> sets;
  for (const auto& c : campaigns) sets.push_back(c.resolve());
  return report_verdicts(sets, "build/ufp4 report verdicts" + (in.campaign.empty() ? std::string() : " --campaign " + in.campaign), in.figures);
}

std::vector<ReportEntry> entries() {
  const std::vector<std::string> f8 = {"results/archive/figure8-1600-steps"};
  return {
      {"table1", "the recipe presets against reports/paper/table1.toml", "", {}, false, [](const ReportInputs& in) { return report_table1(in.root); }},
      {"table2", "its campaign's run set; --results folders (CI scale); --archived: the 1,600-step campaign", "experiments/table2/campaign.toml",
       {"results/archive/table2-1600-steps", f8[0]}, true, [](const ReportInputs& in) { return report_table2(in.root, in.dirs, in.last_k, in.figures); }},
      {"table3", "its campaign's run set; --results folders (CI scale); --archived: the 1,600-step campaign", "experiments/table3/campaign.toml",
       {"results/archive/table3-1600-steps"}, true, [](const ReportInputs& in) { return report_table3(in.root, in.dirs, in.last_k, in.figures); }},
      {"figure8", "its campaign's run set (--campaign, default experiments/figure8/campaign.toml)", "experiments/figure8/campaign.toml", {}, false, nullptr},
      {"figure10", "its campaign's run set; --results folders (CI scale); --archived: the 1,600-step campaign", "experiments/figure10/campaign.toml",
       {"results/archive/figure10-1600-steps", f8[0]}, true, [](const ReportInputs& in) { return report_figure10(in.root, in.dirs, in.last_k, in.figures); }},
      {"factorial", "its campaign's run set (experiments/factorial/campaign.toml)", "experiments/factorial/campaign.toml", {}, false, nullptr},
      {"emulation", "its campaign's run set (experiments/emulation/campaign.toml)", "experiments/emulation/campaign.toml", {}, false, nullptr},
      {"analysis", "--tensors (ufp4 analyze tensors) and --chain files (default: the archived capture)", "", {}, true, report_archived_analysis},
      {"mechanism", "--results folder of `ufp4 analyze capture` step files (default: results/analysis/mechanism)", "", {}, false,
       [](const ReportInputs& in) { return report_mechanism(in.root, in.dirs.empty() ? in.root + "/results/analysis/mechanism" : in.dirs.front()); }},
      {"figure9", "--fits (ufp4 fit; default: the archived ladder's; given: reports/figure9-fit.md); --campaign experiments/figure9/campaign.toml: the ladder's claims",
       "", {}, true,
       [](const ReportInputs& in) {
         return report_figure9(in.root, in.fits.empty() ? in.root + "/results/archive/figure9-mixed-stages/fits/figure9-proxy.h5" : in.fits, in.figures);
       },
       "figure9-fit"},
      {"verdicts", "every committed campaign's claims (experiments/*/campaign.toml with results under results/); --campaign FILE --out F: one", "", {}, false,
       report_all_verdicts, "", true},
      {"bench", "--results folder (default: results/bench)", "", {}, false,
       [](const ReportInputs& in) { return report_bench(in.root, in.dirs.empty() ? in.root + "/results/bench" : in.dirs.front(), in.figures); }},
  };
}

}  // namespace

const std::vector<ReportEntry>& report_registry() {
  static const std::vector<ReportEntry> r = entries();
  return r;
}

std::string report_names(const std::string& separator) {
  std::string s;
  for (const auto& e : report_registry()) s += (s.empty() ? "" : separator) + e.name;
  return s;
}

const ReportEntry& report_entry(const std::string& name) {
  for (const auto& e : report_registry())
    if (e.name == name) return e;
  throw Error("report: unknown report '" + name + "' (allowed: " + report_names() + ")");
}

}  // namespace ufp4
