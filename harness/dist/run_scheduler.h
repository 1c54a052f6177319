// `ufp4 run --gpus N --per-gpu K`: independent runs side by side, each a child process on one GPU
// (CUDA_VISIBLE_DEVICES), K at a time a GPU, each new one on the least loaded GPU. The scheduler
// watches them: a run whose log has not grown for `stall_seconds` (a running ufp4 run prints a
// progress line every few seconds) is logged with what its process is doing, stopped, and started
// again once, resuming from its checkpoint. On SIGINT/SIGTERM it starts nothing new, passes SIGTERM
// on (each run checkpoints at its next step and exits 130), and kills what is still running after
// `stop_grace_seconds`, so that it returns within a minute of the signal. With a time limit it stops the
// same way when the limit is reached, and before that starts no job whose kind's estimate (the longest
// finished job of the kind, or the caller's prior if longer) would not fit in the time left. With `mps`, the jobs of a GPU run under CUDA MPS (harness/dist/mps.h).
// No LibTorch here.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ufp4 {

struct ScheduledJob {
  std::string name;     // for messages
  std::string command;  // a shell command line; its output is appended to `log`
  std::string log;      // the job's heartbeat: it must grow while the job makes progress
  std::string kind;     // jobs of one kind take about as long (the runs of one model): the time limit's estimate
  // It continues from a checkpoint, so it needs only the rest of a whole job's time: the time limit always
  // starts it (at the limit it checkpoints again), and it is not timed.
  bool resumes = false;
};

struct ScheduleOptions {
  int gpus = 1, per_gpu = 1;
  double stall_seconds = 300;      // a job whose log has not grown for this long is stopped and started again once
  double stop_grace_seconds = 40;  // after a stop signal, or when stopping a stalled job: SIGTERM, then SIGKILL after this
  double poll_seconds = 0.2;
  bool thread_stacks = true;       // a stalled job's log gets each thread's stack (gdb), not only its wait channels
  bool mps = false;                // CUDA MPS while the jobs run: one control daemon a GPU (harness/dist/mps.h)
  // When every running job is stopped as on a signal (each run checkpoints; the same command resumes
  // them). Before that a job is started only when the longest job of its kind finished so far, or the prior
  // below if longer, fits in the time left (neither: it starts; a job that resumes: always), so that the last minutes of a time-boxed machine go to runs that can end rather
  // than to runs cut off part-way. A point in time, not a span, and the finished jobs' seconds shared by
  // every copy of these options: a command that schedules twice (a campaign's pilot, then its other
  // seeds) keeps one limit and what it measured. A job that resumes, one whose log held lines when it
  // started (it may resume an earlier command's checkpoint), or one started again after a stall, is not
  // timed: it may not have run whole. max(): no limit.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::shared_ptr<std::map<std::string, double>> longest_by_kind = std::make_shared<std::map<std::string, double>>();
  // The caller's estimate of a kind's jobs (seconds), the least the time limit expects of them: a
  // campaign's recorded training times (harness/campaign/run_times.h). A call that first resumes earlier
  // calls' jobs times none of them, and without it would start fresh jobs however little time is left.
  std::map<std::string, double> prior_by_kind;
};

enum class JobStatus { kDone, kStopped, kFailed, kNotStarted };
struct JobResult {
  JobStatus status = JobStatus::kNotStarted;
  std::string detail;  // how a failed job ended, with its log; why the time limit left one unstarted
  int restarts = 0;    // times it was restarted after a stall
};

// Runs every job; returns one result a job, in the jobs' order.
std::vector<JobResult> run_scheduled_jobs(const std::vector<ScheduledJob>& jobs, const ScheduleOptions& o);

// What a process is doing, for a stalled job's log: its state and kernel wait channel, and each
// thread's stack when gdb is installed.
std::string describe_process(int pid, bool thread_stacks = true);

}  // namespace ufp4
