// Integrity: every artifact trusted by its content, never by its name (results, checkpoints, data
// shards); reports and checks from a campaign's run set; nothing committed replaced by accident; runs
// watched while they train. Each case is a fault that 72c0d05 let through.
#include <signal.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "common/stack_dump.h"
#include "harness/campaign/run_times.h"
#include "harness/dist/mps.h"
#include "harness/dist/run_scheduler.h"
#include "harness/data/data.h"
#include "harness/io/array_io.h"
#include "harness/io/run_results.h"
#include "harness/plan/campaign.h"
#include "harness/plan/packing.h"
#include "harness/plan/run_files.h"
#include "harness/plan/run_manifest.h"
#include "harness/plan/run_plan.h"
#include "harness/train/trainer.h"
#include "tests/catch.h"
#include "tests/run_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

using test::sh;
using test::Shell;

const std::string kBin = UFP4_BINARY;

// The rest of a test case runs in the repository root (manifests and reports name their files from there); the test's
// own folder again when it ends.
class AtRepositoryRoot {
 public:
  AtRepositoryRoot() {
    REQUIRE(::getcwd(cwd_, sizeof cwd_) != nullptr);
    REQUIRE(::chdir(UFP4_SOURCE_DIR) == 0);
  }
  ~AtRepositoryRoot() { (void)!::chdir(cwd_); }
  AtRepositoryRoot(const AtRepositoryRoot&) = delete;
  AtRepositoryRoot& operator=(const AtRepositoryRoot&) = delete;

 private:
  char cwd_[4096];
};

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Flips one bit of the byte at `offset`.
void flip(const std::string& path, size_t offset) {
  std::string b = bytes_of(path);
  REQUIRE(offset < b.size());
  b[offset] = static_cast<char>(b[offset] ^ 0x10);
  write_bytes(path, b);
}

// A copy of the CI data folder this test may damage.
std::string data_copy(const std::string& dir) {
  REQUIRE(sh("cp -r '" + test::ci_data() + "' '" + dir + "/data'").code == 0);
  return dir + "/data";
}

std::string with_data(const std::string& manifest, const std::string& data) {
  std::string text = bytes_of(manifest);
  const size_t at = text.find("path = \"" + test::ci_data() + "\"");
  REQUIRE(at != std::string::npos);
  text.replace(at, 8 + test::ci_data().size() + 1, "path = \"" + data + "\"");
  write_bytes(manifest, text);
  return manifest;
}

double mtime(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec);
}

// The first line of `out` that holds `needle` ("" when none).
std::string line_with(const std::string& out, const std::string& needle) {
  const size_t at = out.find(needle);
  if (at == std::string::npos) return "";
  const size_t start = out.rfind('\n', at), end = out.find('\n', at);
  return out.substr(start == std::string::npos ? 0 : start + 1, end == std::string::npos ? std::string::npos : end - (start == std::string::npos ? 0 : start + 1));
}

// An environment variable set (or unset) for a scope, and put back as it was however the scope ends.
struct EnvFor {
  std::string name, before;
  bool had;
  EnvFor(const std::string& n, const char* value) : name(n), had(std::getenv(n.c_str()) != nullptr) {
    if (had) before = std::getenv(n.c_str());
    if (value) ::setenv(n.c_str(), value, 1);
    else ::unsetenv(n.c_str());
  }
  ~EnvFor() {
    if (had) ::setenv(name.c_str(), before.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("a results file counts by its content: a damaged one, or another run's under this run's name, is not done", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string m = test::tiny_manifest(d, "bf16", 12), m2 = test::tiny_manifest(d, "ufp4", 12);
  REQUIRE(test::run_cli("run " + m + " " + m2).code == 0);
  const RunManifest a = RunManifest::load(m), b = RunManifest::load(m2);
  const std::string fa = test::results_of(a), fb = test::results_of(b);
  CHECK(read_run_results(fa).content_verified);

  SECTION("one flipped bit in a curve: every reader refuses the file, and ufp4 run trains the run again") {
    const RunResults r = read_run_results(fa);
    double v = r.curves.loss[3];
    std::string file = bytes_of(fa), pattern(reinterpret_cast<const char*>(&v), 8);
    const size_t at = file.find(pattern);
    REQUIRE(at != std::string::npos);
    flip(fa, at + 1);
    try {
      read_run_results(fa);
      FAIL("a damaged file was read");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(fa + ": content does not match the content_sha256") == 0);
    }
    CHECK(test::run_cli("check " + fa + " --reference " + d + "/runs").code == 2);
    auto plan = test::run_cli("plan " + m);
    CHECK(plan.out.find("missing") != std::string::npos);
    CHECK(plan.out.find("content does not match") != std::string::npos);
    auto run = test::run_cli("run " + m);
    CHECK(run.code == 0);
    CHECK(run.out.find("results exist") == std::string::npos);
    CHECK(run.out.find("moved the rejected " + fa) != std::string::npos);
    CHECK(file_exists(fa + ".rejected"));
    CHECK(read_run_results(fa).curves.loss == r.curves.loss);  // trained again, the same bits
  }
  SECTION("another run's file under this run's name: refused by name, and the run trains") {
    REQUIRE(sh("cp " + fb + " " + fa).code == 0);
    try {
      read_run_results(fa);
      FAIL("another run's content was read under this name");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("named for run id " + test::run_id_of(a) + " but holds run") != std::string::npos);
    }
    auto run = test::run_cli("run " + m);
    CHECK(run.code == 0);
    CHECK(run.out.find("skipped") == std::string::npos);
    CHECK(read_run_results(fa).recipe == "bf16");
  }
}

TEST_CASE("a checkpoint carries its run id, step and checksum: another run's or a damaged one is refused, naming the file", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string m = test::tiny_manifest(d, "bf16", 20, "checkpoint_every = 5\n"), m2 = test::tiny_manifest(d, "ufp4", 20, "checkpoint_every = 5\n");
  const RunManifest a = RunManifest::load(m), b = RunManifest::load(m2);
  REQUIRE(test::run_cli("run " + m + " --stop-after 10").code == 130);
  REQUIRE(file_exists(test::checkpoint_of(a)));

  SECTION("a bf16 run's checkpoint under the ufp4 run's name") {
    REQUIRE(sh("cp " + test::checkpoint_of(a) + " " + test::checkpoint_of(b)).code == 0);
    auto r = test::run_cli("run " + m2);
    CHECK(r.code == 2);
    CHECK(r.out.find(test::checkpoint_of(b) + ": checkpoint of run " + test::run_id_of(a) + ", not of this run (" + test::run_id_of(b) + ")") != std::string::npos);
    CHECK(!file_exists(test::results_of(b)));
  }
  SECTION("one flipped byte in the archive") {
    flip(test::checkpoint_of(a), bytes_of(test::checkpoint_of(a)).size() / 2);
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(r.out.find(test::checkpoint_of(a) + ": damaged checkpoint") != std::string::npos);
    CHECK(!file_exists(test::results_of(a)));
  }
  SECTION("a file that is no stamped checkpoint") {
    write_bytes(test::checkpoint_of(a), "not a checkpoint");
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(r.out.find(test::checkpoint_of(a) + ": not a stamped ufp4 archive") != std::string::npos);
  }
  SECTION("the intact checkpoint resumes to the uninterrupted curve") {
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 0);
    CHECK(r.out.find("at step 10") != std::string::npos);
  }
}

TEST_CASE("data shards are checked against data.toml: in full by data verify, quickly at every run start", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string data = data_copy(d);
  const std::string m = with_data(test::tiny_manifest(d, "bf16", 6), data);
  auto ok = test::run_cli("data verify " + data);
  CHECK(ok.code == 0);
  CHECK(ok.out.find("every shard matches data.toml") != std::string::npos);
  CHECK(file_exists(data + "/data.verified"));

  SECTION("a flipped bit in a training shard") {
    flip(data + "/train_000.bin", 4000);
    auto v = test::run_cli("data verify " + data);
    CHECK(v.code == 2);
    CHECK(v.out.find(data + "/train_000.bin: SHA-256") != std::string::npos);
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(line_with(r.out, "error").find(data + "/train_000.bin: sampled content differs") != std::string::npos);
    CHECK(!file_exists(test::results_of(RunManifest::load(m))));
  }
  SECTION("a data.toml whose hashes no longer match its shards") {
    std::string toml = bytes_of(data + "/data.toml");
    const size_t at = toml.find("train_sha256 = [\"");
    REQUIRE(at != std::string::npos);
    toml[at + 17] = toml[at + 17] == '0' ? '1' : '0';
    write_bytes(data + "/data.toml", toml);
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(r.out.find(data + "/train_000.bin: SHA-256") != std::string::npos);
    CHECK(r.out.find("does not match data.toml's") != std::string::npos);
  }
}

