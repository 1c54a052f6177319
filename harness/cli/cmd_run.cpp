// `ufp4 run MANIFEST...`: trains what is missing, resumes what is partial, skips what exists.
// Manifests with [sweep] or [ablation] expand into several runs; `--gpus N` runs them concurrently,
// one child process per GPU slot (CUDA_VISIBLE_DEVICES), and a failed run does not stop the others.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <set>
#include <thread>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/cli/cli.h"
#include "harness/data/data.h"
#include "harness/io/run_results.h"
#include "harness/train/trainer.h"

namespace ufp4 {

namespace {

// --gpus: SIGINT/SIGTERM make the parent start no new run, pass the signal on to every child (each
// checkpoints at its next step and exits 130) and wait for them, so that when `ufp4 run` returns no
// child is still writing.
std::atomic<int> g_stop_signal{0};
void on_stop_signal(int s) { g_stop_signal = s; }

// Starts `sh -c 'exec CMD'` (the shell sets up redirections, then becomes the run) and returns its pid.
pid_t spawn_shell(const std::string& cmd) {
  const std::string exec_cmd = "exec " + cmd;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", exec_cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return status;
}


void print_summary(const std::vector<std::string>& files) {
  if (files.empty()) return;
  std::printf("%-40s %-30s %-12s %8s %12s %12s %10s\n", "run", "recipe", "model", "steps", "train loss", "val loss", "diverged");
  for (const auto& f : files) {
    const RunResults r = read_run_results(f, /*with_curves=*/false);
    std::printf("%-40s %-30s %-12s %8.0f %12.4f %12.4f %10s\n", r.run_name.c_str(), r.recipe.c_str(), r.model.c_str(),
                static_cast<double>(r.steps_done), r.mean_loss_last_k, r.final_eval_loss, r.diverged ? "yes" : "no");
  }
}

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
  std::vector<std::string> manifests;
  std::string only;
  int gpus = 0, per_gpu = 1;
  RunOptions opt;
  po::options_description d("options");
  d.add_options()
      ("manifests", po::value(&manifests)->multitoken(), "run manifests (.toml)")
      ("force", po::bool_switch(&opt.force), "re-run even when results exist")
      ("device", po::value(&opt.device), "override the manifests' device: auto, cpu, cuda")
      ("gpus", po::value(&gpus)->default_value(0), "run independent runs concurrently on this many GPUs (0: one after another here)")
      ("per-gpu", po::value(&per_gpu)->default_value(1), "concurrent runs per GPU with --gpus (small, launch-bound models)")
      ("only", po::value(&only), "run only the run of this name (one member of a sweep or ablation)")
      ("stop-after", po::value(&opt.stop_after)->default_value(-1), "checkpoint and stop after this step (resume tests)");
  po::positional_options_description pos;
  pos.add("manifests", -1);
  auto vm = parse_command("run", "MANIFEST ... [--gpus N] [--force]", d, args, &pos);
  if (!vm) return 0;
  if (manifests.empty()) throw Error("run: give at least one manifest");
  if (gpus < 0 || per_gpu < 1) throw Error("run: --gpus must be >= 0 and --per-gpu >= 1");
  // Validate and expand everything before anything runs.
  std::vector<RunManifest> ms;
  for (const auto& p : manifests)
    for (auto& m : RunManifest::expand(p))
      if (only.empty() || m.name == only) ms.push_back(m);
  if (ms.empty()) throw Error("run: no run named '" + only + "' in the given manifests");
  // Every run's model and recipe must resolve before the first run starts.
  for (const auto& m : ms) m.check_resolvable();

  // Data first: run ids name the data by its manifest's hash, so they are final only once it exists.
  for (const auto& m : ms) ensure_data(m);
  // Every run planned (model, recipe and data resolved; vocabulary and epochs checked) before the first starts.
  std::vector<RunPlan> plans;
  for (const auto& m : ms) plans.push_back(plan_run(m));

