#include "harness/train/run_queue.h"

#include <cstdio>
#include <iostream>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/data/data.h"
#include "harness/io/run_results.h"
#include "harness/plan/run_files.h"
#include "harness/dist/mps.h"
#include "harness/plan/packing.h"

namespace ufp4 {

namespace {

void train_here(const std::vector<RunPlan>& plans, const RunOptions& opt, RunQueueOutcome& q) {
  for (const auto& plan : plans) {
    try {
      const RunResult r = run_training(plan, opt);
      if (r.status == RunStatus::kStopped) ++q.stopped;
      if (!r.results_path.empty()) q.finished.push_back(r.results_path);
      if (r.status == RunStatus::kDiverged) q.failed.push_back(plan.name + " (diverged)");
      if (r.signalled) break;  // a signal stops the queue, not only this run
    } catch (const Error&) {
      throw;  // bad input: the user must fix it
    } catch (const std::exception& e) {
      if (opt.groups) throw;  // the ranks cannot go on to the next run apart
      std::string msg = e.what();
      if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
      log_warn("run " + plan.name + " failed: " + msg);
      q.failed.push_back(plan.name + " (" + msg + ")");
    }
  }
}

}  // namespace

void check_mps_option(const std::string& mps, int gpus) {
  if (mps != "auto" && mps != "on" && mps != "off") throw Error("--mps: '" + mps + "' (allowed: auto, on, off)");
  if (mps == "on" && gpus < 1) throw Error("--mps on goes with --gpus N (the runs of a GPU share it under MPS)");
  if (mps == "on" && !mps_available()) throw Error("--mps on: nvidia-cuda-mps-control is not on PATH (allowed: auto, on, off)");
}

void resolve_packing(const std::string& per_gpu, const std::string& mps, const std::vector<RunPlan>& runs, ScheduleOptions& o) {
  check_mps_option(mps, 1);
  const bool allow_mps = mps == "on" || (mps == "auto" && mps_available());
  std::vector<std::string> models;
  for (const auto& p : runs) models.push_back(p.model.name);
  const std::string table = repository_root() + "/results/bench/packing.csv";
  std::string why;
  bool measured_mps = false;
  if (per_gpu == "auto") {
    const PackingChoice c = choose_packing(models, table, allow_mps);
    o.per_gpu = c.per_gpu;
    measured_mps = c.mps;
    why = "--per-gpu auto: " + c.why;
    if (c.table_missing) {
      log_warn("run: --per-gpu auto: " + c.why);
      why = "--per-gpu auto: 1 run(s) a GPU (no packing table)";
    }
  } else {
    size_t used = 0;
    try {
      o.per_gpu = std::stoi(per_gpu, &used);
    } catch (const std::exception&) {
      o.per_gpu = 0;
    }
    if (o.per_gpu < 1 || used != per_gpu.size()) throw Error("--per-gpu: '" + per_gpu + "' (allowed: auto, or a whole number of runs a GPU, at least 1)");
    measured_mps = allow_mps && o.per_gpu > 1 && mps_measured_faster(models, o.per_gpu, table);
    why = std::to_string(o.per_gpu) + " run(s) a GPU";
  }
  o.mps = mps == "on" || (mps == "auto" && measured_mps);
  log_info("run: " + why + "; CUDA MPS " + (o.mps ? "on" : "off") + (mps == "auto" ? " (--mps auto)" : ""));
}

void prepare_plans(std::vector<RunPlan>& plans, const std::shared_ptr<ProcessGroups>& groups) {
  if (!groups || groups->world->rank() == 0)
    for (const auto& p : plans) ensure_data(p.data_source);
  if (groups) groups->world->barrier();
  std::string ids;
  for (auto& p : plans) {
    settle_data(p);
    ids += p.name + " " + p.run_id + "\n";
  }
  if (!groups) return;
  // Every rank learns every rank's verdict, so that all of them stop with the same message.
  Communicator& world = *groups->world;
  const std::string lead = world.broadcast_bytes(ids, 0);
  std::string mine;
  if (lead != ids) {
    std::istringstream a(lead), b(ids);
    std::string theirs, here;
    while (std::getline(a, theirs) && std::getline(b, here) && theirs == here) {
    }
    mine = "rank " + std::to_string(world.rank()) + " planned '" + here + "' where rank 0 planned '" + theirs + "'";
  }
  std::string differ;
  for (int r = 1; r < world.size(); ++r)
    if (const std::string v = world.broadcast_bytes(mine, r); !v.empty()) differ += (differ.empty() ? "" : "; ") + v;
  if (!differ.empty()) throw Error("run: the ranks planned different runs (" + differ + "): every rank must see the same manifests, recipes and data");
}

void set_time_limit(const std::string& command, double seconds, int gpus, ScheduleOptions& o) {
  if (!(seconds >= 0 && seconds <= 1e8)) throw Error(command + ": --time-limit: " + std::to_string(seconds) + " (allowed: 0 to 1e8 seconds; 0: none)");
  if (seconds > 0 && gpus <= 0) throw Error(command + ": --time-limit goes with --gpus N (the scheduler of child processes keeps the time)");
  if (seconds > 0)
    o.deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

RunQueueOutcome train_queue(const std::vector<RunPlan>& plans, const std::function<std::string(size_t)>& child_command, const RunQueueOptions& o) {
  RunQueueOutcome q;
  if (o.gpus <= 0) {
    train_here(plans, o.run, q);
    return q;
  }
  std::vector<ScheduledJob> jobs;
  for (size_t i = 0; i < plans.size(); ++i) {
    const RunPlan& p = plans[i];
    make_dirs(p.out_dir + "/logs");
    jobs.push_back({p.name, child_command(i), p.out_dir + "/logs/" + p.name + ".log", p.model.name, file_exists(p.checkpoint.path)});
  }
  ScheduleOptions s = o.schedule;
  s.gpus = o.gpus;
  const std::vector<JobResult> res = run_scheduled_jobs(jobs, s);
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string found = find_results(plans[i]);
    if (res[i].status == JobStatus::kDone && !found.empty()) q.finished.push_back(found);
    else if (res[i].status == JobStatus::kStopped || res[i].status == JobStatus::kNotStarted) ++q.stopped;
    else q.failed.push_back(plans[i].name + " (" + (res[i].detail.empty() ? "no results" : res[i].detail) + ")");
  }
  return q;
}

void print_queue_outcome(const RunQueueOutcome& q, size_t runs, const std::string& command) {
  if (!q.finished.empty()) {
    std::printf("%-40s %-30s %-12s %8s %22s %12s %10s\n", "run", "recipe", "model", "steps", "train loss (last K)", "val loss", "diverged");
    for (const auto& f : q.finished) {
      const RunResults r = read_run_results(f, /*with_curves=*/false);
      char train[40];
      std::snprintf(train, sizeof train, "%.4f (K = %lld)", r.mean_loss_last_k, static_cast<long long>(r.last_k));
      // The run by this manifest's name (its file's), and the name it was made under where it was reused.
      const std::string base = f.substr(f.find_last_of('/') + 1);
      std::string name = base.size() > 20 ? base.substr(0, base.size() - 20) : base;
      if (name != r.run_name) name += " (= " + r.run_name + ")";
      std::printf("%-40s %-30s %-12s %8.0f %22s %12.4f %10s\n", name.c_str(), r.recipe.c_str(), r.model.c_str(), static_cast<double>(r.steps_done),
                  train, r.final_eval_loss, r.diverged ? "yes" : "no");
    }
    std::printf("train loss: mean training loss of the last K steps (the last tenth, up to 1,000); val loss: the final validation loss\n");
  }
  if (!q.failed.empty()) {
    std::cerr << "ufp4 " << command << ": " << q.failed.size() << " of " << runs << " runs did not complete:\n";
    for (const auto& f : q.failed) std::cerr << "  " << f << "\n";
  }
}

}  // namespace ufp4
