// One page of every registered campaign's verdicts (reports/verdicts.md): per campaign whether its run set
// is complete, then each claim's primary test as its own report gives it (difference of the gaps with its
// interval, Holm-adjusted p, MDD beside the paper's effect, verdict), the one-factor groups' answers, and
// the count of each verdict over all claims. A reader who wants the registration, the cells, the secondary
// metric or the inputs of a claim follows the link to its campaign's report.
#include <algorithm>
#include <map>
#include <sstream>

#include "common/sha256.h"
#include "harness/analysis/campaign_stats.h"
#include "harness/report/campaign_text.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"

namespace ufp4 {

namespace {

struct CampaignVerdicts {
  const RunSet* set;
  CampaignRuns runs;
  std::vector<ClaimTest> tests;
};

std::string run_set_line(const RunSet& set) {
  std::ostringstream os;
  const size_t missing = set.missing();
  if (missing == 0) os << "Run set complete: all " << set.runs.size() << " runs";
  else os << "**Run set incomplete: " << missing << " of " << set.runs.size() << " runs missing**; a claim whose registered seeds are not all in reads inconclusive";
  if (set.seeds.seeds.empty()) {
    os << "; seeds not decided yet (the pilot is seeds 1-" << set.seeds.pilot << ").";
    return os.str();
  }
  os << "; seeds by the registered power rule:";
  bool first = true;
  for (const auto& [model, n] : set.seeds.seeds) os << (first ? " " : ", ") << model << " " << n, first = false;
  os << ".";
  return os.str();
}

std::string claims_table(const CampaignVerdicts& c) {
  std::ostringstream os;
  os << "| claim | model | statement | seeds | difference (pp) | Holm p | MDD (pp) | paper (pp) | verdict |\n|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& t : c.tests)
    os << "| " << t.claim.id << " | " << claim_models(t.claim) << " | " << t.claim.text << (t.claim.powered ? "" : " (not powered)") << " | " << t.diff.n
       << " | " << pp_interval(t.diff) << " | " << p_text(t.p_holm) << " | " << mdd_text(t.mdd) << " | " << registered_effect_text(t.claim) << " | "
       << shown_verdict(*c.set, c.tests, t) << " |\n";
  return os.str();
}

// A one-factor search's answers per group (Table 3), undecided while any of the group's claims is an interim look.
std::string groups_table(const CampaignVerdicts& c) {
  const std::vector<GroupAnswer> groups = group_answers(c.tests);
  if (groups.empty()) return "";
  std::ostringstream os;
  os << "\n| group | paper's choice | answer | lowest level (contrast against the choice, pp) | largest MDD (pp) |\n|---|---|---|---|---|\n";
  for (const auto& g : groups) {
    bool decided = true;
    for (const auto& t : c.tests)
      if (t.claim.group == g.group) decided = decided && !interim(*c.set, c.tests, t);
    os << "| " << g.group << " | " << g.choice << " | " << (decided ? group_answer_text(g) : "not decided (interim look: " + g.answer + ")") << " | "
       << lowest_level_text(g) << " | " << mdd_text(g.largest_mdd) << " |\n";
  }
  return os.str();
}

// The verdicts as shown (an interim look counts as inconclusive), over every campaign.
std::string totals_line(const std::vector<CampaignVerdicts>& all) {
  std::map<std::string, int> count;
  int claims = 0, early = 0, family = 0;  // interim: their own seeds short; their Holm family's
  for (const auto& c : all)
    for (const auto& t : c.tests) {
      ++claims;
      const bool before = interim(*c.set, c.tests, t), own = seeds_short(*c.set, t);
      early += before && own;
      family += before && !own;
      ++count[before ? "inconclusive" : verdict_name(t.verdict)];
    }
  std::ostringstream os;
  os << "**" << claims << " claim" << (claims == 1 ? "" : "s") << " in " << all.size() << " campaign" << (all.size() == 1 ? "" : "s") << ":**";
  bool first = true;
  for (const char* v : {"holds", "contradicted", "smaller than the paper", "inconclusive"}) os << (first ? " " : ", ") << count[v] << " " << v, first = false;
  if (early) os << " (" << early << " of them before their registered seeds are in" << (family ? "" : ")");
  if (family) os << (early ? ", " : " (") << family << " waiting for their Holm family's seeds)";
  os << ".\n";
  return os.str();
}

// The inputs: each campaign file and seeds file by content hash, and each run set as one digest of its
// files' content hashes (each campaign's own report lists them one by one).
std::vector<std::string> sources(const std::vector<CampaignVerdicts>& all) {
  std::vector<std::string> out;
  for (const auto& c : all) {
    out.push_back(c.set->campaign_path);
    if (!c.set->seeds.source.empty()) out.push_back(rel(c.set->seeds.source));
    std::vector<std::string> lines;
    for (const auto& [model, rs] : c.runs)
      for (const auto& [recipe, seeds] : rs)
        for (const auto& [seed, m] : seeds) lines.push_back(rel(m.path) + " " + m.content_sha256 + "\n");
    std::sort(lines.begin(), lines.end());
    std::string joined;
    for (const auto& l : lines) joined += l;
    out.push_back(std::to_string(lines.size()) + " result files of " + c.set->campaign + " (SHA-256 of their sorted \"path content\" lines " +
                  sha256_hex(joined).substr(0, 12) + ")");
  }
  return out;
}

// Every tested claim as a row: its difference and interval coloured by its verdict as shown (an interim look
// apart, open and pale), the paper's effect (or the effect of interest) beside it, zero marked. Claims
// without an interval are left out.
Figure forest_figure(const std::vector<CampaignVerdicts>& all) {
  struct Row {
    std::string label, verdict;
    double mean, lo, hi, effect;
  };
  std::vector<Row> rows;
  for (const auto& c : all)
    for (const auto& t : c.tests)
      if (t.diff.defined())
        rows.push_back({c.set->campaign + " " + t.claim.id, interim(*c.set, c.tests, t) ? "interim look (no verdict yet)" : verdict_name(t.verdict), t.diff.mean, t.diff.lo,
                        t.diff.hi, t.claim.paper_sized() ? t.claim.paper_effect : t.claim.effect_of_interest});
  Figure f;
  f.title = "Every claim: paired difference of the BF16-relative gaps (pp), 95% interval";
  f.xlabel = "difference of the gaps (percentage points)";
  f.height = std::max(440, 120 + 16 * static_cast<int>(rows.size()));
  std::string tics;
  for (size_t i = 0; i < rows.size(); ++i) tics += (i ? ", " : "") + std::string("\"") + rows[i].label + "\" " + std::to_string(rows.size() - i);
  f.extra = "set ytics (" + tics + ") noenhanced font ',10'\nset yrange [0:" + std::to_string(rows.size() + 1) +
            "]\nset arrow from 0, graph 0 to 0, graph 1 nohead lc rgb '#444444' dt 2\nset key outside bottom center horizontal maxrows 2 font ',10'\nset grid xtics noytics";
  const std::vector<std::pair<std::string, std::string>> colours = {
      {"holds", "#1a9850"}, {"contradicted", "#d73027"}, {"smaller than the paper", "#f46d43"}, {"inconclusive", "#878787"},
      {"interim look (no verdict yet)", "#bdbdbd"}};
  for (const auto& [verdict, colour] : colours) {
    Series s;
    s.title = verdict;
    // An interim look (fewer seeds than registered) is drawn open and pale: its interval is not a verdict's.
    s.style = "xerrorbars pt " + std::string(verdict == colours.back().first ? "6" : "7") + " ps 0.6 lc rgb '" + colour + "'";
    for (size_t i = 0; i < rows.size(); ++i)
      if (rows[i].verdict == verdict) {
        s.x.push_back(rows[i].mean), s.y.push_back(static_cast<double>(rows.size() - i));
        s.xlo.push_back(rows[i].lo), s.xhi.push_back(rows[i].hi);
      }
    if (!s.x.empty()) f.series.push_back(s);
  }
  Series paper;
  paper.title = "the paper's effect (or the effect of interest)";
  paper.style = "points pt 2 ps 0.8 lc rgb '#000000'";
  for (size_t i = 0; i < rows.size(); ++i) paper.x.push_back(rows[i].effect), paper.y.push_back(static_cast<double>(rows.size() - i));
  if (!paper.x.empty()) f.series.push_back(paper);
  return f;
}

}  // namespace

std::string report_verdicts(const std::vector<RunSet>& sets, const std::string& command, const std::string& figures) {
  std::vector<CampaignVerdicts> all;
  for (const auto& set : sets) {
    CampaignVerdicts c{&set, read_campaign_runs(set), {}};
    c.tests = test_claims(set.registration, c.runs);
    all.push_back(std::move(c));
  }
  std::ostringstream os;
  os << "# Verdicts: every registered claim, at a glance\n\n"
     << "Each row is a claim that a campaign registered before its runs, tested on the primary metric: the final validation loss over the whole "
        "validation split, as the BF16-relative gap of the same seed. Difference: the paired difference of the gaps in percentage points with its "
        "95% interval; Holm p: adjusted within the claim's registered family; MDD: the minimal detectable difference of the seeds run, beside the "
        "paper's effect (or, where the paper gives no size, the registered effect of interest). The four verdicts are defined in "
        "`reports/README.md`; a claim whose registered seeds are not all in reads inconclusive, with what the test gives so far. Each "
        "campaign's report holds its registration, cells, secondary metric (the training loss of the last tenth of the steps), transition "
        "delays, curves and inputs.\n\n"
     << totals_line(all) << "\n" << figure_markdown(figures, "verdicts", forest_figure(all));
  for (const auto& c : all) {
    os << "\n## " << c.set->title << " (`reports/" << c.set->report << ".md`)\n\n" << run_set_line(*c.set) << "\n\n" << claims_table(c) << groups_table(c);
  }
  os << "\nThe mechanism (Key Findings 1 and 2, Eq. 5's chain) is measured on captured operands rather than tested over seeds of a campaign: "
        "`reports/mechanism.md` opens with its verdicts at a glance.\n";
  os << footer(command, sources(all));
  return os.str();
}

}  // namespace ufp4