TEST_CASE("a damaged data folder is named with what is allowed, exit 2 (no stoi, no LibTorch index error, no blame on train.steps)", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string data = data_copy(d);
  const std::string m = with_data(test::tiny_manifest(d, "bf16", 6), data);
  const std::string toml = bytes_of(data + "/data.toml");
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string t = toml;
    const size_t at = t.find(from);
    REQUIRE(at != std::string::npos);
    t.replace(at, from.size(), to);
    write_bytes(data + "/data.toml", t);
  };
  SECTION("vocab is not an integer") {
    replace("vocab = ", "vocab = \"abc\" # ");
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(line_with(r.out, "error").find(data + "/data.toml:") != std::string::npos);
    CHECK(line_with(r.out, "error").find("vocab: expected an integer (allowed: 1 to 65536") != std::string::npos);
  }
  SECTION("vocab is not a TOML value at all (vocab = abc)") {
    replace("vocab = ", "vocab = abc # ");
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(line_with(r.out, "error").find(data + "/data.toml:") != std::string::npos);
    CHECK(r.out.find("stoi") == std::string::npos);
  }
  SECTION("a negative token count in a shard's header") {
    std::string shard = bytes_of(data + "/val_000.bin");
    const int32_t bad = -5;
    std::memcpy(&shard[8], &bad, 4);
    write_bytes(data + "/val_000.bin", shard);
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(r.out.find(data + "/val_000.bin: header says -5 tokens (allowed: 0 to 2147483647)") != std::string::npos);
    CHECK(r.out.find("train.steps") == std::string::npos);
  }
  SECTION("a token outside the model's vocabulary (the hashes made to match, so only the token is wrong)") {
    std::string shard = bytes_of(data + "/train_000.bin");
    const uint16_t oov = 65000;
    std::memcpy(&shard[1024 + 2 * 77], &oov, 2);
    write_bytes(data + "/train_000.bin", shard);
    const std::string old_sha = sha256_file(test::ci_data() + "/train_000.bin"), new_sha = sha256_file(data + "/train_000.bin");
    replace(old_sha, new_sha);
    std::remove((data + "/data.verified").c_str());
    auto r = test::run_cli("run " + m);
    CHECK(r.code == 2);
    CHECK(r.out.find(data + "/train_000.bin: token id 65000 at token 77 is outside model tiny's vocabulary") != std::string::npos);
    CHECK(r.out.find("index out of range") == std::string::npos);
  }
}

TEST_CASE("ufp4 check fails when a reference run has no result, or a result holds another run under its name", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string m = test::tiny_manifest(d, "bf16", 8), m2 = test::tiny_manifest(d, "ufp4", 8);
  REQUIRE(test::run_cli("run " + m + " " + m2).code == 0);
  REQUIRE(sh("mkdir -p " + d + "/refs " + d + "/only && cp " + d + "/runs/*.h5 " + d + "/refs/ && cp " + test::results_of(RunManifest::load(m)) + " " + d + "/only/").code == 0);
  auto all = test::run_cli("check " + d + "/runs --reference " + d + "/refs");
  CHECK(all.code == 0);
  auto one = test::run_cli("check " + d + "/only --reference " + d + "/refs");
  CHECK(one.code == 1);
  CHECK(one.out.find("FAIL tiny_ufp4: the reference's run has no result among the files checked") != std::string::npos);
  REQUIRE(sh("cp " + test::results_of(RunManifest::load(m2)) + " " + d + "/only/" + test::results_of(RunManifest::load(m)).substr(d.size() + 6)).code == 0);
  auto swapped = test::run_cli("check " + d + "/only --reference " + d + "/refs");
  CHECK(swapped.code == 2);
  CHECK(swapped.out.find("but holds run tiny_ufp4") != std::string::npos);
}

// A campaign of the tiny model on the CPU: bf16 / e2m1_ref / ufp4 at 20 steps, a pilot of 2 seeds that is also
// the whole campaign, one claim. Returns the campaign file; `manifest` receives the manifest's path.
static std::string tiny_campaign(const std::string& d, std::string* manifest_out = nullptr, const std::string& claim_id = "tiny") {
  const std::string manifest = test::write_manifest(
      d, "runs_tiny",
      "[model]\nname = \"tiny\"\n[recipe]\nname = \"bf16\"\n[data]\npath = \"" + test::ci_data() +
      "\"\n[train]\nsteps = 20\nbatch = 4\nmicro_batch = 2\nwarmup = 5\ncheckpoint_every = 0\ndevice = \"cpu\"\n"
      "[eval]\nevery = 10\nbatches = 2\nfinal = \"split\"\n[outputs]\ndir = \"" + d + "/runs\"\nname = \"f8\"\n"
      "[sweep]\n\"recipe.name\" = [\"bf16\", \"e2m1_ref\", \"ufp4\"]\n");
  if (manifest_out) *manifest_out = manifest;
  return test::write_manifest(
      d, "campaign",
      "name = \"tiny_f8\"\nreport = \"figure8\"\nresults = \"" + d + "/runs\"\nmanifests = [\"runs_tiny.toml\"]\n"
      "[seeds]\npilot = 2\nmin = 2\nmax = 2\n[registration]\ndate = \"2026-11-27\"\nmetric = \"final val\"\n"
      "secondary = \"train\"\ntest = \"paired t\"\nalpha = 0.05\npower = 0.8\nfamily = \"tiny\"\n"
      "[[registration.claims]]\nid = \"" + claim_id + "\"\nmodel = \"tiny\"\ntext = \"ufp4 below e2m1_ref\"\na = \"ufp4\"\n"
      "b = \"e2m1_ref\"\ndirection = -1\npaper_effect = -0.29\n");
}

TEST_CASE("reports and checks work from the campaign's run set: missing runs listed, stale files named and ignored", "[integrity]") {
  const std::string d = test::temp_dir();
  std::string manifest;
  const std::string campaign = tiny_campaign(d, &manifest);
  auto run = test::run_cli("campaign run " + campaign);
  INFO(run.out);
  REQUIRE(run.code == 0);
  CHECK(file_exists(d + "/runs/seeds.toml"));  // decided once the pilot was in
  CHECK(test::run_cli("campaign check " + campaign).code == 0);
  auto first = test::run_cli("report figure8 --campaign " + campaign + " --out " + d + "/f8.md");
  REQUIRE(first.code == 0);
  const std::string md = bytes_of(d + "/f8.md");
  CHECK(md.find("Run set: all 6 runs") != std::string::npos);
  CHECK(md.find("## Registration (2026-11-27") != std::string::npos);
  const std::string verdicts = md.substr(md.find("## Verdicts"), md.find("## The fast-descent") - md.find("## Verdicts"));
  // How far the seeds lie apart, in the report and in the plan, for the baseline's seeds.
  CHECK(md.find("## How far the seeds lie apart") != std::string::npos);
  CHECK(md.find("| tiny | bf16 | 2 | ") != std::string::npos);
  auto planned = test::run_cli("campaign plan " + campaign);
  CHECK(planned.out.find("tiny: the bf16 seeds' validation sd ends at ") != std::string::npos);
  CHECK(planned.out.find("the registered power rule on the complete seeds so far") == std::string::npos);  // decided: no preview
  // Without the seeds file the plan previews the rule on the complete seeds: on the whole pilot it gives
  // what the decision gave.
  {
    const Campaign decided = Campaign::load(campaign);
    REQUIRE(std::rename((d + "/runs/seeds.toml").c_str(), (d + "/seeds.toml.kept").c_str()) == 0);
    auto preview = test::run_cli("campaign plan " + campaign);
    REQUIRE(std::rename((d + "/seeds.toml.kept").c_str(), (d + "/runs/seeds.toml").c_str()) == 0);
    INFO(preview.out);
    CHECK(preview.out.find("the registered power rule on the complete seeds so far (a preview; the seeds are decided once all 2 pilot seeds are in):") !=
          std::string::npos);
    char sd[160];
    std::snprintf(sd, sizeof sd, "  claim tiny: paired sd %.3f pp over 2 seeds: %lld seeds for the power against 0.290 pp", decided.seeds.pilot_sd.at("tiny"),
                  static_cast<long long>(decided.seeds.seeds_for_power.at("tiny")));
    CHECK(preview.out.find(sd) != std::string::npos);
    CHECK(preview.out.find("  tiny: 2 seeds within [2, 2]: 0 runs past the pilot, 0 tokens") != std::string::npos);
  }

  // A stale result beside them: the same runs before a manifest edit (15 steps), other run ids.
  std::string edited = bytes_of(manifest);
  edited.replace(edited.find("steps = 20"), 10, "steps = 15");
  test::write_manifest(d, "stale", edited);
  REQUIRE(test::run_cli("run " + d + "/stale.toml --only f8-ufp4").code == 0);
  auto second = test::run_cli("report figure8 --campaign " + campaign + " --out " + d + "/f8.md");
  REQUIRE(second.code == 0);
  const std::string md2 = bytes_of(d + "/f8.md");
  CHECK(md2.find("Ignored (in the results folder, not in the run set):") != std::string::npos);
  CHECK(md2.find("not a run of this campaign (f8-ufp4") != std::string::npos);
  CHECK(md2.substr(md2.find("## Verdicts"), md2.find("## The fast-descent") - md2.find("## Verdicts")) == verdicts);  // the numbers did not move
  auto check = test::run_cli("campaign check " + campaign);
  CHECK(check.code == 1);
  CHECK(check.out.find("FAIL not in the run set") != std::string::npos);

  // Into a checkout's reports/: a report refused (its Markdown edited, no --force) leaves its figures too.
  const std::string root = UFP4_SOURCE_DIR;
  REQUIRE(sh("mkdir -p " + d + "/co/reports " + d + "/co/experiments " + d + "/co/models && cp -r " + root + "/models/recipes " + d +
             "/co/models/ && cp -r " + root + "/reports/paper " + d + "/co/reports/ && touch " + d + "/co/CMakeLists.txt")
              .code == 0);
  const auto render_in_co = [&](const std::string& options) { return test::run_cli_in(d + "/co", "report figure8 --campaign " + campaign + options); };
  const auto rendered = render_in_co("");
  INFO(rendered.out);
  REQUIRE(rendered.code == 0);
  const std::string svg = d + "/co/reports/figures/figure8-tiny.svg";
  if (file_exists(svg)) {  // gnuplot drew it
    write_bytes(d + "/co/reports/figure8.md", "an edited report\n");
    write_bytes(svg, "an older figure\n");
    CHECK(render_in_co("").code == 2);
    CHECK(bytes_of(svg) == "an older figure\n");
    CHECK(render_in_co(" --force").code == 0);
    CHECK(bytes_of(svg).find("<svg") != std::string::npos);
  }

  // A run's results removed: the report says the set is incomplete, and check fails naming it.
  const Campaign c = Campaign::load(campaign);
  const RunSet set = c.resolve();
  std::remove(set.runs.front().path.c_str());
  auto third = test::run_cli("report figure8 --campaign " + campaign + " --out " + d + "/f8.md");
  REQUIRE(third.code == 0);
  CHECK(bytes_of(d + "/f8.md").find("**Incomplete run set: 1 of 6 runs") != std::string::npos);
  auto missing = test::run_cli("campaign check " + campaign);
  CHECK(missing.code == 1);
  CHECK(missing.out.find("FAIL " + set.runs.front().name + ": missing") != std::string::npos);
}


