// Deterministic GPU training: the same manifest twice in one process, and stopped-then-resumed, gives
// the same bits: loss, grad norm, eval loss, telemetry and the final weights (their SHA-256), for the
// dense and the MoE test models and a 4-bit recipe with stochastic rounding and RHT.
#include <cstring>
#include <string>
#include <vector>

#include "harness/io/run_results.h"
#include "harness/train/determinism.h"
#include "harness/train/run_manifest.h"
#include "harness/train/trainer.h"
#include "tests/catch.h"

using namespace ufp4;

namespace {

struct Outcome {
  std::vector<std::string> names;           // the results' named curves (harness/io/run_results.h)
  std::vector<std::vector<double>> series;
  std::string weights;
};

Outcome outcome(const std::string& h5) {
  Outcome o;
  const RunResults r = read_run_results(h5);
  for (const auto& c : named_curves(r)) {
    o.names.push_back(c.name);
    o.series.push_back(c.values);
  }
  o.weights = r.weights_sha256;
  return o;
}

void require_identical(const Outcome& a, const Outcome& b) {
  for (size_t i = 0; i < a.series.size(); ++i) {
    INFO(a.names[i]);
    REQUIRE(a.series[i].size() == b.series[i].size());
    for (size_t k = 0; k < a.series[i].size(); ++k) {
      INFO("index " << k << ": " << a.series[i][k] << " vs " << b.series[i][k]);
      REQUIRE(std::memcmp(&a.series[i][k], &b.series[i][k], sizeof(double)) == 0);
    }
  }
  CHECK(!a.weights.empty());
  CHECK(a.weights == b.weights);
}

// A test manifest on the GPU: telemetry every `telemetry` steps, no periodic checkpoint.
RunManifest gpu_manifest(const std::string& dir, const char* recipe, int steps, const char* model, int telemetry) {
  RunManifest m = RunManifest::load(test::tiny_manifest(dir, recipe, steps, "", model));
  m.device = "cuda";
  m.telemetry_every = telemetry;
  m.checkpoint_every = 0;
  return m;
}

RunOptions forced() {
  RunOptions o;
  o.force = true;
  return o;
}

}  // namespace

TEST_CASE("GPU training is bit-identical across reruns and a stop-and-resume (tiny, tiny-moe)", "[train][cuda]") {
  UFP4_NEED_GPU();
  const std::string d = test::temp_dir();
  for (const char* model : {"tiny", "tiny-moe"}) {
    const std::string path = test::tiny_manifest(d, "ufp4", 30, "", model);
    RunManifest m = RunManifest::load(path);
    m.device = "cuda";
    m.telemetry_every = 5;
    m.checkpoint_every = 0;
    INFO(model);
    RunOptions force;
    force.force = true;
    RunResult first = run_training(m, force);
    REQUIRE(first.status == RunStatus::kCompleted);
    const RunResults r = read_run_results(first.results_path, /*with_curves=*/false);
    CHECK(r.device_name != "cpu");
    CHECK(r.deterministic);
    const Outcome a = outcome(first.results_path);
    RunResult second = run_training(m, force);
    REQUIRE(second.status == RunStatus::kCompleted);
    require_identical(a, outcome(second.results_path));
    // Stopped after step 13 (a checkpoint), then resumed by a plain run.
    std::remove(second.results_path.c_str());
    RunOptions stop;
    stop.stop_after = 13;
    REQUIRE(run_training(m, stop).status == RunStatus::kStopped);
    RunResult resumed = run_training(m, RunOptions{});
    REQUIRE(resumed.status == RunStatus::kCompleted);
    require_identical(a, outcome(resumed.results_path));
  }
}

// Deterministic mode leaves new memory unfilled (harness/train/determinism.h). That is sound only while
// no kernel of the step reads memory nobody wrote: with the fill on, such a read would see NaN. So a
// run with the fill on must give the same bits as one without.
TEST_CASE("filling new memory changes no bit of a GPU run (tiny, tiny-moe; bf16, ufp4)", "[train][cuda]") {
  UFP4_NEED_GPU();
  const std::string d = test::temp_dir();
  for (const char* model : {"tiny", "tiny-moe"})
    for (const char* recipe : {"bf16", "ufp4"}) {
      const RunManifest m = gpu_manifest(d, recipe, 20, model, 5);
      INFO(model << ", " << recipe);
      const RunOptions force = forced();
      RunResult unfilled = run_training(m, force);
      REQUIRE(unfilled.status == RunStatus::kCompleted);
      const Outcome a = outcome(unfilled.results_path);
      RunResult filled;
      {
        struct FillOn {  // off again even when the run throws
          FillOn() { set_fill_uninitialized_memory(true); }
          ~FillOn() { set_fill_uninitialized_memory(false); }
        } fill;
        filled = run_training(m, force);
      }
      REQUIRE(filled.status == RunStatus::kCompleted);
      require_identical(a, outcome(filled.results_path));
    }
}

// A CUDA-graph step (harness/train/step_graph.h) replays the launches of its capture; what changes
// from step to step reaches it through device memory (tokens, the SR step offset). Its runs must give
// the bits of uncaptured runs: two micro-batches a step, telemetry steps (uncaptured) between replays,
// the 4-bit recipe's SR and RHT, and a stop-and-resume that captures again.
TEST_CASE("a CUDA-graph step equals the uncaptured step (tiny, tiny-moe; bf16, ufp4)", "[train][cuda]") {
  UFP4_NEED_GPU();
  const std::string d = test::temp_dir();
  for (const char* model : {"tiny", "tiny-moe"})
    for (const char* recipe : {"bf16", "ufp4"}) {
      RunManifest m = gpu_manifest(d, recipe, 24, model, 7);
      INFO(model << ", " << recipe);
      const RunOptions force = forced();
      m.cuda_graph = false;
      RunResult plain = run_training(m, force);
      REQUIRE(plain.status == RunStatus::kCompleted);
      CHECK(read_run_results(plain.results_path, false).cuda_graph == "off: train.cuda_graph = false");
      const Outcome a = outcome(plain.results_path);
      m.cuda_graph = true;
      RunResult graphed = run_training(m, force);
      REQUIRE(graphed.status == RunStatus::kCompleted);
      const std::string how = read_run_results(graphed.results_path, false).cuda_graph;
      INFO(how);
      CHECK(how.rfind("captured at step 2, ", 0) == 0);
      require_identical(a, outcome(graphed.results_path));
      std::remove(graphed.results_path.c_str());
      RunOptions stop;
      stop.stop_after = 11;
      REQUIRE(run_training(m, stop).status == RunStatus::kStopped);
      RunResult resumed = run_training(m, RunOptions{});
      REQUIRE(resumed.status == RunStatus::kCompleted);
      CHECK(read_run_results(resumed.results_path, false).cuda_graph.rfind("captured at step 13, ", 0) == 0);
      require_identical(a, outcome(resumed.results_path));
    }
}
