// `ufp4 run MANIFEST...`: trains what is missing, resumes what is partial, skips what exists.
// Manifests with [sweep] or [ablation] expand into several runs; `--gpus N` runs them concurrently,
// one child process per GPU slot (CUDA_VISIBLE_DEVICES), and a failed run does not stop the others.
// Data parallelism: under torchrun or srun (harness/dist/launch_env.h), or with `--nproc-per-node N`
// (which starts the N ranks itself), every rank trains each run with the others, one after another.
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
#include "harness/dist/launch_env.h"
#include "harness/dist/local_launch.h"
#include "harness/dist/process_groups.h"
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
  int gpus = 0, per_gpu = 1, nproc = 0, dist_timeout = 900;
  double bucket_mb = 25;
  bool replicate_optimizer = false;
  std::string backend = "auto";
  RunOptions opt;
  po::options_description d("options");
  d.add_options()
      ("manifests", po::value(&manifests)->multitoken(), "run manifests (.toml)")
      ("force", po::bool_switch(&opt.force), "re-run even when results exist")
      ("device", po::value(&opt.device), "override the manifests' device: auto, cpu, cuda")
      ("gpus", po::value(&gpus)->default_value(0), "run independent runs concurrently on this many GPUs (0: one after another here)")
      ("per-gpu", po::value(&per_gpu)->default_value(1), "concurrent runs per GPU with --gpus (small, launch-bound models)")
      ("only", po::value(&only), "run only the run of this name (one member of a sweep or ablation)")
      ("stop-after", po::value(&opt.stop_after)->default_value(-1), "checkpoint and stop after this step (resume tests)")
      ("nproc-per-node", po::value(&nproc)->default_value(0), "start this many data-parallel ranks here (as torchrun would) and train each run with all of them")
      ("backend", po::value(&backend)->default_value("auto"), "data-parallel collectives: auto (nccl on CUDA, gloo on CPU), nccl, gloo")
      ("dist-timeout", po::value(&dist_timeout)->default_value(900), "seconds a rank waits for the others before every rank fails")
      ("replicate-optimizer", po::bool_switch(&replicate_optimizer), "data parallel: every rank keeps the whole AdamW state (default: sharded, ZeRO-1)")
      ("bucket-mb", po::value(&bucket_mb)->default_value(25), "data parallel: gradient bucket size, MB");
  po::positional_options_description pos;
  pos.add("manifests", -1);
  auto vm = parse_command("run", "MANIFEST ... [--gpus N] [--force]", d, args, &pos);
  if (!vm) return 0;
  if (manifests.empty()) throw Error("run: give at least one manifest");
  if (gpus < 0 || per_gpu < 1) throw Error("run: --gpus must be >= 0 and --per-gpu >= 1");
  if (nproc < 0 || dist_timeout < 1 || !(bucket_mb > 0)) throw Error("run: --nproc-per-node must be >= 0, --dist-timeout >= 1 and --bucket-mb > 0");
  const LaunchEnv env = read_launch_env();
  if ((nproc > 0 || env.distributed()) && gpus > 0)
    throw Error("run: --gpus runs independent runs side by side; data-parallel ranks (--nproc-per-node, torchrun, srun) train each run together: use one");
  if (nproc > 0 && env.distributed()) throw Error("run: --nproc-per-node inside a launched rank (" + env.describe() + "): launch one way");
  // Validate and expand everything before anything runs.
  std::vector<RunManifest> ms;
  for (const auto& p : manifests)
    for (auto& m : RunManifest::expand(p))
      if (only.empty() || m.name == only) ms.push_back(m);
  if (ms.empty()) throw Error("run: no run named '" + only + "' in the given manifests");
  // Every run's model and recipe must resolve before the first run starts.
  for (const auto& m : ms) m.check_resolvable();

  if (nproc > 0 || env.distributed())
    for (const auto& m : ms) check_data_parallel_batch(m, nproc > 0 ? nproc : env.world_size);
  if (nproc > 0) {
    // Prepare the data once, here, and plan every run (bad input fails here, before any rank starts),
    // then start the ranks with this command minus --nproc-per-node.
    for (const auto& m : ms) ensure_data(m);
    for (const auto& m : ms) plan_run(m);
    std::vector<std::string> child{executable_dir() + "/ufp4", "run"};
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--nproc-per-node") { ++i; continue; }
      if (args[i].rfind("--nproc-per-node=", 0) == 0) continue;
      child.push_back(args[i]);
    }
    return launch_local_ranks(nproc, child, std::chrono::seconds(30));
  }
  if (env.distributed()) {
    // Every rank trains on the same kind of device; CUDA ranks take GPU LOCAL_RANK (modulo the GPUs seen).
    bool cuda = torch::cuda::is_available();
    for (const auto& m : ms) cuda = cuda && (opt.device.empty() ? m.device : opt.device) != "cpu";
    if (cuda) use_local_gpu(env.local_rank);
    if (env.rank != 0) set_log_level(LogLevel::kQuiet);  // rank 0 speaks for the run; warnings still show
    opt.groups = std::make_shared<ProcessGroups>(env, DistOptions{backend, std::chrono::seconds(dist_timeout)}, cuda);
    opt.data_parallel.shard_optimizer = !replicate_optimizer;
    opt.data_parallel.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
    log_info("run: " + env.describe() + ", backend " + opt.groups->backend());
  }
  const bool lead = !opt.groups || opt.groups->world->rank() == 0;
  // Data first: run ids name the data by its manifest's hash, so they are final only once it exists.
  // Rank 0 prepares it while the others wait.
  if (lead)
    for (const auto& m : ms) ensure_data(m);
  if (opt.groups) opt.groups->world->barrier();
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
        // Appended: a run stopped and resumed keeps the log of each of its processes.
        std::string cmd = "env CUDA_VISIBLE_DEVICES=" + std::to_string(gpu) + " " + shell_quote(exe) + " run " + shell_quote(m.path) + " --only " + shell_quote(m.name) +
                          (opt.force ? " --force" : "") + (opt.device.empty() ? "" : " --device " + shell_quote(opt.device)) +
                          (opt.stop_after >= 0 ? " --stop-after " + std::to_string(opt.stop_after) : "") + " >> " +
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
        if (opt.groups) throw;  // the ranks cannot go on to the next run apart
        std::string msg = e.what();
        if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
        log_warn("run " + m.name + " failed: " + msg);
        failed.push_back(m.name + " (" + msg + ")");
      }
    }
  }
  if (lead) print_summary(finished);
  if (!failed.empty()) {
    std::cerr << "ufp4 run: " << failed.size() << " of " << ms.size() << " runs did not complete:\n";
    for (const auto& f : failed) std::cerr << "  " << f << "\n";
    return kExitRuntime;
  }
  return stopped ? 130 : 0;
}

}  // namespace ufp4