TEST_CASE("the seeds file reads back as written, a dotted claim id included, and one that does not fit its campaign is refused", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string campaign = tiny_campaign(d, nullptr, "below_tiny-0.5m");  // a dot, as Figure 9's claim ids have
  REQUIRE(test::run_cli("campaign run " + campaign).code == 0);
  const std::string seeds = d + "/runs/seeds.toml", written = bytes_of(seeds);
  const Campaign c = Campaign::load(campaign);
  REQUIRE(c.seeds.pilot_sd.count("below_tiny-0.5m"));
  CHECK(c.seeds.pilot_sd.at("below_tiny-0.5m") > 0);
  CHECK(c.seeds.seeds_for_power.at("below_tiny-0.5m") >= 2);
  CHECK(c.seeds.seeds.at("tiny") == 2);
  // Hand edits and a file read with the wrong key spelling: each refused with the file, line and key.
  const auto line_of = [&](const std::string& text) {
    REQUIRE(written.find(text) != std::string::npos);
    return std::to_string(1 + std::count(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(written.find(text)), '\n'));
  };
  const auto refused = [&](const std::string& edited, const std::string& where, const std::string& message) {
    write_bytes(seeds, edited);
    auto r = test::run_cli("campaign check " + campaign);
    INFO(r.out);
    CHECK(r.code == 2);
    CHECK(r.out.find(seeds + ":" + where + ": " + message) != std::string::npos);
  };
  // `from` to the end of its line replaced by `to`.
  const auto replaced = [&](const std::string& from, const std::string& to) {
    std::string edited = written;
    const size_t at = edited.find(from);
    REQUIRE(at != std::string::npos);
    return edited.replace(at, edited.find('\n', at) - at, to);
  };
  const std::string claim = "[claims.\"below_tiny-0.5m\"]", before_claims = written.substr(0, written.find(claim));
  refused(replaced(claim, "[claims.below_tiny-0.5m]"), line_of(claim), "claims.below_tiny-0: unknown key (allowed: below_tiny-0.5m)");
  refused(replaced("\"tiny\" = 2", "\"tiny\" = 5"), line_of("\"tiny\" = 2"), "models.tiny: 5 is out of range (allowed: 2 to 2)");
  refused(replaced("\"tiny\" = 2", "\"small\" = 2"), line_of("\"tiny\" = 2"), "models.small: unknown key (allowed: tiny)");
  refused(replaced("\"tiny\" = 2", ""), line_of("[models]"), "models.tiny: missing (claim below_tiny-0.5m is tested on it)");
  refused(replaced("pilot = 2", "pilot = 3"), line_of("pilot = 2"), "pilot: the campaign registers a pilot of 2 seeds");
  refused(replaced("seeds_for_power = ", "seeds_for_power = 2.5"), line_of("seeds_for_power = "), "claims.below_tiny-0.5m.seeds_for_power: expected an integer");
  refused(before_claims + "[claims]\n", line_of(claim), "claims.below_tiny-0.5m: missing (a table: pilot_sd, seeds_for_power)");
  refused(before_claims + "[claims]\n\"below_tiny-0.5m\" = 3\n", std::to_string(std::stoi(line_of(claim)) + 1),
          "claims.below_tiny-0.5m: expected a table (pilot_sd, seeds_for_power)");
  write_bytes(seeds, written);
  CHECK(test::run_cli("campaign check " + campaign).code == 0);
}

