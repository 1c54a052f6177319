// The paper's experiments at CI scale, end to end through the CLI: runs (the fixture's, or a subset
// trained here), their reports, intervals and verdicts, and plan's time estimates.
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "common/error.h"
#include "common/fs.h"
#include "harness/campaign/run_times.h"
#include "harness/io/array_io.h"
#include "harness/io/run_results.h"
#include "harness/plan/campaign.h"
#include <hdf5.h>
#include "models/quant_ops.h"
#include "tests/catch.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

using Result = test::CliResult;
using test::run_cli;
using test::temp_dir;

}  // namespace

TEST_CASE("Table 3 and Figure 10 at CI scale: run a subset, report it; plan estimates time from measured runs", "[campaign]") {
  const std::string dir = temp_dir();
  // Copies of the CI manifests (a child would not inherit their [ablation] and [sweep]) with their
  // outputs in this test's folder: build/ci/ belongs to the fixture ci-train.
  const std::string root = UFP4_SOURCE_DIR;
  auto here = [&](const std::string& name, const std::string& manifest) {
    std::ifstream in(root + "/" + manifest);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto swap = [&](const std::string& from, const std::string& to) {
      const size_t at = text.find(from);
      REQUIRE(at != std::string::npos);
      text.replace(at, from.size(), to);
    };
    swap("extends = \"../ci/", "extends = \"" + root + "/experiments/ci/");
    swap("dir = \"build/ci/" + name + "\"", "dir = \"" + dir + "/" + name + "\"");
    // 30 of the CI runs' 100 steps: the campaign's plumbing (ablation levels, report, plan), not its losses.
    text += "\n[train]\nsteps = 30\n\n[eval]\nevery = 10\n";
    return test::write_manifest(dir, name, text);
  };
  const std::string t3 = here("table3", "experiments/table3/ci.toml"), f10 = here("figure10", "experiments/figure10/ci.toml");
  REQUIRE(run_cli("run " + t3 + " --only table3_ci").code == 0);
  REQUIRE(run_cli("run " + t3 + " --only table3_ci-max_fpx-e2m1_fpx4").code == 0);
  Result t = run_cli("report table3 --results " + dir + "/table3 --out " + dir + "/table3.md");
  INFO(t.out);
  REQUIRE(t.code == 0);
  CHECK(t.out.find("## max_fpx (searched: 4 / 6)") != std::string::npos);
  // One seed: the claim about the paper's choice can be neither held nor contradicted.
  CHECK(t.out.find("- max_fpx: \"the paper's choice (6) is the best level\" — **inconclusive**") != std::string::npos);
  CHECK(t.out.find("## Provenance") != std::string::npos);
  for (const char* r : {"figure10_ci-e2m1_ref", "figure10_ci-e2m1_rr"})
    REQUIRE(run_cli("run " + f10 + " --only " + r).code == 0);
  Result f = run_cli("report figure10 --results " + dir + "/figure10 --out " + dir + "/figure10.md");
  INFO(f.out);
  REQUIRE(f.code == 0);
  // One seed: a difference but no interval, so no verdict beyond inconclusive.
  CHECK(f.out.find("tiny: \"range-restricted E2M1 is worse than the E2M1 reference\" — **inconclusive**") != std::string::npos);
  CHECK(f.out.find("(one seed)") != std::string::npos);
  Result p = run_cli("plan " + t3);
  REQUIRE(p.code == 0);
  CHECK(p.out.find("est. time") != std::string::npos);
  CHECK(run_cli("report table3 --results " + dir + "/figure10").code == 2);  // no Table 3 runs there: a one-line error
}

TEST_CASE("Figure 8 at CI scale: the fixture's runs as a campaign's run set, paired into intervals, Holm-adjusted tests and verdicts", "[campaign]") {
  const std::string dir = temp_dir();
  // Seeds as a sweep axis: experiments/ci/seeds.toml adds seeds 2 and 3 to the seed-1 CI runs; the CI
  // campaign finds them by run id.
  Result plan = run_cli("plan experiments/ci/seeds.toml");
  REQUIRE(plan.code == 0);
  CHECK(plan.out.find("ci_seeds-ufp4-3") != std::string::npos);
  test::ci_fixture("runs");
  Result r = run_cli("report figure8 --campaign experiments/figure8/campaign_ci.toml --out " + dir + "/figure8.md");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string md = read_text_file(dir + "/figure8.md");
  CHECK(md.find("Run set: all 9 runs of `experiments/figure8/campaign_ci.toml`") != std::string::npos);
  CHECK(md.find("## Registration (2026-11-27, before any run") != std::string::npos);
  CHECK(md.find("| tiny | ufp4 | 3 | 100 | 10 | ") != std::string::npos);  // seeds, steps, K = the last tenth
  CHECK(md.find(" [") != std::string::npos);                               // intervals
  const std::string marker = "| tiny | final val (primary) | 3 | ";
  REQUIRE(md.find(marker) != std::string::npos);
  const std::string row = md.substr(md.find(marker), md.find('\n', md.find(marker)) - md.find(marker));
  CHECK((row.find("**holds**") != std::string::npos || row.find("**contradicted**") != std::string::npos ||
         row.find("**smaller than the paper**") != std::string::npos || row.find("**inconclusive**") != std::string::npos));
  CHECK(md.find("## The fast-descent transition") != std::string::npos);
  CHECK(md.find("regenerate: `build/ufp4 report figure8 --campaign experiments/figure8/campaign_ci.toml`") != std::string::npos);
}