  std::vector<std::string> failed, finished;
  int stopped = 0;
  if (gpus > 0) {
    std::mutex mu;
    size_t next = 0;
    std::vector<int> load(static_cast<size_t>(gpus), 0);  // runs in flight per GPU: each new run goes to the least loaded
    std::set<pid_t> children;                             // the runs in flight, to pass a stop signal on
    const std::string exe = executable_dir() + "/ufp4";
    auto worker = [&]() {
      for (;;) {
        size_t i;
        int gpu;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (next >= ms.size()) return;
          i = next++;
          gpu = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
          ++load[static_cast<size_t>(gpu)];
        }
        const RunManifest& m = ms[i];
        make_dirs(m.out_dir + "/logs");
        std::string cmd = "env CUDA_VISIBLE_DEVICES=" + std::to_string(gpu) + " " + shell_quote(exe) + " run " + shell_quote(m.path) + " --only " + shell_quote(m.name) +
                          (opt.force ? " --force" : "") + (opt.device.empty() ? "" : " --device " + shell_quote(opt.device)) +
                          (opt.stop_after >= 0 ? " --stop-after " + std::to_string(opt.stop_after) : "") + " > " +
                          shell_quote(m.out_dir + "/logs/" + m.name + ".log") + " 2>&1";
        pid_t pid;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (g_stop_signal != 0) {
            --load[static_cast<size_t>(gpu)];
            ++stopped;  // not started: the same command runs it later
            continue;
          }
          pid = spawn_shell(cmd);
          if (pid > 0) children.insert(pid);
        }
        log_info("run " + m.name + ": started on GPU " + std::to_string(gpu) + " (log " + m.out_dir + "/logs/" + m.name + ".log)");
        const int rc = pid > 0 ? wait_child(pid) : -1;
        std::lock_guard<std::mutex> lock(mu);
        children.erase(pid);
        --load[static_cast<size_t>(gpu)];
        const std::string res = find_results(m);
        if (rc == 0 && !res.empty()) finished.push_back(res);
        else if ((WIFEXITED(rc) && WEXITSTATUS(rc) == 130) || (g_stop_signal != 0 && WIFSIGNALED(rc))) ++stopped;  // checkpointed (--stop-after or a signal): ufp4 run resumes it
        else failed.push_back(m.name + " (exit " + std::to_string(WEXITSTATUS(rc)) + ", see " + m.out_dir + "/logs/" + m.name + ".log)");
      }
    };
    auto old_int = std::signal(SIGINT, on_stop_signal), old_term = std::signal(SIGTERM, on_stop_signal);
    std::atomic<bool> done{false};
    // Passes a stop signal on to the children once (they may have had it already from the process group).
    std::thread forwarder([&]() {
      bool forwarded = false;
      while (!done) {
        if (g_stop_signal != 0 && !forwarded) {
          std::lock_guard<std::mutex> lock(mu);
          log_info("run: signal " + std::to_string(g_stop_signal.load()) + ": stopping " + std::to_string(children.size()) +
                   " run(s) at their next step (each checkpoints; the same command resumes them)");
          for (pid_t c : children) ::kill(c, SIGTERM);
          forwarded = true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    std::vector<std::thread> pool;
    for (int k = 0; k < gpus * per_gpu; ++k) pool.emplace_back(worker);
    for (auto& t : pool) t.join();
    done = true;
    forwarder.join();
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  } else {
    for (const auto& plan : plans) {
      const RunManifest& m = plan.manifest;
      try {
        RunResult r = run_training(plan, opt);
        if (r.status == RunStatus::kStopped) ++stopped;
        if (!r.results_path.empty()) finished.push_back(r.results_path);
        if (r.status == RunStatus::kDiverged) failed.push_back(m.name + " (diverged)");
      } catch (const Error&) {
        throw;  // bad input: the user must fix it
      } catch (const std::exception& e) {
        std::string msg = e.what();
        if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
        log_warn("run " + m.name + " failed: " + msg);
        failed.push_back(m.name + " (" + msg + ")");
      }
    }
  }
  print_summary(finished);
  if (!failed.empty()) {
    std::cerr << "ufp4 run: " << failed.size() << " of " << ms.size() << " runs did not complete:\n";
    for (const auto& f : failed) std::cerr << "  " << f << "\n";
    return kExitRuntime;
  }
  return stopped ? 130 : 0;
}

}  // namespace ufp4