TEST_CASE("campaign run --models / --recipes: only those runs train, and the seeds wait for the whole pilot", "[integrity]") {
  const std::string d = test::temp_dir();
  const std::string campaign = tiny_campaign(d);
  auto wrong = test::run_cli("campaign run " + campaign + " --recipes ufp4,e2m1");
  CHECK(wrong.code == 2);
  CHECK(wrong.out.find("--recipes: 'e2m1' is not one of " + campaign + "'s (allowed: bf16, e2m1_ref, ufp4)") != std::string::npos);
  CHECK(test::run_cli("campaign plan " + campaign + " --models tiny").code == 2);  // a filter goes with run only
  auto some = test::run_cli("campaign run " + campaign + " --recipes ufp4 --models tiny");
  INFO(some.out);
  REQUIRE(some.code == 0);
  const RunSet after = Campaign::load(campaign).resolve();
  for (const auto& r : after.runs) CHECK(r.path.empty() == (r.recipe != "ufp4"));
  CHECK(!file_exists(d + "/runs/seeds.toml"));
  CHECK(some.out.find("4 pilot run(s) outside --models/--recipes still missing") != std::string::npos);
  // The verdicts page of the part-run campaign: incomplete, its claim (ufp4 against e2m1_ref) without a complete seed.
  REQUIRE(test::run_cli("report verdicts --campaign " + campaign + " --out " + d + "/verdicts.md").code == 0);
  const std::string page = bytes_of(d + "/verdicts.md");
  CHECK(page.find("**Run set incomplete: 4 of 6 runs missing**") != std::string::npos);
  CHECK(page.find("**inconclusive** (waiting for runs: fewer than two complete seeds, no test yet)") != std::string::npos);
  CHECK(page.find("0 holds, 0 contradicted, 0 smaller than the paper, 1 inconclusive (1 of them before their registered seeds are in)") != std::string::npos);
  CHECK(test::run_cli("campaign run " + campaign + " --models ,").code == 2);  // named nothing: refused, not "every run"
  auto rest = test::run_cli("campaign run " + campaign);
  REQUIRE(rest.code == 0);
  CHECK(rest.out.find("2 runs have results already") != std::string::npos);
  CHECK(file_exists(d + "/runs/seeds.toml"));
  CHECK(test::run_cli("campaign check " + campaign).code == 0);
}
TEST_CASE("a campaign reads another campaign's runs by run id and trains only its own; a claim the paper did not size registers an effect of interest", "[integrity]") {
  const std::string d = test::temp_dir();
  auto manifest = [&](const std::string& name, const std::string& dir, const std::string& recipes) {
    return test::write_manifest(d, name, "[model]\nname = \"tiny\"\n[recipe]\nname = \"bf16\"\n[data]\npath = \"" + test::ci_data() +
                                             "\"\n[train]\nsteps = 20\nbatch = 4\nmicro_batch = 2\nwarmup = 5\ncheckpoint_every = 0\ndevice = \"cpu\"\n"
                                             "[eval]\nevery = 10\nbatches = 2\nfinal = \"split\"\n[outputs]\ndir = \"" + dir + "\"\nname = \"" + name +
                                             "\"\n[sweep]\n\"recipe.name\" = [" + recipes + "]\n");
  };
  const std::string head = "[seeds]\npilot = 2\nmin = 2\nmax = 2\n[registration]\ndate = \"2026-11-27\"\nmetric = \"final val\"\nsecondary = \"train\"\n"
                           "test = \"paired t\"\nalpha = 0.05\npower = 0.8\nfamily = \"tiny\"\n[[registration.claims]]\nid = \"tiny\"\nmodel = \"tiny\"\n";
  manifest("a_runs", d + "/a", "\"bf16\", \"e2m1_ref\"");
  const std::string a = test::write_manifest(d, "a", "name = \"a\"\nreport = \"figure8\"\nresults = \"" + d + "/a\"\nmanifests = [\"a_runs.toml\"]\n" + head +
                                                        "text = \"e2m1_ref above bf16\"\na = \"e2m1_ref\"\nb = \"bf16\"\nbaseline = \"bf16\"\ndirection = 1\n"
                                                        "paper_effect = 1.2\n");
  REQUIRE(test::run_cli("campaign run " + a).code == 0);
  manifest("b_runs", d + "/b", "\"bf16\", \"e2m1_ref\", \"ufp4\"");
  const std::string claim_b = "text = \"ufp4 above e2m1_ref\"\na = \"ufp4\"\nb = \"e2m1_ref\"\ndirection = 1\n";
  const std::string top = "name = \"b\"\nreport = \"figure10\"\ntitle = \"Tiny reads\"\nresults = \"" + d + "/b\"\nreads = [\"" + d +
                          "/a\"]\nmanifests = [\"b_runs.toml\"]\n" + head + claim_b;
  // A second claim, not powered: reported, but the pilot's seed decision passes it by.
  const std::string b = test::write_manifest(d, "b", top + "effect_of_interest = 0.29\neffect_source = \"the headline effect's size\"\n"
                                                           "[[registration.claims]]\nid = \"side\"\nmodel = \"tiny\"\ntext = \"ufp4 above bf16\"\n"
                                                           "a = \"ufp4\"\nb = \"bf16\"\ndirection = 1\neffect_of_interest = 0.29\neffect_source = \"x\"\npowered = false\n");
  auto run = test::run_cli("campaign run " + b);
  INFO(run.out);
  REQUIRE(run.code == 0);
  CHECK(run.out.find("campaign b: 4 of 6 runs are read from another campaign's folder") != std::string::npos);
  std::vector<std::string> own;
  walk_files(d + "/b", ".h5", own);
  CHECK(own.size() == 2);  // ufp4 at seeds 1 and 2; bf16 and e2m1_ref stay in a/
  for (const auto& f : own) CHECK(f.find("b_runs-ufp4-") != std::string::npos);
  CHECK(test::run_cli("campaign check " + b).code == 0);
  auto again = test::run_cli("campaign run " + b);  // nothing to train: no child is started for a finished run
  CHECK(again.code == 0);
  CHECK(again.out.find("campaign b: 2 runs have results already") != std::string::npos);
  // A child of the scheduler trains only the run its parent planned (--run-id), not what the campaign plans now.
  auto stale = test::run_cli("campaign run " + b + " --only b_runs-ufp4-1 --run-id 0123456789abcdef --force");
  CHECK(stale.code == 2);
  CHECK(stale.out.find("not the run 0123456789abcdef it was started for") != std::string::npos);
  auto report = test::run_cli("report figure10 --campaign " + b + " --out " + d + "/b.md");
  INFO(report.out);
  REQUIRE(report.code == 0);
  const std::string md = bytes_of(d + "/b.md");
  CHECK(md.rfind("# Tiny reads\n", 0) == 0);
  CHECK(md.find("Run set: all 6 runs") != std::string::npos);
  CHECK(md.find("not published; effect of interest +0.2900 | the headline effect's size |") != std::string::npos);
  CHECK(md.find("| not published | **") != std::string::npos);
  CHECK(md.find("the paper gives no size for this claim") != std::string::npos);
  CHECK(md.find("gap(ufp4) - gap(bf16) > 0 (not powered)") != std::string::npos);
  CHECK(md.find("## Registration (2026-11-27, before any run of its own;") != std::string::npos);
  CHECK(bytes_of(d + "/b/seeds.toml").find("[claims.side]") == std::string::npos);
  // A claim naming a recipe the manifests do not sweep is refused before anything trains.
  auto typo = test::run_cli("campaign plan " + test::write_manifest(d, "typo", top.substr(0, top.find("text = ")) + "text = \"t\"\na = \"ufp5\"\nb = \"e2m1_ref\"\n"
                                                                       "direction = 1\neffect_of_interest = 0.29\neffect_source = \"x\"\n"));
  CHECK(typo.code == 2);
  CHECK(typo.out.find("registration.claims.a: 'ufp5' is not a recipe the manifests sweep for tiny (they sweep: bf16, e2m1_ref, ufp4)") != std::string::npos);
  CHECK(md.find("regenerate: `build/ufp4 report figure10 --campaign " + b + "`") != std::string::npos);
  CHECK(test::run_cli("report figure8 --campaign " + b + " --out " + d + "/b.md").out.find("report: 'figure10', not 'figure8'") != std::string::npos);

  // Exactly one of the paper's effect and an effect of interest, with the claim's sign; never its own folder as one it reads.
  const std::string both = test::write_manifest(d, "both", top + "paper_effect = 0.3\neffect_of_interest = 0.29\neffect_source = \"x\"\n");
  auto refused = test::run_cli("campaign plan " + both);
  CHECK(refused.code == 2);
  CHECK(refused.out.find("both.toml:") != std::string::npos);
  CHECK(refused.out.find("give exactly one of paper_effect") != std::string::npos);
  const std::string sign = test::write_manifest(d, "sign", top + "effect_of_interest = -0.29\neffect_source = \"x\"\n");
  auto wrong = test::run_cli("campaign plan " + sign);
  CHECK(wrong.code == 2);
  CHECK(wrong.out.find("effect_of_interest: expected a non-zero effect with the claim's sign (direction 1)") != std::string::npos);
  const std::string mixed = test::write_manifest(d, "mixed", top + "plus = [\"ufp4\"]\nminus = [\"bf16\"]\neffect_of_interest = 0.29\neffect_source = \"x\"\n");
  auto forms = test::run_cli("campaign plan " + mixed);
  CHECK(forms.code == 2);
  CHECK(forms.out.find("give a and b (gap(a) - gap(b)), or plus and minus") != std::string::npos);
  std::string twice = head + "text = \"t\"\nplus = [\"ufp4\", \"e2m1_ref\"]\nminus = [\"ufp4\"]\ndirection = 1\neffect_of_interest = 0.29\neffect_source = \"x\"\n";
  auto dup = test::run_cli("campaign plan " + test::write_manifest(d, "twice", top.substr(0, top.find("[seeds]")) + twice));
  CHECK(dup.code == 2);
  CHECK(dup.out.find("'ufp4' appears twice in the contrast") != std::string::npos);
  // Campaign b's file reading `folder` instead of a/, planned.
  auto plan_reading = [&](const std::string& name, const std::string& folder) {
    std::string text = top;
    const std::string reads_a = "reads = [\"" + d + "/a\"]";
    text.replace(text.find(reads_a), reads_a.size(), "reads = [\"" + folder + "\"]");
    return test::run_cli("campaign plan " + test::write_manifest(d, name, text + "effect_of_interest = 0.29\neffect_source = \"x\"\n"));
  };
  auto loop = plan_reading("self", d + "/b");
  CHECK(loop.code == 2);
  CHECK(loop.out.find("is this campaign's own results folder") != std::string::npos);
  // A registered transition gate the pilot misses: campaign run stops before deciding the seeds.
  std::string gated = bytes_of(a);
  gated.replace(gated.find("max = 2\n"), 8, "max = 2\ntransition_gate = 100000\n");
  gated.replace(gated.find("results = \"" + d + "/a\""), ("results = \"" + d + "/a\"").size(), "results = \"" + d + "/gated\"");
  manifest("gated_runs", d + "/gated", "\"bf16\", \"e2m1_ref\"");
  gated.replace(gated.find("a_runs.toml"), 11, "gated_runs.toml");
  auto gate = test::run_cli("campaign run " + test::write_manifest(d, "gated", gated));
  CHECK(gate.code == 1);
  CHECK(gate.out.find("fewer than the registered 100000") != std::string::npos);
  CHECK(!file_exists(d + "/gated/seeds.toml"));
  // A trend claim names at least three models in models (not model) and is never powered.
  const std::string trend_head = top.substr(0, top.find("[[registration.claims]]"));
  auto trend_err = [&](const std::string& name, const std::string& claim) {
    return test::run_cli("campaign plan " + test::write_manifest(d, name, trend_head + "[[registration.claims]]\nid = \"t\"\ntext = \"t\"\n" + claim +
                                                                          "plus = [\"ufp4\"]\nminus = []\ndirection = -1\neffect_of_interest = -0.4\neffect_source = \"x\"\n"));
  };
  auto few = trend_err("few", "models = [\"tiny\", \"tiny\"]\n");
  CHECK(few.code == 2);
  CHECK(few.out.find("registration.claims.models: expected a list of at least three models") != std::string::npos);
  auto listed_twice = trend_err("twice", "models = [\"tiny\", \"tiny\", \"tiny\"]\n");
  CHECK(listed_twice.code == 2);
  CHECK(listed_twice.out.find("'tiny' is listed twice") != std::string::npos);
  auto powered = trend_err("powered", "models = [\"tiny\", \"small\", \"large\"]\npowered = true\n");
  CHECK(powered.code == 2);
  CHECK(powered.out.find("a trend claim is not powered") != std::string::npos);
  auto typo_dir = plan_reading("misspelt", d + "/aa");
  CHECK(typo_dir.code == 2);
  CHECK(typo_dir.out.find("reads: '" + d + "/aa' is neither a folder nor the results folder of a campaign") != std::string::npos);
}

TEST_CASE("what writes into committed folders replaces a file only when told; an unchanged report keeps its bytes and time", "[integrity]") {
  const std::string d = test::temp_dir();
  // A checkout of its own (what reports read), to run a copied binary in.
  const std::string root = UFP4_SOURCE_DIR;
  REQUIRE(sh("mkdir -p " + d + "/co/reports " + d + "/co/models && cp -r " + root + "/models/recipes " + d + "/co/models/ && cp -r " + root +
             "/reports/paper " + d + "/co/reports/ && mkdir -p " + d + "/co/experiments && touch " + d + "/co/CMakeLists.txt && cp " + kBin + " " + d +
             "/ufp4-copy && cp " + executable_dir() + "/ufp4-data " + d + "/ufp4-data")
              .code == 0);
  const double source_report = mtime(root + "/reports/table1.md");
  Shell r1 = sh("cd " + d + "/co && " + d + "/ufp4-copy report table1");
  REQUIRE(r1.code == 0);
  CHECK(file_exists(d + "/co/reports/table1.md"));                 // into the checkout it runs in,
  CHECK(mtime(root + "/reports/table1.md") == source_report);       // not the tree it was built from
  CHECK(bytes_of(d + "/co/reports/table1.md") == bytes_of(root + "/reports/table1.md"));  // the committed report is this rendering
  const double first = mtime(d + "/co/reports/table1.md");
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  Shell r2 = sh("cd " + d + "/co && " + d + "/ufp4-copy report table1");
  CHECK(r2.code == 0);
  CHECK(r2.out.find("unchanged: ") != std::string::npos);
  CHECK(mtime(d + "/co/reports/table1.md") == first);
  write_bytes(d + "/co/reports/table1.md", "an edited report\n");
  Shell r3 = sh("cd " + d + "/co && " + d + "/ufp4-copy report table1");
  CHECK(r3.code == 2);
  CHECK(r3.out.find("reports/table1.md exists and would be replaced (allowed: --force") != std::string::npos);
  CHECK(sh("cd " + d + "/co && " + d + "/ufp4-copy report table1 --force").code == 0);
  // Outside any checkout, a recipe by name cannot come from the tree the binary was built in.
  Shell outside = sh("cd " + d + " && " + d + "/ufp4-copy recipes ufp4");
  CHECK(outside.code == 2);
  CHECK(outside.out.find("recipes by name are found in the ufp4 checkout the command runs in, and there is none here or above") != std::string::npos);
  // ufp4 fit: its default output exists, so it is replaced only with --out or --force.
  REQUIRE(sh("mkdir -p " + d + "/co/results/fits " + d + "/co/empty && touch " + d + "/co/results/fits/figure9-proxy.h5").code == 0);
  Shell fit = sh("cd " + d + "/co && " + d + "/ufp4-copy fit --results empty");
  CHECK(fit.code == 2);
  CHECK(fit.out.find("results/fits/figure9-proxy.h5 exists and would be replaced") != std::string::npos);
}

