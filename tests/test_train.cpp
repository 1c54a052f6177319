// Run manifests and the training engine on the tiny CPU model: determinism, bit-identical resume,
// divergence handling, results with provenance, clear errors.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "harness/data/data.h"
#include "harness/io/array_io.h"
#include "harness/io/run_results.h"
#include "harness/plan/device_peaks.h"
#include "harness/plan/run_manifest.h"
#include "harness/train/token_stream.h"
#include "harness/train/trainer.h"
#include "models/model_config.h"
#include "models/recipe.h"
#include "tests/catch.h"
#include "tests/run_helpers.h"

using namespace ufp4;

namespace {

using test::ci_data;
using test::temp_dir;
using test::tiny_manifest;
std::string manifest(const std::string& dir, const std::string& name, const std::string& body) { return test::write_manifest(dir, name, body); }

std::vector<double> curve(const std::string& h5) { return read_run_results(h5).curves.loss; }
std::vector<double> eval_curve(const std::string& h5) { return read_run_results(h5).curves.eval_loss; }

}  // namespace

TEST_CASE("manifests: bad input gives file:line: key: message (allowed: ...)", "[train]") {
  std::string d = temp_dir();
  auto err = [&](const std::string& body) {
    try {
      RunManifest::load(manifest(d, "bad", body));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(err("[train]\nstpes = 10\n").find("bad.toml:2: train.stpes: unknown key (allowed: batch,") != std::string::npos);
  CHECK(err("[train]\nsteps = \"ten\"\n").find("bad.toml:2: train.steps: expected an integer") != std::string::npos);
  CHECK(err("[train]\nsteps = 0\n").find("train.steps: 0 is out of range (allowed: 1 to") != std::string::npos);
  CHECK(err("[train]\nschedule = \"linear\"\n").find("train.schedule: 'linear' (allowed: cosine, wsd)") != std::string::npos);
  CHECK(err("[train]\nbatch = 8\nmicro_batch = 3\n").find("bad.toml:3: train.micro_batch: 3 must divide train.batch (8)") != std::string::npos);
  CHECK(err("[modle]\nname = \"tiny\"\n").find("bad.toml:1: modle: unknown section") != std::string::npos);
  CHECK(err("[train\n").find("bad.toml:1:") != std::string::npos);
  CHECK_THROWS_AS(RunManifest::load(d + "/nope.toml"), Error);
}

TEST_CASE("MFU peaks: each GPU its own datasheet peak, unknown devices none", "[train]") {
  // CUDA device names as the driver reports them.
  CHECK(peak_flops("NVIDIA H200") == 989.5e12);
  CHECK(peak_flops("NVIDIA H100 80GB HBM3") == 989.5e12);
  CHECK(peak_flops("NVIDIA H100 PCIe") == 756.5e12);
  CHECK(peak_flops("NVIDIA H100 NVL") == 835.5e12);
  CHECK(peak_flops("NVIDIA H200 NVL") == 835.5e12);
  CHECK(peak_flops("NVIDIA GH200 480GB") == 989.5e12);
  CHECK(peak_flops("NVIDIA A100-SXM4-80GB") == 312e12);
  CHECK(peak_flops("NVIDIA B200") == 2250e12);
  CHECK(peak_flops("NVIDIA GeForce RTX 4090") == 0.0);
  CHECK(peak_flops("cpu") == 0.0);
}

TEST_CASE("schedules: warmup then cosine or WSD", "[train]") {
  OptimizerSection m = optimizer_section(RunManifest{});
  m.steps = 100; m.warmup = 10; m.lr = 1.0; m.min_lr = 0.1;
  CHECK(m.lr_at(0) == Approx(0.1));
  CHECK(m.lr_at(9) == Approx(1.0));
  CHECK(m.lr_at(10) == Approx(1.0));
  CHECK(m.lr_at(55) == Approx(0.55));
  CHECK(m.lr_at(99) < 0.11);
  m.schedule = "wsd";
  m.decay_fraction = 0.2;
  CHECK(m.lr_at(50) == Approx(1.0));
  CHECK(m.lr_at(79) == Approx(1.0));
  CHECK(m.lr_at(90) == Approx(0.55));
}

TEST_CASE("a killed run resumes to the same loss curve, bit for bit", "[train]") {
  std::string d = temp_dir();
  for (const char* recipe : {"bf16", "ufp4"}) {
    RunManifest m = RunManifest::load(tiny_manifest(d, recipe, 24));
    RunResult full = test::train_manifest(m, RunOptions{});
    REQUIRE(full.status == RunStatus::kCompleted);
    std::vector<double> reference = curve(full.results_path), ref_eval = eval_curve(full.results_path);
    std::remove(full.results_path.c_str());
    RunOptions stop;
    stop.stop_after = 11;
    RunResult part = test::train_manifest(m, stop);
    CHECK(part.status == RunStatus::kStopped);
    CHECK(part.steps_done == 11);
    CHECK(!file_exists(test::results_of(m)));     // nothing half-written
    CHECK(file_exists(test::checkpoint_of(m)));
    RunResult resumed = test::train_manifest(m, RunOptions{});
    REQUIRE(resumed.status == RunStatus::kCompleted);
    INFO(recipe);
    CHECK(curve(resumed.results_path) == reference);
    CHECK(eval_curve(resumed.results_path) == ref_eval);
    CHECK(!file_exists(test::checkpoint_of(m)));
    // Existing results are skipped.
    CHECK(test::train_manifest(m, RunOptions{}).status == RunStatus::kSkipped);
  }
}

TEST_CASE("telemetry keys and values survive a resume (MoE: idle experts read NaN at their step)", "[train]") {
  std::string d = temp_dir();
  RunManifest m = RunManifest::load(tiny_manifest(d, "ufp4", 24, "", "tiny-moe"));
  m.telemetry_every = 5;
  RunResult full = test::train_manifest(m, RunOptions{});
  REQUIRE(full.status == RunStatus::kCompleted);
  const RunCurves before = read_run_results(full.results_path).curves;
  std::vector<double> alpha;
  for (const auto& row : before.alpha) alpha.insert(alpha.end(), row.begin(), row.end());
  const double time_total = before.time_s.back();
  std::rename(full.results_path.c_str(), (full.results_path + ".keep").c_str());
  RunOptions stop;
  stop.stop_after = 13;
  REQUIRE(test::train_manifest(m, stop).status == RunStatus::kStopped);
  RunResult resumed = test::train_manifest(m, RunOptions{});
  REQUIRE(resumed.status == RunStatus::kCompleted);
  const RunCurves after = read_run_results(resumed.results_path).curves;
  CHECK(after.loss == read_run_results(full.results_path + ".keep").curves.loss);
  std::vector<double> again;
  for (const auto& row : after.alpha) again.insert(again.end(), row.begin(), row.end());
  REQUIRE(again.size() == alpha.size());
  for (size_t i = 0; i < alpha.size(); ++i) {  // NaN where NaN, the same bits elsewhere
    INFO("index " << i << " of " << alpha.size() << ": " << alpha[i] << " vs " << again[i]);
    CHECK(std::memcmp(&again[i], &alpha[i], sizeof(double)) == 0);
  }
  CHECK(after.alpha_keys == before.alpha_keys);
  CHECK(after.alpha_step.size() == 5);  // steps 0, 5, 10, 15, 20
  // The training clock adds the processes' times: increasing, not restarted at the resume.
  const std::vector<double>& t = after.time_s;
  for (size_t i = 1; i < t.size(); ++i) CHECK(t[i] >= t[i - 1]);
  CHECK(time_total > 0);
}

TEST_CASE("results carry provenance, curves with units and the summary", "[train]") {
  std::string d = temp_dir();
  RunManifest m = RunManifest::load(tiny_manifest(d, "e2m1_ref", 20));
  m.telemetry_every = 5;
  RunResult r = test::train_manifest(m, RunOptions{});
  REQUIRE(r.status == RunStatus::kCompleted);
  const RunResults res = read_run_results(r.results_path);
  for (const char* k : {"git_commit", "manifest", "manifest_sha256", "device", "torch", "host", "utc_start", "utc_end", "recipe", "model",
                        "data_manifest_sha256", "ufp4_version"})
    CHECK(!res.attr(k).empty());
  CHECK(res.manifest_sha256 == sha256_hex(m.resolved()));
  CHECK(r.results_path.find(test::run_id_of(m)) != std::string::npos);
  CHECK(!res.diverged);
  CHECK(std::isfinite(res.mean_loss_last_k));
  CHECK(res.curves.alpha.size() == 4);                // steps 0, 5, 10, 15
  CHECK(res.curves.alpha_keys.size() == 2 * 4 * 6);  // 2 layers x 4 linears x 6 quantized operands (lm_head stays BF16)
  CHECK(res.curves.loss.size() == 20);
  // The curves carry their units in the file (its schema: harness/io/run_results.h).
  for (const auto& c : named_curves(res))
    if (c.name != "telemetry/alpha") CHECK(!read_h5_string_attrs(r.results_path, c.name)["units"].empty());
}

TEST_CASE("divergence stops the run, keeps its results and marks the step", "[train]") {
  std::string d = temp_dir();
  RunManifest m = RunManifest::load(tiny_manifest(d, "bf16", 60));
  m.lr = 5.0;  // far too high
  m.min_lr = 5.0;
  m.grad_clip = 0;
  m.divergence_factor = 1.2;
  m.warmup = 1;
  RunResult r = test::train_manifest(m, RunOptions{});
  CHECK(r.status == RunStatus::kDiverged);
  REQUIRE(file_exists(r.results_path));
  const RunResults res = read_run_results(r.results_path, /*with_curves=*/false);
  CHECK(res.diverged);
  CHECK(res.diverged_step >= 1);
}

TEST_CASE("an unwritable results folder fails clearly before training", "[train]") {
  std::string d = temp_dir();
  RunManifest m = RunManifest::load(tiny_manifest(d, "bf16", 5));
  std::ofstream(d + "/file") << "x";
  m.out_dir = d + "/file/runs";  // a path under a regular file can never be created
  CHECK_THROWS_AS(test::train_manifest(m, RunOptions{}), RuntimeError);
  m.out_dir = d + "/runs";
  m.data_path = d + "/no-data";
  CHECK_THROWS_AS(test::train_manifest(m, RunOptions{}), Error);
}

TEST_CASE("SIGTERM checkpoints and stops; ufp4 run resumes to the uninterrupted curve", "[train]") {
  std::string d = temp_dir();
  std::string whole = tiny_manifest(d, "ufp4", 60);
  RunManifest m = RunManifest::load(whole);
  RunResult full = test::train_manifest(m, RunOptions{});
  REQUIRE(full.status == RunStatus::kCompleted);
  std::vector<double> reference = curve(full.results_path);
  std::remove(full.results_path.c_str());
  // Interrupt a real process part-way: SIGTERM once it reports the step-20 evaluation; it stops at a step boundary.
  std::string bin = UFP4_BINARY;
  test::SignalledRun stop = test::run_and_signal(bin + " run " + whole, "step 20 validation loss", SIGTERM);
  INFO(stop.out);
  REQUIRE(stop.signalled);
  CHECK(stop.code == 130);
  CHECK(file_exists(test::checkpoint_of(m)));
  CHECK(!file_exists(test::results_of(m)));
  int rc = std::system((bin + " -q run " + whole + " > /dev/null 2>&1").c_str());
  CHECK(WEXITSTATUS(rc) == 0);
  CHECK(curve(test::results_of(m)) == reference);
}

TEST_CASE("the README's worked example: a new ablation, planned and run at CI scale", "[train]") {
  const std::string root = UFP4_SOURCE_DIR;
  std::string d = temp_dir();
  std::ofstream(d + "/ufp4_rht32.toml") << "name = \"ufp4_rht32\"\nextends = \"ufp4\"\n[fprop]\nrht = 32\n[dgrad]\nrht = 32\n[wgrad]\nrht = 32\n";
  std::ofstream(d + "/rht_size_ci.toml") << "extends = \"" << root << "/experiments/ci/ufp4.toml\"\n[data]\npath = \"" << ci_data()
                                          << "\"\n[train]\nsteps = 20\n[outputs]\ndir = \"" << d << "/runs\"\nname = \"rht_size\"\n"
                                          << "[ablation.rht_size]\nfield = \"recipe.name\"\nlevels = [\"" << d << "/ufp4_rht32.toml\"]\n";
  const std::string bin = UFP4_BINARY;
  auto sh = [](const std::string& c) { return WEXITSTATUS(std::system((c + " > /dev/null 2>&1").c_str())); };
  CHECK(sh(bin + " recipes " + d + "/ufp4_rht32.toml") == 0);
  std::vector<RunManifest> runs = RunManifest::expand(d + "/rht_size_ci.toml");
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].differs.empty());
  CHECK(runs[1].differs.find("rht_size: recipe.name=ufp4_rht32") != std::string::npos);
  CHECK(runs[0].name == "rht_size");
  CHECK(runs[1].name == "rht_size-ufp4_rht32");  // the factor named once, where the output name is the factor's
  CHECK(sh(bin + " plan " + d + "/rht_size_ci.toml") == 0);
  CHECK(sh("cd " + root + " && " + bin + " run " + d + "/rht_size_ci.toml") == 0);
  for (const auto& m : runs) CHECK(!test::found_results(m).empty());
  CHECK(read_run_results(test::found_results(runs[1]), /*with_curves=*/false).recipe_resolved.find("rht = 32") != std::string::npos);
}

