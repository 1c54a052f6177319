// Deterministic GPU training: the same manifest twice in one process, and stopped-then-resumed, gives
// the same bits: loss, grad norm, eval loss, telemetry and the final weights (their SHA-256), for the
// dense and the MoE test models and a 4-bit recipe with stochastic rounding and RHT.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "harness/io/labelled_table.h"
#include "harness/io/run_results.h"
#include "harness/train/determinism.h"
#include "harness/plan/run_manifest.h"
#include "harness/train/trainer.h"
#include "tests/catch.h"
#include "tests/helpers.h"
#include "tests/run_helpers.h"

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

// A run that must complete; its results file.
std::string completed(const RunManifest& m, const RunOptions& o) {
  const RunResult r = test::train_manifest(m, o);
  REQUIRE(r.status == RunStatus::kCompleted);
  return r.results_path;
}

// The run stopped after step `after` (a checkpoint), then resumed by a plain run; the resumed results.
std::string stopped_and_resumed(const RunManifest& m, int64_t after) {
  RunOptions stop;
  stop.stop_after = after;
  REQUIRE(test::train_manifest(m, stop).status == RunStatus::kStopped);
  return completed(m, RunOptions{});
}

}  // namespace

TEST_CASE("GPU training is bit-identical across reruns and a stop-and-resume (tiny, tiny-moe)", "[train][cuda]") {
  UFP4_NEED_GPU();
  const std::string d = test::temp_dir();
  for (const char* model : {"tiny", "tiny-moe"}) {
    const RunManifest m = gpu_manifest(d, "ufp4", 30, model, 5);
    INFO(model);
    const std::string first = completed(m, forced());
    const RunResults r = read_run_results(first, /*with_curves=*/false);
    CHECK(r.device_name != "cpu");
    CHECK(r.deterministic);
    const Outcome a = outcome(first);
    const std::string second = completed(m, forced());
    require_identical(a, outcome(second));
    // Stopped after step 13 (a checkpoint), then resumed by a plain run.
    std::remove(second.c_str());
    require_identical(a, outcome(stopped_and_resumed(m, 13)));
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
      const Outcome a = outcome(completed(m, forced()));
      std::string filled;
      {
        struct FillOn {  // off again even when the run throws
          FillOn() { set_fill_uninitialized_memory(true); }
          ~FillOn() { set_fill_uninitialized_memory(false); }
        } fill;
        filled = completed(m, forced());
      }
      require_identical(a, outcome(filled));
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
      m.cuda_graph = false;
      const std::string plain = completed(m, forced());
      CHECK(read_run_results(plain, false).cuda_graph == "off: train.cuda_graph = false");
      const Outcome a = outcome(plain);
      m.cuda_graph = true;
      const std::string graphed = completed(m, forced());
      const std::string how = read_run_results(graphed, false).cuda_graph;
      INFO(how);
      CHECK(how.rfind("captured at step 2, ", 0) == 0);
      require_identical(a, outcome(graphed));
      std::remove(graphed.c_str());
      const std::string resumed = stopped_and_resumed(m, 11);
      CHECK(read_run_results(resumed, false).cuda_graph.rfind("captured at step 13, ", 0) == 0);
      require_identical(a, outcome(resumed));
    }
}

// The signal chain of `ufp4 analyze capture` (harness/train/stream_probe.h) on the GPU, where the residual adds and
// norms run fused: a BF16 run's two passes are one computation, exact at every point of the stream forward and
// backward; and the passes leave training as it was, a run analysed with them in the bits of the same run trained
// plainly, its CUDA graph replaying between the captured steps.
TEST_CASE("the signal chain on the GPU: BF16 exact at every point, training bits unchanged (tiny, tiny-moe; bf16, ufp4)", "[train][cuda]") {
  UFP4_NEED_GPU();
  const std::string d = test::temp_dir();
  for (const char* model : {"tiny", "tiny-moe"})
    for (const char* recipe : {"bf16", "ufp4"}) {
      INFO(model << ", " << recipe);
      const std::string path = test::tiny_manifest(d, recipe, 16, "steps = 16\ndevice = \"cuda\"\n[capture]\nsteps = [5, 15]\nlayers = [\"layers.*\"]\ntokens = 0\n", model);
      auto a = test::run_cli("analyze capture " + path + " --force");
      INFO(a.out);
      REQUIRE(a.code == 0);
      const RunPlan p = test::planned(RunManifest::load(path));
      const LabelledTable chain = read_labelled_table(p.capture.dir + "/step15.tensors.h5", "chain");
      REQUIRE(chain.rows() == 2 * static_cast<size_t>(p.model.n_layers + 3));
      for (size_t i = 0; i < chain.rows(); ++i) {
        INFO(chain.labels[i][0] << " " << chain.labels[i][1]);
        REQUIRE(std::isfinite(chain.at(i, 0)));
        if (std::string(recipe) == "bf16") {
          CHECK(chain.at(i, 0) == 1.0);
          CHECK(chain.at(i, 1) == 0.0);
        }
      }
      const Outcome analysed = outcome(p.results_path);
      RunManifest plain = RunManifest::load(path);
      plain.capture_steps.clear();
      require_identical(analysed, outcome(completed(plain, forced())));
    }
}
