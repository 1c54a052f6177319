// `ufp4 run MANIFEST...`: trains what is missing, resumes what is partial, skips what exists.
// Manifests with [sweep] or [ablation] expand into several runs; `--gpus N` runs them concurrently,
// one child process per GPU slot (CUDA_VISIBLE_DEVICES), and a failed run does not stop the others.
// Data parallelism: under torchrun or srun (harness/dist/launch_env.h), or with `--nproc-per-node N`
// (which starts the N ranks itself), every rank trains each run with the others, one after another;
// with `--ep E` (or train.expert_parallel) a MoE model's routed experts are split over blocks of E ranks.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/cli/cli.h"
#include "harness/dist/launch_env.h"
#include "harness/dist/local_launch.h"
#include "harness/dist/process_groups.h"
#include "harness/io/run_results.h"
#include "harness/plan/run_plan.h"
#include "harness/train/run_queue.h"
#include "harness/train/train_device.h"
#include "harness/train/trainer.h"
#include "models/quant_ops.h"

namespace ufp4 {

int cmd_run(const std::vector<std::string>& args) {
  std::vector<std::string> manifests;
  std::string only, expect_id;
  int gpus = 0, nproc = 0, dist_timeout = 900, ep = 0;
  std::string per_gpu = "auto", mps = "auto";
  double bucket_mb = 25;
  bool replicate_optimizer = false;
  std::string backend = "auto";
  RunOptions opt;
  ScheduleOptions sched;
  double time_limit = 0;
  po::options_description d("options");
  d.add_options()
      ("manifests", po::value(&manifests)->multitoken(), "run manifests (.toml)")
      ("force", po::bool_switch(&opt.force), "re-run even when results exist")
      ("device", po::value(&opt.device), "override the manifests' device: auto, cpu, cuda")
      ("gpus", po::value(&gpus)->default_value(0), "run independent runs concurrently on this many GPUs (0: one after another here)")
      ("per-gpu", po::value(&per_gpu)->default_value("auto"), "concurrent runs per GPU with --gpus: a number, or auto (the fastest measured for the runs' model, results/bench/packing.md)")
      ("mps", po::value(&mps)->default_value("auto"), "with --gpus: the runs of a GPU under CUDA MPS: on, off, or auto (as measured faster for the runs' model)")
      ("stall-timeout", po::value(&sched.stall_seconds)->default_value(300), "with --gpus: seconds without progress after which a run is stopped and started again once")
      ("stop-grace", po::value(&sched.stop_grace_seconds)->default_value(40), "with --gpus: seconds a stopped run may take to checkpoint before it is killed")
      ("time-limit", po::value(&time_limit)->default_value(0), "with --gpus: stop every run this many seconds from the start (each checkpoints), and before that start no run that a finished run of its model says would not end in time (0: none)")
      ("only", po::value(&only), "run only the run of this name (one member of a sweep or ablation)")
      ("run-id", po::value(&expect_id), "with --only: refuse unless the run plans as this run id (the scheduler's children)")
      ("stop-after", po::value(&opt.stop_after)->default_value(-1), "checkpoint and stop after this step (resume tests)")
      ("nproc-per-node", po::value(&nproc)->default_value(0), "start this many data-parallel ranks here (as torchrun would) and train each run with all of them")
      ("backend", po::value(&backend)->default_value("auto"), "data-parallel collectives: auto (nccl on CUDA, gloo on CPU), nccl, gloo")
      ("dist-timeout", po::value(&dist_timeout)->default_value(900), "seconds a rank waits for the others before every rank fails")
      ("replicate-optimizer", po::bool_switch(&replicate_optimizer), "data parallel: every rank keeps the whole AdamW state (default: sharded, ZeRO-1)")
      ("bucket-mb", po::value(&bucket_mb)->default_value(25), "data parallel: gradient bucket size, MB")
      ("ep", po::value(&ep)->default_value(0), "expert parallelism: ranks that split a MoE model's routed experts, a divisor of the ranks and the experts (overrides train.expert_parallel; 0: the manifest's)");
  po::positional_options_description pos;
  pos.add("manifests", -1);
  auto vm = parse_command("run", "MANIFEST ... [--gpus N] [--force]", d, args, &pos);
  if (!vm) return 0;
  if (manifests.empty()) throw Error("run: give at least one manifest");
  if (gpus < 0) throw Error("run: --gpus must be >= 0");
  set_time_limit("run", time_limit, gpus, sched);
  check_mps_option(mps, gpus);
  if (nproc < 0 || dist_timeout < 1 || !(bucket_mb > 0) || ep < 0)
    throw Error("run: --nproc-per-node must be >= 0, --dist-timeout >= 1, --bucket-mb > 0 and --ep >= 0");
  const LaunchEnv env = read_launch_env();
  if ((nproc > 0 || env.distributed()) && gpus > 0)
    throw Error("run: --gpus runs independent runs side by side; data-parallel ranks (--nproc-per-node, torchrun, srun) train each run together: use one");
  if (nproc > 0 && env.distributed()) throw Error("run: --nproc-per-node inside a launched rank (" + env.describe() + "): launch one way");
  // Parse, expand and plan every run (its model and recipe resolved, once) before anything runs.
  std::vector<RunPlan> plans;
  for (const auto& p : manifests)
    for (const auto& m : RunManifest::expand(p))
      if (only.empty() || m.name == only) plans.push_back(plan_run(m));
  if (plans.empty()) throw Error("run: no run named '" + only + "' in the given manifests");
  if (!expect_id.empty() && (only.empty() || plans.size() != 1)) throw Error("run: --run-id goes with --only NAME (one run)");
  const int world = nproc > 0 ? nproc : env.distributed() ? env.world_size : 1;
  for (auto& p : plans) {
    if (ep > 0) p.train.expert_parallel = ep;
    if (world > 1) check_data_parallel_batch(p, world);
    check_expert_parallel(p, world);
    if (replicate_optimizer && p.train.expert_parallel > 1)
      throw Error(p.manifest_path + ": train.expert_parallel: " + std::to_string(p.train.expert_parallel) +
                  " ranks with --replicate-optimizer: not allowed (each rank holds only its experts; allowed: the sharded optimizer, the default)");
  }
  if (nproc > 0) {
    // Prepare the data once, here, and check every plan (bad input fails here, before any rank starts),
    // then start the ranks with this command minus --nproc-per-node.
    prepare_plans(plans, nullptr);
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
    bool cuda = true;
    for (const auto& p : plans) cuda = cuda && (opt.device.empty() ? pick_device(p.train.device, p.manifest_path + ": train.device") : pick_device(opt.device)).is_cuda();
    if (cuda) use_local_gpu(env.local_rank);
    if (env.rank != 0) set_log_level(LogLevel::kQuiet);  // rank 0 speaks for the run; warnings still show
    opt.groups = std::make_shared<ProcessGroups>(env, DistOptions{backend, std::chrono::seconds(dist_timeout)}, cuda);
    opt.data_parallel.shard_optimizer = !replicate_optimizer;
    opt.data_parallel.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20));
    log_info("run: " + env.describe() + ", backend " + opt.groups->backend());
  }
  // Data first: run ids name the data by its manifest's hash, so they are final only once it exists.
  prepare_plans(plans, opt.groups);
  // A child of the scheduler trains the run its parent planned: a manifest, recipe or corpus changed
  // since then would train another run under the parent's name.
  check_planned_as(plans[0], expect_id, "run");
  const bool lead = !opt.groups || opt.groups->world->rank() == 0;

  RunQueueOptions q;
  q.gpus = gpus;
  q.schedule = sched;
  if (gpus > 0) resolve_packing(per_gpu, mps, plans, q.schedule);
  q.run = opt;
  // With --gpus, one child process a run: `ufp4 run MANIFEST --only NAME --run-id ID`.
  const std::string exe = shell_quote(executable_dir() + "/ufp4");
  const RunQueueOutcome out = train_queue(plans, [&](size_t i) {
    const RunPlan& p = plans[i];
    return exe + " run " + shell_quote(p.manifest_path) + " --only " + shell_quote(p.name) + " --run-id " + p.run_id + (opt.force ? " --force" : "") +
           (opt.device.empty() ? "" : " --device " + shell_quote(opt.device)) + (opt.stop_after >= 0 ? " --stop-after " + std::to_string(opt.stop_after) : "") +
           (ep > 0 ? " --ep " + std::to_string(ep) : "");
  }, q);
  if (lead) print_queue_outcome(out, plans.size(), "run");
  return out.exit_code();
}

}  // namespace ufp4