// The time limit's prior (harness/campaign/run_times.h) from a campaign's resolved set: every run of the
// CI fixture, read back by model, its training time at its last step.
TEST_CASE("the time limit's prior from a campaign: the CI fixture's runs, by model", "[campaign]") {
  test::ci_fixture("runs");
  // A campaign's paths are the checkout's (the CLI runs from its root): read from there, then back.
  struct InCheckout {
    std::array<char, 4096> was{};
    InCheckout() {
      if (!::getcwd(was.data(), was.size()) || ::chdir(UFP4_SOURCE_DIR) != 0) throw std::runtime_error("cannot enter " + std::string(UFP4_SOURCE_DIR));
    }
    ~InCheckout() { (void)::chdir(was.data()); }
  } here;
  const RunSet set = Campaign::load("experiments/figure8/campaign_ci.toml").resolve();
  REQUIRE(set.missing() == 0);
  double longest = 0;
  for (const auto& r : set.runs) longest = std::max(longest, read_run_results(r.path).curves.time_s.back());
  CHECK(longest > 0);
  CHECK(recorded_training_seconds(set, "") == std::map<std::string, double>{{"tiny", longest}});
  CHECK(recorded_training_seconds(set, "no such GPU").empty());
}

TEST_CASE("report verdicts: a campaign's claims on the one page, as its own report gives them, and the count of each verdict", "[campaign]") {
  const std::string dir = temp_dir();
  test::ci_fixture("runs");
  Result own = run_cli("report figure8 --campaign experiments/figure8/campaign_ci.toml --out " + dir + "/figure8.md");
  REQUIRE(own.code == 0);
  Result r = run_cli("report verdicts --campaign experiments/figure8/campaign_ci.toml --out " + dir + "/verdicts.md");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string md = read_text_file(dir + "/verdicts.md");
  CHECK(md.find("# Verdicts: every registered claim, at a glance") != std::string::npos);
  CHECK(md.find("Run set complete: all 9 runs") != std::string::npos);
  // The claim's row carries the difference, Holm p and MDD that its campaign's report prints for the primary metric.
  const std::string own_md = read_text_file(dir + "/figure8.md");
  const std::string marker = "| tiny | final val (primary) | 3 | ";
  REQUIRE(own_md.find(marker) != std::string::npos);
  std::vector<std::string> cells;
  {
    const size_t at = own_md.find(marker);
    std::istringstream row(own_md.substr(at, own_md.find('\n', at) - at));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
  }
  REQUIRE(cells.size() >= 10);  // "", claim, metric, seeds, difference, p, Holm p, MDD, paper, verdict
  const std::string row_start = "| tiny | tiny | ";
  REQUIRE(md.find(row_start) != std::string::npos);
  const std::string row = md.substr(md.find(row_start), md.find('\n', md.find(row_start)) - md.find(row_start));
  for (const size_t i : {4u, 6u, 7u, 9u}) {
    INFO(cells[i]);
    CHECK(row.find(cells[i]) != std::string::npos);
  }
  CHECK(md.find("**1 claim in 1 campaign:**") != std::string::npos);
  // The figure of every claim's interval, beside the page (or the reason it was skipped).
  CHECK((file_exists(dir + "/figures/verdicts.svg") ? md.find("](figures/verdicts.svg)") : md.find("_(figure skipped: ")) != std::string::npos);
  CHECK(md.find("regenerate: `build/ufp4 report verdicts --campaign experiments/figure8/campaign_ci.toml`") != std::string::npos);
  CHECK(md.find("9 result files of figure8_ci") != std::string::npos);
  // It reads campaigns, not folders; one campaign's page goes where --out says, not over the page of every campaign.
  Result folders = run_cli("report verdicts --results " + dir);
  CHECK(folders.code == 2);
  CHECK(folders.out.find("reads campaigns") != std::string::npos);
  Result one = run_cli("report verdicts --campaign experiments/figure8/campaign_ci.toml");
  CHECK(one.code == 2);
  CHECK(one.out.find("give --out") != std::string::npos);
  // The same inputs: the same bytes.
  Result again = run_cli("report verdicts --campaign experiments/figure8/campaign_ci.toml --out " + dir + "/verdicts.md");
  CHECK(again.out.find("unchanged: " + dir + "/verdicts.md") != std::string::npos);
}
