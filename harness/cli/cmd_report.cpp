// `ufp4 report NAME`: renders a reproduction report (Markdown, SVG figures under figures/ beside it),
// as the report registry (harness/report/report_registry.h) says: a registered campaign from its run
// set; the campaigns of the 1,600-step design from results/archive/ into reports/archive/, marked as
// archived (--archived where a campaign has replaced them). Re-rendering unchanged inputs leaves the
// file as it was; a default output that would change is replaced only with --force.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/cli/cli.h"
#include "harness/io/run_set.h"
#include "harness/report/report.h"
#include "harness/report/report_registry.h"
#include "harness/plan/campaign.h"

namespace ufp4 {

namespace {

// A private folder under $TMPDIR (or /tmp) for a report's figures while it renders, removed with
// whatever is in it when this goes out of scope, a throw included. Empty path: no figures.
struct StagingDir {
  std::string path;
  explicit StagingDir(bool wanted) {
    if (!wanted) return;
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/ufp4-figures-XXXXXX";
    if (!::mkdtemp(templ.data())) throw RuntimeError("report: cannot make a staging folder for the figures under " + templ.substr(0, templ.rfind('/')));
    path = templ;
  }
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    walk_files(path, "", out);
    return out;
  }
  ~StagingDir() {
    if (path.empty()) return;
    for (const auto& f : files()) std::remove(f.c_str());
    ::rmdir(path.c_str());
  }
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
};

// Why each archived report's inputs carry no verdict (results/archive/README.md says it in full).
std::string archived_banner(const std::string& name) {
  std::string why;
  if (name == "analysis")
    why = "Its operands come from a bf16 dense-113m trained about 3.6 epochs on the archived 9.1M-token standard-library corpus, one seed "
          "and one step, not from current-corpus FP4 training; captures from the runs the campaigns judge will replace it.";
  else if (name == "figure9")
    why = "The ladder mixes training stages (405 to 3,550 steps): its small sizes end inside the fast-descent transition, so its gap rises "
          "with compute and the power law misses the runs by 0.09 nats; no verdict below stands.";
  else
    why = "These runs end inside the fast-descent transition that FP4 delays by a seed-dependent amount, so their seed noise is several "
          "times the paper's effects; no verdict below stands.";
  return "> **Archived.** " + why + " Kept for the record (results/archive/README.md); campaigns at the decisive design replace them "
         "(reports/README.md).\n\n";
}

std::string with_banner(const std::string& md, const std::string& name) {
  const size_t nl = md.find("\n\n");
  return nl == std::string::npos ? md : md.substr(0, nl + 2) + archived_banner(name) + md.substr(nl + 2);
}

}  // namespace

int cmd_report(const std::vector<std::string>& args) {
  std::string name, out;
  ReportInputs in;
  bool force = false, archived_wanted = false;
  po::options_description d("options");
  d.add_options()
      ("name", po::value(&name), report_names(" | ").c_str())
      ("campaign", po::value(&in.campaign), "campaign reports: the campaign file (default: the report's registered campaign)")
      ("results", po::value(&in.dirs)->multitoken(), "reports from folders of run results (CI scale; default: the archived campaign's)")
      ("archived", po::bool_switch(&archived_wanted), "the archived 1,600-step campaign's report (reports/archive/NAME.md) where a campaign replaced it")
      ("last-k", po::value(&in.last_k)->default_value(200), "reports from folders: steps averaged at the end of each run")
      ("tensors", po::value(&in.tensors), "analysis: output of `ufp4 analyze tensors`")
      ("chain", po::value(&in.chains)->multitoken(), "analysis: outputs of `ufp4 analyze chain`")
      ("fits", po::value(&in.fits), "figure9: output of `ufp4 fit`")
      ("out", po::value(&out), "write the Markdown here (default: reports/NAME.md; - for stdout, without figures)")
      ("force", po::bool_switch(&force), "replace the default output when the new rendering differs from it");
  po::positional_options_description pos;
  pos.add("name", 1);
  auto vm = parse_command("report", "NAME [--campaign FILE | --results DIR... | --archived] [--out FILE] [--force]", d, args, &pos);
  if (!vm) return 0;
  in.root = repository_root();
  if (in.root.empty()) throw Error("report: no ufp4 checkout here or above (reports read the repository's results and paper numbers: run from a checkout)");
  const ReportEntry& entry = report_entry(name);
  const bool told = force || !out.empty();
  if (archived_wanted && entry.archived_dirs.empty())
    throw Error("report: --archived: '" + name + "' has no archived campaign (allowed: those with one: table2, table3, figure10)");
  // A registered campaign renders from its run set unless folders or the archive are asked for (its
  // paths are relative to the checkout's root, where reports are rendered from).
  if (in.campaign.empty() && in.dirs.empty() && !archived_wanted) in.campaign = entry.campaign;
  if (!in.campaign.empty() && (!in.dirs.empty() || archived_wanted)) throw Error("report: --campaign goes without --results and --archived");
  if (entry.every_campaign && !in.dirs.empty()) throw Error("report: " + name + " reads campaigns (--campaign FILE), not --results folders");
  // One campaign's page goes elsewhere than the page of every campaign (reports/verdicts.md).
  if (entry.every_campaign && !in.campaign.empty() && out.empty()) throw Error("report: " + name + " --campaign FILE: give --out (reports/" + name + ".md holds every campaign's)");
  if (in.campaign.empty() && !entry.render) throw Error("report: '" + name + "' renders from a campaign only (give --campaign FILE)");
  // Archived: an archived campaign's report from its own (default) inputs, not one from inputs given here.
  const bool defaulted = in.dirs.empty() && in.tensors.empty() && in.fits.empty() && in.chains.empty();
  const bool archived = in.campaign.empty() && entry.archived && defaulted;
  const std::string file = in.campaign.empty() && !defaulted && !entry.own_inputs_name.empty() ? entry.own_inputs_name : name;
  if (out.empty()) out = in.root + "/reports/" + (archived ? "archive/" : "") + file + ".md";
  const std::string final_figures = out == "-" ? "" : (out.find('/') == std::string::npos ? "." : out.substr(0, out.rfind('/'))) + "/figures";
  // Figures are drawn into a staging folder and copied beside the report only where the report itself
  // is written: a refused or unchanged report leaves its figures as they were.
  const StagingDir staging(!final_figures.empty());
  in.figures = staging.path;
  if (in.dirs.empty())
    for (const auto& dir : entry.archived_dirs) in.dirs.push_back(in.root + "/" + dir);
  std::string md;
  if (!in.campaign.empty() && !entry.every_campaign) {
    const Campaign c = Campaign::load(in.campaign);
    if (c.report != name) throw Error(in.campaign + ": report: '" + c.report + "', not '" + name + "' (ufp4 report " + c.report + " --campaign " + in.campaign + ")");
    md = report_campaign(c.resolve(), in.figures);
  } else {
    md = entry.render(in);
  }
  const std::string& figures = in.figures;
  if (archived) md = with_banner(md, name);
  if (out == "-") {
    std::cout << md;
    return 0;
  }
  if (out.find('/') != std::string::npos) make_dirs(out.substr(0, out.rfind('/')));
  const bool wrote = write_text_if_changed(out, md, told, "report");
  if (wrote || told) {
    if (!staging.files().empty()) make_dirs(final_figures);
    for (const auto& f : staging.files()) write_text_if_changed(final_figures + f.substr(figures.size()), read_text_file(f), true, "report");
  }
  std::cout << md << "\n" << (wrote ? "written to " : "unchanged: ") << out << "\n";
  return 0;
}

}  // namespace ufp4
