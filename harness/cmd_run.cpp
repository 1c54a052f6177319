// `ufp4 run MANIFEST...`: trains what is missing, resumes what is partial, skips what exists.
#include <cstdio>
#include <iostream>

#include "harness/array_io.h"

#include "harness/cli.h"
#include "harness/error.h"
#include "harness/log.h"
#include "harness/trainer.h"

namespace ufp4 {

int cmd_run(const std::vector<std::string>& args) {
  std::vector<std::string> manifests;
  RunOptions opt;
  po::options_description d("options");
  d.add_options()
      ("manifests", po::value(&manifests)->multitoken(), "run manifests (.toml)")
      ("force", po::bool_switch(&opt.force), "re-run even when results exist")
      ("device", po::value(&opt.device), "override the manifests' device: auto, cpu, cuda")
      ("stop-after", po::value(&opt.stop_after)->default_value(-1), "checkpoint and stop after this step (resume tests)");
  po::positional_options_description pos;
  pos.add("manifests", -1);
  auto vm = parse_command("run", "MANIFEST ... [--force]", d, args, &pos);
  if (!vm) return 0;
  if (manifests.empty()) throw Error("run: give at least one manifest");
  // Validate everything before anything runs.
  std::vector<RunManifest> ms;
  for (const auto& p : manifests) ms.push_back(RunManifest::load(p));
  std::vector<std::string> failed, finished;
  int stopped = 0, diverged = 0;
  for (const auto& m : ms) {
    try {
      RunResult r = run_training(m, opt);
      if (!r.results_path.empty()) finished.push_back(r.results_path);
      if (r.status == RunStatus::kStopped) ++stopped;
      if (r.status == RunStatus::kDiverged) { ++diverged; failed.push_back(m.path + " (diverged)"); }
    } catch (const Error&) {
      throw;  // bad input: the user must fix it
    } catch (const std::exception& e) {
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
      log_warn("run " + m.name + " failed: " + msg);
      failed.push_back(m.path + " (" + msg + ")");
    }
  }
  if (!finished.empty()) {
    std::printf("%-28s %-14s %-12s %8s %12s %12s %10s\n", "run", "recipe", "model", "steps", "train loss", "val loss", "diverged");
    for (const auto& f : finished) {
      auto a = read_h5_string_attrs(f);
      std::printf("%-28s %-14s %-12s %8.0f %12.4f %12.4f %10s\n", a["run_name"].c_str(), a["recipe"].c_str(), a["model"].c_str(),
                  read_h5_double_attr(f, "steps_done"), read_h5_double_attr(f, "mean_loss_last_k"),
                  read_h5_double_attr(f, "final_eval_loss"), read_h5_double_attr(f, "diverged") != 0 ? "yes" : "no");
    }
  }
  if (!failed.empty()) {
    std::cerr << "ufp4 run: " << failed.size() << " of " << ms.size() << " runs did not complete:\n";
    for (const auto& f : failed) std::cerr << "  " << f << "\n";
    return kExitRuntime;
  }
  return stopped ? 130 : 0;
}

}  // namespace ufp4