TEST_CASE("a manifest whose later run names a missing recipe starts no run", "[train]") {
  std::string d = temp_dir();
  std::ofstream(d + "/m.toml") << "extends = \"" << std::string(UFP4_SOURCE_DIR) << "/experiments/ci/bf16.toml\"\n[data]\npath = \"" << ci_data()
                               << "\"\n[train]\nsteps = 5\n[outputs]\ndir = \"" << d << "/runs\"\n[sweep]\n\"recipe.name\" = [\"bf16\", \"no_such_recipe\"]\n";
  FILE* p = popen((std::string(UFP4_BINARY) + " run " + d + "/m.toml 2>&1").c_str(), "r");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  CHECK(WEXITSTATUS(pclose(p)) == 2);
  CHECK(out.find("m.toml:9: recipe.name: unknown recipe") != std::string::npos);  // the sweep line that names it
  CHECK(out.find("unknown recipe 'no_such_recipe'") != std::string::npos);
  CHECK(!is_dir(d + "/runs"));  // nothing ran, nothing written
}

TEST_CASE("one run reads its recipe and resolves its model once, from the manifest to the results file", "[train]") {
  const std::string d = temp_dir();
  const std::string path = tiny_manifest(d, "ufp4", 3);
  const int64_t loads = Recipe::loads(), models = model_resolutions();
  const test::CliResult r = test::run_cli("run " + path);
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(Recipe::loads() - loads == 1);
  CHECK(model_resolutions() - models == 1);
  // A child of the scheduler trains only the run its parent planned (--run-id), not what the manifest plans now.
  const test::CliResult other = test::run_cli("run " + path + " --only tiny_ufp4 --run-id 0123456789abcdef --force");
  CHECK(other.code == 2);
  CHECK(other.out.find("not the run 0123456789abcdef it was started for") != std::string::npos);
}