TEST_CASE("two processes on one run: the second waits for the first and finds its results; a killed holder leaves no lock", "[integrity]") {
  const std::string d = test::temp_dir();
  // The first process is paused (SIGSTOP) once it holds the lock and resumed once the second says it waits:
  // the second meets the lock however fast either trains, so the run need only outlast the first poll.
  const std::string m = test::tiny_manifest(d, "bf16", 40);
  // A shell fragment that waits (20 s at most) until `log` holds `text`.
  const auto until = [](const std::string& text, const std::string& log) {
    return "; for i in $(seq 1000); do grep -q '" + text + "' " + log + " 2>/dev/null && break; sleep 0.02; done; ";
  };
  Shell both = sh(kBin + " run " + m + " > " + d + "/a.log 2>&1 & a=$!" + until("steps x", d + "/a.log") + "kill -STOP $a; " + kBin + " run " + m +
                  " > " + d + "/b.log 2>&1 & b=$!" + until("another process trains it", d + "/b.log") + "kill -CONT $a; wait $b; echo b=$?; wait $a; echo a=$?");
  CHECK(both.out.find("b=0") != std::string::npos);
  CHECK(both.out.find("a=0") != std::string::npos);
  const std::string b = bytes_of(d + "/b.log");
  CHECK(b.find("another process trains it (pid ") != std::string::npos);
  CHECK(b.find("results exist") != std::string::npos);
  CHECK(b.find("steps x") == std::string::npos);  // it did not train
  // SIGKILL while holding the lock: the next process, started as soon as the holder is gone, takes it at
  // once (it would wait for the lock until `timeout` otherwise; a few steps show it trains).
  const std::string m2 = test::tiny_manifest(d, "ufp4", 2000, "checkpoint_every = 50\n");
  Shell killed = sh(kBin + " run " + m2 + " > " + d + "/c.log 2>&1 & c=$!" + until("steps x", d + "/c.log") + "kill -9 $c; wait $c; timeout 60 " + kBin +
                    " run " + m2 + " --stop-after 5 2>&1; echo exit=$?");
  CHECK(killed.out.find("another process trains it") == std::string::npos);
  CHECK(killed.out.find("exit=130") != std::string::npos);
}

// The scheduler's options for jobs that are shell one-liners: one GPU, quick polls, and no thread stacks
// (gdb's attach takes seconds; the wait channels and state are enough to check).
static ScheduleOptions quick_schedule(int per_gpu, double stall_seconds, double stop_grace_seconds) {
  ScheduleOptions o;
  o.gpus = 1;
  o.per_gpu = per_gpu;
  o.stall_seconds = stall_seconds;
  o.stop_grace_seconds = stop_grace_seconds;
  o.poll_seconds = 0.02;
  o.thread_stacks = false;
  return o;
}

TEST_CASE("the run scheduler: a stalled run is logged with its state, stopped and started once more; a stop ends it within the grace", "[integrity]") {
  const std::string d = test::temp_dir();
  ScheduleOptions o = quick_schedule(3, 1, 1);
  // Two jobs stall after their first line (every time they start), side by side; one finishes. Each
  // stalled job is started again itself, once (not a neighbour in the scheduler's list).
  const std::vector<ScheduledJob> jobs = {{"stalls", "sh -c 'echo started; sleep 30'", d + "/stalls.log"},
                                          {"stalls too", "sh -c 'echo started; sleep 30'", d + "/stalls2.log"},
                                          {"ends", "sh -c 'echo done'", d + "/ends.log"}};
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<JobResult> r = run_scheduled_jobs(jobs, o);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(r[2].status == JobStatus::kDone);
  for (int k : {0, 1}) {
    CHECK(r[k].status == JobStatus::kFailed);
    CHECK(r[k].restarts == 1);
    CHECK(r[k].detail.find("stalled twice") != std::string::npos);
  }
  auto starts = [](const std::string& text) {
    size_t n = 0;
    for (size_t at = text.find("started\n"); at != std::string::npos; at = text.find("started\n", at + 1)) ++n;
    return n;
  };
  CHECK(starts(bytes_of(d + "/stalls.log")) == 2);
  CHECK(starts(bytes_of(d + "/stalls2.log")) == 2);
  const std::string log = bytes_of(d + "/stalls.log");
  CHECK(log.find("=== ufp4 run: no progress for 1 s; its state:") != std::string::npos);
  CHECK(log.find("State:") != std::string::npos);
  CHECK(took < 15);

  // SIGTERM to the scheduler: a job that ignores it is killed after the grace, and the call returns.
  const std::vector<ScheduledJob> stubborn = {{"stubborn", "sh -c 'trap \"\" TERM; while :; do echo x; sleep 0.1; done'", d + "/stubborn.log"}};
  o.stall_seconds = 60;
  std::thread signaller([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    ::kill(::getpid(), SIGTERM);
  });
  const auto t1 = std::chrono::steady_clock::now();
  const std::vector<JobResult> s = run_scheduled_jobs(stubborn, o);
  signaller.join();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 10);
  CHECK(s[0].status == JobStatus::kStopped);
  CHECK(bytes_of(d + "/stubborn.log").find("still running 1 s after a stop signal") != std::string::npos);
}

TEST_CASE("the run scheduler's time limit: no run started that its kind says would not end in time, and the rest stopped at the limit", "[integrity]") {
  const std::string d = test::temp_dir();
  ScheduleOptions o = quick_schedule(1, 300, 2);
  // One slot, 4 s. a takes 1 s: b (its kind, 2 s) fits in the 3 s left and runs; then the kind's longest,
  // 2 s, does not fit in the 1 s left: c is not started. The call returns once b ends, before the limit.
  const auto job = [&](const std::string& name, const std::string& kind, const std::string& body) {
    return ScheduledJob{name, "sh -c '" + body + "'", d + "/" + name + ".log", kind};
  };
  const std::vector<ScheduledJob> one_kind = {job("a", "k", "echo a; sleep 1"), job("b", "k", "echo b; sleep 2"), job("c", "k", "echo c; sleep 1")};
  const auto t0 = std::chrono::steady_clock::now();
  o.deadline = t0 + std::chrono::seconds(4);
  const std::vector<JobResult> r = run_scheduled_jobs(one_kind, o);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 4);
  CHECK(r[0].status == JobStatus::kDone);
  CHECK(r[1].status == JobStatus::kDone);
  CHECK(r[2].status == JobStatus::kNotStarted);
  CHECK(!file_exists(d + "/c.log"));
  // A kind with no finished run starts; at the limit it is stopped as on a signal, and the call returns.
  const auto t1 = std::chrono::steady_clock::now();
  o.deadline = t1 + std::chrono::seconds(1);
  const std::vector<JobResult> s = run_scheduled_jobs({job("long", "other", "echo long; sleep 30")}, o);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  CHECK(took >= 1);
  CHECK(took < 5);
  CHECK(s[0].status == JobStatus::kStopped);
  // What a call measured carries to the next call made with the same options (a campaign's pilot, then
  // the rest): c's kind took 2 s at most, more than the 1 s left.
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  CHECK(run_scheduled_jobs({one_kind[2]}, o)[0].status == JobStatus::kNotStarted);
  // A job whose log held lines when it started is not timed (it may have resumed a checkpoint): a kind
  // timed only by such a job has no estimate, and its next job starts.
  o = quick_schedule(1, 300, 2);
  write_bytes(d + "/resumed.log", "an earlier command's lines\n");
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);  // timed, its 2 s would not fit in the 1 s left
  const std::vector<JobResult> resumed = run_scheduled_jobs({job("resumed", "r", "sleep 2"), job("fresh", "r", "sleep 0.1")}, o);
  CHECK(resumed[1].status == JobStatus::kDone);
}

// A device call that first resumes an earlier call's runs times none of them; its fresh runs are judged by
// the training time the campaign's results record, so that the last minutes do not go to runs cut off.
TEST_CASE("the time limit's prior: the longest training time the campaign's results record on this GPU, by model, plus the start's margin", "[integrity]") {
  const std::string d = test::temp_dir();
  const auto result = [&](const std::string& name, const std::string& model, const std::string& device, std::vector<double> time_s) {
    RunResults r;
    r.run_name = name;
    r.run_id = "0123456789abcdef";
    r.recipe = "bf16";
    r.model = model;
    r.device_name = device;
    r.diverged_step = -1;
    for (size_t i = 0; i < time_s.size(); ++i) {
      r.curves.step.push_back(static_cast<double>(i));
      r.curves.tokens.push_back(10.0 * (i + 1));
      r.curves.loss.push_back(5.0);
      r.curves.lr.push_back(1e-3);
      r.curves.grad_norm.push_back(1.0);
      r.curves.time_s.push_back(time_s[i]);
    }
    write_run_results(d + "/" + name + ".h5", r);
    return PlannedRun{name, r.run_id, model, "bf16", 1, 0, 0, d + "/" + name + ".h5"};
  };
  write_bytes(d + "/damaged.h5", "not an HDF5 file");
  RunSet set;
  set.runs = {result("m1", "m", "GPU A", {1, 10}), result("m2", "m", "GPU A", {5, 25.5}), result("m3", "m", "GPU B", {99}),
              result("n1", "n", "GPU A", {7}), result("n2", "n", "GPU A", {1, NAN}), PlannedRun{"n3", "fedcba9876543210", "n", "bf16"},
              PlannedRun{"bad", "0123456789abcdef", "n", "bf16", 1, 0, 0, d + "/damaged.h5"}};
  // Another GPU's runs, a NaN time, a missing run and an unreadable file count for nothing.
  CHECK(recorded_training_seconds(set, "GPU A") == std::map<std::string, double>{{"m", 25.5}, {"n", 7}});
  CHECK(recorded_training_seconds(set, "") == std::map<std::string, double>{{"m", 99}, {"n", 7}});
  CHECK(recorded_training_seconds(set, "GPU C").empty());
  CHECK(time_limit_priors(set, "GPU A") == std::map<std::string, double>{{"m", 25.5 + kRunOverheadSeconds}, {"n", 7 + kRunOverheadSeconds}});
}

