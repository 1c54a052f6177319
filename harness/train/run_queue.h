// Runs trained one after another in this process, or side by side in child processes on the GPUs
// (harness/dist/run_scheduler.h): what `ufp4 run` and `ufp4 campaign run` share once their runs are
// planned. A failed run does not stop the others; bad input (ufp4::Error) does.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "harness/dist/run_scheduler.h"
#include "harness/train/trainer.h"

namespace ufp4 {

struct RunQueueOptions {
  int gpus = 0;               // 0: one after another here; N: child processes on N GPUs
  ScheduleOptions schedule;   // gpus > 0
  RunOptions run;
};

struct RunQueueOutcome {
  std::vector<std::string> finished;  // results files
  std::vector<std::string> failed;    // "name (why)"
  int stopped = 0;                    // checkpointed, or not started, after a stop signal or at the time limit: the same command goes on
  int exit_code() const { return !failed.empty() ? 1 : stopped ? 130 : 0; }
};

// `--per-gpu` (a number, or "auto") and `--mps` (auto, on, off) into the scheduler's options, logged.
// auto: as measured for the runs' model in results/bench/packing.csv of the checkout
// (harness/plan/packing.h); 1 run a GPU, without MPS, when not measured. MPS only where
// nvidia-cuda-mps-control is installed (`--mps on` without it is an Error). Throws Error for other values.
void resolve_packing(const std::string& per_gpu, const std::string& mps, const std::vector<RunPlan>& runs, ScheduleOptions& o);
// `--mps` checked as soon as it is parsed: auto, on or off; on only with --gpus N and the MPS control
// program installed. Throws Error naming what is wrong.
void check_mps_option(const std::string& mps, int gpus);
// `--time-limit` into the scheduler's deadline, from now: 0 (none) to 1e8 seconds, above 0 only with
// --gpus N (the scheduler keeps the time). Throws Error.
void set_time_limit(const std::string& command, double seconds, int gpus, ScheduleOptions& o);

// The plans' data ready to train: rank 0 (or this process alone) prepares each data folder that needs
// it while the other ranks wait, then every rank names the data by content and checks each plan can train
// (settle_data), and, in a data-parallel run, checks its run ids against rank 0's: ranks that planned
// different runs (another manifest, recipe or corpus on one node) stop before they train.
void prepare_plans(std::vector<RunPlan>& plans, const std::shared_ptr<ProcessGroups>& groups);

// `child_command(i)`: the shell command that trains plans[i] alone (gpus > 0).
RunQueueOutcome train_queue(const std::vector<RunPlan>& plans, const std::function<std::string(size_t)>& child_command, const RunQueueOptions& o);

// The summary table of finished runs (name, recipe, model, steps, training loss of the last K steps,
// final validation loss), and the failures on stderr.
void print_queue_outcome(const RunQueueOutcome& q, size_t runs, const std::string& command);

}  // namespace ufp4