TEST_CASE("the run scheduler's time limit with a prior: fresh jobs expected to take at least the prior, resumed jobs always started", "[integrity]") {
  const std::string d = test::temp_dir();
  const auto job = [&](const std::string& name, const std::string& kind, const std::string& body, bool resumes = false) {
    return ScheduledJob{name, "sh -c '" + body + "'", d + "/" + name + ".log", kind, resumes};
  };
  ScheduleOptions o = quick_schedule(1, 300, 2);
  // 60 s left, a prior of 100 s: the fresh job is not started; the one that resumes a checkpoint is, and
  // a kind without a prior starts. The call returns as soon as they end.
  o.prior_by_kind = {{"k", 99.5}};
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const std::vector<JobResult> r = run_scheduled_jobs({job("resumed", "k", "echo resumed", true), job("fresh", "k", "echo fresh"), job("other", "u", "echo other")}, o);
  CHECK(r[0].status == JobStatus::kDone);
  CHECK(r[1].status == JobStatus::kNotStarted);
  CHECK(!file_exists(d + "/fresh.log"));
  // Whole seconds, the estimate rounded up (99.5 reads 100) and the time left down (just under 60 reads 59 or less).
  INFO(r[1].detail);
  const std::string prefix = "not started: a run of k is expected to take 100 s, and ", suffix = " s of the time limit are left";
  REQUIRE(r[1].detail.rfind(prefix, 0) == 0);
  REQUIRE(ends_with(r[1].detail, suffix));
  const int left = std::stoi(r[1].detail.substr(prefix.size(), r[1].detail.size() - prefix.size() - suffix.size()));
  CHECK(left >= 50);
  CHECK(left <= 59);
  CHECK(r[2].status == JobStatus::kDone);
  // The resumed job was not timed: its kind still has no measured time.
  CHECK(o.longest_by_kind->count("k") == 0);
  // The prior stays the least a job of its kind is expected to take, even after a shorter one finished here
  // (a run copied from an identical one ends in seconds): with a prior of 4 s and 5 s left, the first
  // job (1.5 s) starts; then 3.5 s or less are left, more than the 1.5 s measured, less than the prior.
  // (Only the order of the three durations matters; the first job's sleep is what the test waits for.)
  o = quick_schedule(1, 300, 2);
  o.prior_by_kind = {{"m", 4}};
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  const std::vector<JobResult> s = run_scheduled_jobs({job("first", "m", "echo first; sleep 1.5"), job("second", "m", "echo second")}, o);
  CHECK(s[0].status == JobStatus::kDone);
  CHECK(s[1].status == JobStatus::kNotStarted);
}

TEST_CASE("run and campaign run refuse a time limit out of range, without --gpus N, or outside campaign run", "[integrity]") {
  const auto r = test::run_cli("run experiments/ci/bf16.toml --time-limit 60");
  CHECK(r.code == 2);
  CHECK(r.out.find("run: --time-limit goes with --gpus N") != std::string::npos);
  const auto n = test::run_cli("campaign run experiments/demo/campaign.toml --gpus 1 --time-limit -5");
  CHECK(n.code == 2);
  CHECK(n.out.find("campaign run: --time-limit: -5") != std::string::npos);
  CHECK(test::run_cli("run experiments/ci/bf16.toml --gpus 1 --time-limit 1e9").code == 2);
  const auto check = test::run_cli("campaign check experiments/demo/campaign.toml --gpus 1 --time-limit 60");
  CHECK(check.code == 2);
  CHECK(check.out.find("campaign: --time-limit goes with run (without --only)") != std::string::npos);
}

namespace {

// A forked child with the stack-dump handlers installed runs `body` with its stderr in a file: its wait
// status, and what it wrote there.
std::pair<int, std::string> child_with_handlers(void (*body)()) {
  const std::string err = test::temp_dir() + "/stderr.txt";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 2);
    install_stack_dump_handler();
    body();
    ::_exit(7);  // still alive after it
  }
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return {-1, ""};
  return {status, bytes_of(err)};
}

}  // namespace

TEST_CASE("SIGUSR1 makes a ufp4 process print the receiving thread's stack to stderr and go on", "[integrity]") {
  const auto [status, text] = child_with_handlers([] { ::raise(SIGUSR1); });
  CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 7));
  CHECK(text.find("=== ufp4: stack of the thread that took SIGUSR1") != std::string::npos);
  CHECK(std::count(text.begin(), text.end(), '\n') >= 3);
}

TEST_CASE("a crash writes its signal and the crashing thread's stack to stderr, and the process still dies of the signal", "[integrity]") {
  // A real invalid write, as a crash in a kernel launch or a library would be.
  const auto [status, text] = child_with_handlers([] { *static_cast<volatile int*>(nullptr) = 1; });
  CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV));
  CHECK(text.find("=== ufp4: fatal signal 11\n") == 0);
  CHECK(std::count(text.begin(), text.end(), '\n') >= 3);
}

TEST_CASE("an identical run made in another folder is copied, not trained again; a damaged one is not; --force trains", "[integrity]") {
  const std::string a = test::temp_dir(), b = test::temp_dir();
  const std::string ma = test::tiny_manifest(a, "bf16", 20);
  std::string body = bytes_of(ma);
  body.replace(body.find(a + "/runs"), a.size() + 5, b + "/runs");
  const std::string mb = test::write_manifest(b, "tiny_bf16", body);
  REQUIRE(test::run_cli("run " + ma).code == 0);
  const RunManifest A = RunManifest::load(ma), B = RunManifest::load(mb);
  REQUIRE(test::run_id_of(A) == test::run_id_of(B));  // the output folder is not part of what a run is
  // `ufp4 run <options> mb` with UFP4_REUSE naming a's folder (the suite's main() turns reuse off).
  const auto reuse = [&](const std::string& options) {
    const EnvFor from_a("UFP4_REUSE", a.c_str());
    return test::run_cli("run " + options + mb);
  };
  auto copied = reuse("");
  INFO(copied.out);
  CHECK(copied.code == 0);
  CHECK(copied.out.find("the identical run (run id " + test::run_id_of(A) + ") is in " + test::results_of(A)) != std::string::npos);
  CHECK(copied.out.find("steps x") == std::string::npos);  // not trained
  CHECK(bytes_of(test::results_of(B)) == bytes_of(test::results_of(A)));
  // A run asked to stop part way trains (resume checks rely on it).
  std::remove(test::results_of(B).c_str());
  auto partial = reuse("--stop-after 5 ");
  CHECK(partial.code == 130);
  CHECK(partial.out.find("steps x") != std::string::npos);
  // A damaged file elsewhere is not this run's result: the run trains.
  std::remove(test::results_of(B).c_str());
  std::string damaged = bytes_of(test::results_of(A));
  damaged[damaged.size() / 2] ^= 0x20;
  write_bytes(test::results_of(A), damaged);
  auto trained = reuse("");
  CHECK(trained.code == 0);
  CHECK(trained.out.find("steps x") != std::string::npos);
  // --force trains even where an identical run exists.
  CHECK(reuse("--force ").out.find("steps x") != std::string::npos);
}

TEST_CASE("ufp4 quantize refuses inputs it cannot quantize faithfully, saying why", "[integrity]") {
  const std::string d = test::temp_dir();
  auto npy = [&](const std::string& name, const std::string& descr, const std::string& shape, const std::string& payload) {
    std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
    header += std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
    std::string b = std::string("\x93NUMPY\x01\x00", 8);
    const uint16_t hl = static_cast<uint16_t>(header.size());
    b.append(reinterpret_cast<const char*>(&hl), 2);
    write_bytes(d + "/" + name, b + header + payload);
    return d + "/" + name;
  };
  std::vector<float> v(32, 1.0f);
  v[5] = std::nanf("");
  const std::string nan = npy("nan.npy", "<f4", "(2, 16)", std::string(reinterpret_cast<const char*>(v.data()), 128));
  auto r = test::run_cli("quantize --in " + nan + " --out -");
  CHECK(r.code == 2);
  CHECK(r.out.find("holds 1 NaN and 0 infinite values (the first at index 5") != std::string::npos);
  CHECK(test::run_cli("quantize --in " + nan + " --out - --allow-nonfinite").code == 0);
  std::vector<double> big(16, 1.0);
  big[3] = 1e39;
  const std::string f8 = npy("big.npy", "<f8", "(1, 16)", std::string(reinterpret_cast<const char*>(big.data()), 128));
  auto b = test::run_cli("quantize --in " + f8 + " --out -");
  CHECK(b.code == 2);
  CHECK(b.out.find("at index 3 is beyond float32's range") != std::string::npos);
  std::vector<float> ones(32, 1.0f);
  const std::string extra = npy("extra.npy", "<f4", "(1, 16)", std::string(reinterpret_cast<const char*>(ones.data()), 128));
  auto e = test::run_cli("quantize --in " + extra + " --out -");
  CHECK(e.code == 2);
  CHECK(e.out.find("64 bytes after the 16 values its shape (1, 16) declares") != std::string::npos);
  const std::string huge = npy("huge.npy", "<f4", "(4294967296, 4294967296)", std::string(reinterpret_cast<const char*>(ones.data()), 128));
  auto h = test::run_cli("quantize --in " + huge + " --out -");
  CHECK(h.code == 2);
  CHECK(h.out.find("its product overflows") != std::string::npos);
}

TEST_CASE("every committed campaign's results are its run set: ids recomputed from its manifests and the committed data manifest", "[integrity]") {
  const AtRepositoryRoot at_root;  // campaigns name their files from the repository root
  int campaigns = 0;
  for (const auto& path : campaign_files("experiments")) {
    const Campaign c = Campaign::load(path);
    if (c.results_dir.rfind("results/", 0) != 0) continue;  // CI-scale campaigns live in build/
    ++campaigns;
    const RunSet set = c.resolve();
    INFO(path << ": " << set.runs.size() - set.missing() << " of " << set.runs.size() << " runs committed");
    for (const auto& why : set.ignored) FAIL_CHECK("not in the run set of " << path << ": " << why);
    for (const auto& r : set.runs) {
      if (r.path.empty()) continue;
      const RunResults res = read_run_results(r.path, /*with_curves=*/false);
      CHECK(res.run_id == r.run_id);
      CHECK(res.content_verified);
      CHECK(res.data_manifest_sha256 == sha256_hex(read_text_file(c.data_pins.begin()->second)));
    }
  }
  CHECK(campaigns >= 1);
}

TEST_CASE("ufp4 fit --campaign fits exactly its run set's verified runs, per recipe; with --results beside it, refused", "[integrity]") {
  const std::string d = test::temp_dir();
  const AtRepositoryRoot at_root;
  const std::string path = "experiments/figure9/campaign.toml";
  std::map<std::string, int> runs;  // recipe -> verified runs of the set (Figure 8's moe-ne4.0m runs read by run id)
  const RunSet set = Campaign::load(path).resolve();
  for (const auto& r : set.runs) runs[r.recipe] += !r.path.empty();
  auto fit = test::run_cli("fit --campaign " + path + " --form power --bootstrap 0 --out " + d + "/fits.h5");
  INFO(fit.out);
  REQUIRE(fit.code == 0);
  for (const auto& [recipe, n] : runs) {
    CHECK(n > 0);
    char line[96];
    std::snprintf(line, sizeof line, "%-10s power      n=%d ", recipe.c_str(), n);
    CHECK(fit.out.find(line) != std::string::npos);
  }
  if (set.missing() > 0) CHECK(fit.out.find(std::to_string(set.missing()) + " missing are left out") != std::string::npos);
  auto both = test::run_cli("fit --campaign " + path + " --results results/figure9 --out " + d + "/both.h5");
  CHECK(both.code == 2);
  CHECK(both.out.find("--campaign: not with --results or --prefix") != std::string::npos);
  CHECK(!file_exists(d + "/both.h5"));
  auto prefixed = test::run_cli("fit --campaign " + path + " --prefix figure9_ --out " + d + "/prefixed.h5");
  CHECK(prefixed.code == 2);
  CHECK(prefixed.out.find("--campaign: not with --results or --prefix") != std::string::npos);
}

TEST_CASE("the fit report of a campaign's runs shows its registered verdicts, and refuses a fit of another run set", "[integrity]") {
  const std::string d = test::temp_dir(), co = d + "/co", root = UFP4_SOURCE_DIR;
  const std::string path = "experiments/figure9/campaign.toml";
  // A checkout of its own whose results/figure9 links every committed file, so that one can be taken away.
  REQUIRE(sh("mkdir -p " + co + "/results/figure9 " + co + "/reports && touch " + co + "/CMakeLists.txt && ln -s " + root + "/models " + co +
             "/models && ln -s " + root + "/experiments " + co + "/experiments && cp -r " + root + "/reports/paper " + co + "/reports/ && ln -s " +
             root + "/results/data " + co + "/results/data && ln -s " + root + "/results/figure8 " + co + "/results/figure8 && cp " + root +
             "/results/figure9/seeds.toml " + co + "/results/figure9/ && for f in " + root + "/results/figure9/*.h5; do ln -s $f " + co +
             "/results/figure9/; done")
              .code == 0);
  const auto in_co = [&](const std::string& args) { return test::run_cli_in(co, args); };
  auto fit = in_co("fit --campaign " + path + " --form power --bootstrap 20 --out " + d + "/fits.h5");
  INFO(fit.out);
  REQUIRE(fit.code == 0);
  CHECK(read_h5_string_attrs(d + "/fits.h5")["campaign"] == path);
  auto fitted = in_co("report figure9 --fits " + d + "/fits.h5 --out " + d + "/fit.md");
  auto registered = in_co("report figure9 --campaign " + path + " --out " + d + "/campaign.md");
  INFO(fitted.out);
  REQUIRE(fitted.code == 0);
  REQUIRE(registered.code == 0);
  // Every row of the campaign report's verdicts table, word for word, in the fit report.
  const std::string fit_md = read_text_file(d + "/fit.md"), campaign_md = read_text_file(d + "/campaign.md");
  const size_t table = campaign_md.find("| claim | metric | seeds | difference (pp) |");
  REQUIRE(table != std::string::npos);
  std::istringstream rows(campaign_md.substr(table, campaign_md.find("\n\n", table) - table));
  int checked = 0;
  for (std::string row; std::getline(rows, row); ++checked) CHECK(fit_md.find(row + "\n") != std::string::npos);
  CHECK(checked >= 3);
  // Its own readings are labelled, not set as verdicts.
  REQUIRE(fit_md.find("## The paper's claims, judged from the runs (descriptive, not registered)") != std::string::npos);
  CHECK(fit_md.find("## The paper's claims, judged from our fits (descriptive, not registered)") != std::string::npos);
  CHECK(fit_md.find("UFP4 below E2M1 (registered verdict)") != std::string::npos);
  // The provenance names what the verdicts come from: the registration and the seeds its power rule decided.
  CHECK(fit_md.find("- " + path + " (the campaign's registration) [") != std::string::npos);
  CHECK(fit_md.find("- results/figure9/seeds.toml (the seeds its power rule decided) [") != std::string::npos);
  const std::string readings = fit_md.substr(fit_md.find("## The paper's claims, judged from the runs"));
  for (const char* verdict : {"**holds**", "**contradicted**", "**inconclusive**", "**smaller"}) CHECK(readings.find(verdict) == std::string::npos);
  // One result taken from the run set: the fit no longer holds it, and the report says how to make it again.
  REQUIRE(sh("rm " + co + "/results/figure9/figure9_moe-ne5.8m-ufp4-1-*.h5").code == 0);
  auto stale = in_co("report figure9 --fits " + d + "/fits.h5 --out " + d + "/stale.md");
  CHECK(stale.code == 2);
  CHECK(stale.out.find("(0 not in the fit, 1 in the fit and not in its run set, 0 changed since; e.g. results/figure9/figure9_moe-ne5.8m-ufp4-1-") !=
        std::string::npos);
  CHECK(stale.out.find("fit again with `ufp4 fit --campaign " + path) != std::string::npos);
  CHECK(!file_exists(d + "/stale.md"));
}

// The mechanism's captures (results/analysis/mechanism, `ufp4 analyze capture`) are no campaign: their run ids are
// recomputed from the mechanism manifests on the corpus their step files name (results/data/), and every committed
// run file and step file is one of those runs, its content verified.
TEST_CASE("the mechanism's committed captures are its manifests' runs: ids recomputed, step files verified by content", "[integrity]") {
  const AtRepositoryRoot at_root;  // the manifests name their files from the repository root
  const std::string dir = "results/analysis/mechanism";
  if (!is_dir(dir)) return;
  pin_data_manifest("data/python-8k", "results/data/python-8k-h200-current.data.toml");
  const std::string data_sha = sha256_hex(read_text_file("results/data/python-8k-h200-current.data.toml"));
  std::map<std::string, RunPlan> by_capture_dir;
  for (const char* m : {"experiments/analysis/mechanism_dense.toml", "experiments/analysis/mechanism_moe.toml"})
    for (const auto& r : RunManifest::expand(m)) {
      RunPlan p = plan_run(r);
      by_capture_dir.emplace(p.capture.dir, p);
    }
  std::vector<std::string> steps;
  walk_files(dir, ".tensors.h5", steps);
  for (const auto& f : steps) {
    INFO(f);
    const std::string capture_dir = f.substr(0, f.rfind('/'));
    REQUIRE(by_capture_dir.count(capture_dir) == 1);
    CHECK(verify_h5_content(f));
    auto a = read_h5_string_attrs(f);
    CHECK(a["run_id"] == by_capture_dir.at(capture_dir).run_id);
    CHECK(a["data_manifest_sha256"] == data_sha);
  }
  int runs = 0;
  for (const auto& [capture_dir, p] : by_capture_dir) {
    if (!file_exists(p.results_path)) continue;
    ++runs;
    INFO(p.results_path);
    const RunResults res = read_run_results(p.results_path, /*with_curves=*/false);
    CHECK(res.run_id == p.run_id);
    CHECK(res.content_verified);
    CHECK(res.data_manifest_sha256 == data_sha);
  }
  INFO(steps.size() << " step files, " << runs << " run files");
  CHECK(steps.size() >= static_cast<size_t>(runs));
}

// The committed mechanism report is what its committed step files render to: every verdict of reports/mechanism.md is
// re-made from the files CI just verified (above), with the real data's three seeds, two models and every section's
// paths (the slopes over blocks, the chain's size and ranking tests) that the tiny models of the analysis tests cannot reach.
TEST_CASE("reports/mechanism.md is the rendering of the committed captures, byte for byte", "[integrity]") {
  const std::string root = UFP4_SOURCE_DIR;
  if (!is_dir(root + "/results/analysis/mechanism") || !file_exists(root + "/reports/mechanism.md")) return;
  const AtRepositoryRoot at_root;  // the report names its folder as given, from the repository root
  const std::string out = test::temp_dir() + "/mechanism.md";
  auto r = test::run_cli("report mechanism --results results/analysis/mechanism --out " + out);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(bytes_of(out) == bytes_of("reports/mechanism.md"));
  const std::string md = read_text_file(out);
  for (const char* expected : {"Slope of E1M2's Delta SQNR on its unrotated B_eff: -", "| moe-ne12m | 1499 | e2m1_ref - ufp4 | forward | ",
                               "### The paper on GEMM outputs", "| Key Finding 2: RHT-16 reverses the ranking of E2M1 and E1M2 on linear_fc2's input | Key Finding 2 | 27: 27 holds |"})
    CHECK(md.find(expected) != std::string::npos);
  for (const char* undefined : {" nan", "(nan", "[nan"}) CHECK(md.find(undefined) == std::string::npos);  // no undefined number printed
}

TEST_CASE("--per-gpu auto takes the fastest packing measured for the runs' model, 1 when it was not measured; MPS where its row is fastest", "[integrity]") {
  const std::string d = test::temp_dir();
  write_bytes(d + "/p.csv", "device,model,per_gpu,runs,steps_each,tokens_per_s_sum\nH,m-a,1,1,8,100\nH,m-a,4,4,2,150\nH,m-a,9,9,1,120\nH,m-b,1,1,8,90\n");
  PackingChoice c = choose_packing({"m-a", "m-a"}, d + "/p.csv", true);
  CHECK(c.per_gpu == 4);
  CHECK_FALSE(c.mps);
  CHECK(c.why.find("the fastest measured for m-a") != std::string::npos);
  CHECK(choose_packing({"m-a", "m-a", "m-b"}, d + "/p.csv", true).per_gpu == 1);  // runs of both share a GPU: m-b's fastest is 1
  CHECK(choose_packing({"m-c"}, d + "/p.csv", true).per_gpu == 1);
  const PackingChoice none = choose_packing({"m-a"}, d + "/missing.csv", true);
  CHECK(none.per_gpu == 1);
  CHECK(none.table_missing);  // said as a warning: a campaign sent without its table runs one a GPU
  CHECK(none.why.find("no packing table at " + d + "/missing.csv") != std::string::npos);
  CHECK_FALSE(c.table_missing);
  CHECK(packed_estimate({{"m-a", 150.0 * 3600}}, d + "/p.csv").find("1 GPU-hours") != std::string::npos);
  const std::string unmeasured = packed_estimate({{"m-a", 150.0 * 3600}, {"m-z", 5.0}}, d + "/p.csv");  // a model the table lacks is named
  CHECK(unmeasured.find("1 GPU-hours") != std::string::npos);
  CHECK(unmeasured.find("m-z: 5 tokens, no packing measured for this model") != std::string::npos);
  // The optional ninth column: the same K under MPS.
  const std::string h = "device,model,per_gpu,runs,steps_each,tokens_per_s_sum,tokens_per_s_each_mean,wall_s,mps\n";
  write_bytes(d + "/m.csv", h + "H,m-a,1,1,8,100,100,9,0\nH,m-a,4,4,2,90,22,9,0\nH,m-a,4,4,2,300,75,9,1\nH,m-b,2,2,4,90,45,9,0\nH,m-b,2,2,4,80,40,9,1\n");
  c = choose_packing({"m-a"}, d + "/m.csv", true);
  CHECK(c.per_gpu == 4);
  CHECK(c.mps);
  CHECK(c.why.find("4 run(s) a GPU under MPS") == 0);
  // Without MPS (--mps off, or no MPS on the machine) K comes from the rows without it: one run, since
  // four without MPS measured slower.
  c = choose_packing({"m-a"}, d + "/m.csv", false);
  CHECK(c.per_gpu == 1);
  CHECK_FALSE(c.mps);
  CHECK_FALSE(choose_packing({"m-a", "m-b"}, d + "/m.csv", true).mps);  // m-b is faster without at K = 2
  CHECK(mps_measured_faster({"m-a"}, 4, d + "/m.csv"));
  CHECK_FALSE(mps_measured_faster({"m-b"}, 2, d + "/m.csv"));
  CHECK_FALSE(mps_measured_faster({"m-a"}, 1, d + "/m.csv"));  // not measured under MPS at 1
  CHECK(packed_estimate({{"m-a", 300.0 * 3600}}, d + "/m.csv").find("4 run(s) a GPU under MPS") != std::string::npos);
  for (const std::string bad : {"H,m-a,four,1,8,100\n", "H,m-a,4,4,2,150,37,9,yes\n"}) {
    write_bytes(d + "/bad.csv", h + bad);
    try {
      load_packing(d + "/bad.csv");
      FAIL("a malformed row was read: " + bad);
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find(d + "/bad.csv:2: expected device,model,per_gpu") == 0);
    }
  }
  CHECK(test::run_cli("run experiments/ci/bf16.toml --gpus 1 --per-gpu two").code == 2);
  const auto bad_mps = test::run_cli("run experiments/ci/bf16.toml --mps maybe");
  CHECK(bad_mps.code == 2);
  CHECK(bad_mps.out.find("--mps: 'maybe' (allowed: auto, on, off)") != std::string::npos);
  const auto mps_alone = test::run_cli("run experiments/ci/bf16.toml --mps on");
  CHECK(mps_alone.code == 2);
  CHECK(mps_alone.out.find("--mps on goes with --gpus N") != std::string::npos);
}

TEST_CASE("--mps on: one MPS control daemon a GPU while the runs train, each run on its GPU's UUID and pipes; the daemons quit after", "[integrity]") {
  // Stand-ins for nvidia-smi and nvidia-cuda-mps-control that record what they were asked.
  const std::string d = test::temp_dir(), bin = d + "/bin", calls = d + "/calls.log";
  make_dirs(bin);
  write_bytes(bin + "/nvidia-smi", "#!/bin/sh\n# --query-gpu=uuid --format=csv,noheader -i N\neval last=\\${$#}\necho GPU-fake-$last\n");
  write_bytes(bin + "/nvidia-cuda-mps-control",
              "#!/bin/sh\nif [ \"$1\" = -d ]; then\n  [ -n \"$FAKE_MPS_FAIL\" ] && exit 0\n  echo \"start $CUDA_VISIBLE_DEVICES\" >> " + calls +
                  "; touch \"$CUDA_MPS_PIPE_DIRECTORY/control\"; exit 0\nfi\nread what\n[ -e \"$CUDA_MPS_PIPE_DIRECTORY/control\" ] || exit 1\n"
                  "[ \"$what\" = quit ] && { echo quit >> " + calls + "; rm \"$CUDA_MPS_PIPE_DIRECTORY/control\"; }\nexit 0\n");
  std::system(("chmod +x " + bin + "/*").c_str());
  const EnvFor path("PATH", (bin + ":" + std::getenv("PATH")).c_str()), visible("CUDA_VISIBLE_DEVICES", nullptr);
  CHECK(mps_available());
  ScheduleOptions o;
  o.gpus = 2;
  o.per_gpu = 2;
  o.poll_seconds = 0.05;
  o.mps = true;
  std::vector<ScheduledJob> jobs;
  for (int i = 0; i < 4; ++i)
    jobs.push_back({"job" + std::to_string(i), "sh -c 'echo $CUDA_VISIBLE_DEVICES $CUDA_MPS_PIPE_DIRECTORY; ls $CUDA_MPS_PIPE_DIRECTORY'",
                    d + "/job" + std::to_string(i) + ".log"});
  const std::vector<JobResult> r = run_scheduled_jobs(jobs, o);
  std::string folder;
  int on_slot[2] = {0, 0};
  for (int i = 0; i < 4; ++i) {
    CHECK(r[static_cast<size_t>(i)].status == JobStatus::kDone);
    std::istringstream log(bytes_of(d + "/job" + std::to_string(i) + ".log"));
    std::string uuid, pipes, listed;
    log >> uuid >> pipes >> listed;
    // Its GPU by UUID, and the pipes of that GPU's daemon (slot g: GPU-fake-g, <folder>/g/pipes).
    REQUIRE(uuid.rfind("GPU-fake-", 0) == 0);
    const std::string slot = uuid.substr(9);
    const std::string tail = "/" + slot + "/pipes";
    REQUIRE(pipes.size() > tail.size());
    CHECK(pipes.substr(pipes.size() - tail.size()) == tail);
    CHECK(listed == "control");
    if (slot == "0" || slot == "1") ++on_slot[slot == "1"];
    folder = pipes.substr(0, pipes.size() - tail.size());
  }
  CHECK(on_slot[0] == 2);
  CHECK(on_slot[1] == 2);
  const std::string called = bytes_of(calls);
  CHECK(called.find("start GPU-fake-0\n") != std::string::npos);
  CHECK(called.find("start GPU-fake-1\n") != std::string::npos);
  CHECK(called.find("quit\nquit\n") != std::string::npos);
  CHECK(folder.rfind("/tmp/ufp4-mps-", 0) == 0);
  CHECK_FALSE(is_dir(folder));  // removed once both daemons took 'quit'
  // A daemon that never answers: the scheduler stops before any job, naming the GPU.
  const EnvFor fail("FAKE_MPS_FAIL", "1");
  try {
    run_scheduled_jobs(jobs, o);
    FAIL("the scheduler ran without its MPS daemons");
  } catch (const RuntimeError& e) {
    CHECK(std::string(e.what()).find("the MPS control daemon of GPU 0 (GPU-fake-0) does not answer") != std::string::npos);
  }
}
