// The training engine: AdamW on FP32 master weights (BF16 compute on GPU, FP32 on CPU), warmup +
// cosine or WSD, gradient clipping and accumulation, evaluation, checkpoints every N steps and on
// SIGINT/SIGTERM with automatic resume, deterministic by default (the same manifest gives the same
// bits on the same device, resumed or not), divergence stop, progress lines, and one HDF5 result per
// run. Checkpoints and results are written crash-safely (common/atomic_file.h).
#pragma once
#include <torch/torch.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "harness/dist/process_groups.h"
#include "harness/train/capture_file.h"
#include "harness/train/checkpoint.h"
#include "harness/train/data_parallel.h"
#include "harness/plan/device_peaks.h"
#include "harness/plan/run_plan.h"
#include "harness/train/step_graph.h"
#include "harness/io/run_results.h"
#include "harness/train/token_stream.h"
#include "harness/train/train_step.h"
#include "models/transformer.h"

namespace ufp4 {

class Progress;

struct RunOptions {
  bool force = false;          // re-run even if the result exists
  int64_t stop_after = -1;     // stop (as if signalled) after this step, for resume tests
  std::string device;          // overrides the manifest's device when set
  // Set when this process is one rank of a data-parallel run (harness/dist): every rank calls
  // run_training with the same plans in the same order; rank 0 decides what to skip or resume,
  // writes the checkpoint's shared part and the results.
  std::shared_ptr<ProcessGroups> groups;
  DataParallelOptions data_parallel;
  // Set: each captured step's operands go here, kept on the device, instead of to capture_step<N>.h5.
  CaptureSink capture_sink;
};

enum class RunStatus { kCompleted, kSkipped, kStopped, kDiverged };

struct RunResult {
  RunStatus status;
  std::string results_path;
  int64_t steps_done = 0;
  bool signalled = false;  // kStopped by SIGINT/SIGTERM (not --stop-after): the caller starts no further run
};

// A planned run whose data is prepared (ensure_data, settle_data): skips it when its
// results exist, else trains it (resuming its checkpoint) and writes its results.
RunResult run_training(const RunPlan& plan, const RunOptions& opt);

// The training loop of one planned run, on one device: steps, evaluation, checkpoints, the stop on a
// signal or divergence. It owns the model, optimizer and data stream; its curves become the results.
class Trainer {
 public:
  Trainer(const RunPlan& plan, const torch::Device& device, std::string device_name, std::shared_ptr<ProcessGroups> groups = nullptr,
          const DataParallelOptions& dp = {});
  void resume(const std::string& checkpoint);  // continues from a checkpoint written by save()
  void save(const std::string& checkpoint);
  enum class Outcome { kFinished, kDiverged, kStopped };
  // Trains up to the plan's last step; kStopped after a signal or at stop_after (a checkpoint is saved).
  Outcome train(int64_t stop_after = -1);
  RunResults results();  // the results file's contents so far
  int64_t steps_done() const { return state_.step; }
  void remove_checkpoint(const std::string& checkpoint) const;  // the shared file (rank 0) and this rank's shards
  // Captured steps go to `sink` (their operands kept on the device) instead of to files.
  void set_capture_sink(CaptureSink sink);

 private:
  bool step_once(int64_t step);  // one optimizer step, recorded and shown; false when it diverged
  std::shared_ptr<OperandCapture> new_capture(bool on_device) const;  // of the plan's [capture] steps and layers
  // Mean next-token loss over the first eval.batches micro-batches of the validation split, or over
  // every window of it (the last micro-batch partial), each token weighted alike.
  double evaluate(bool whole_split);
  StepStats data_parallel_step();  // this rank's part of the global batch, gradients summed over ranks
  void share_telemetry();          // the alpha values of the step's last micro-batch, from the rank that ran it
  std::string shard_path(const std::string& checkpoint, int64_t step) const;
  std::string experts_path(const std::string& checkpoint, int64_t step) const;  // this expert rank's experts (expert_shard.h)
  bool writes_experts() const;
  void remove_shards(const std::string& checkpoint, int64_t keep_step) const;  // this rank's, but the ones of keep_step
  void remove_files_of(const std::string& checkpoint, const std::string& tag, const std::string& keep_path) const;
  const RunPlan& plan_;
  const TrainSection& t_;  // plan_.train
  torch::Device device_;
  std::string device_name_, utc_start_;
  std::shared_ptr<QuantContext> ctx_;
  Transformer model_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  std::shared_ptr<ProcessGroups> groups_;
  std::shared_ptr<Communicator> experts_;  // expert parallelism's group (train.expert_parallel > 1)
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<StepGraph> graph_;  // CUDA-graph steps, when the manifest and the model allow them
  std::string graph_off_;             // why not, when not
  CaptureSink capture_sink_;          // set_capture_sink
  int rank_ = 0, world_ = 1;
  bool stop_agreed_ = false;
  TokenStream train_, val_;  // val_: in order, from its first window at every evaluation
  LoopState state_;
  int64_t start_ = 0;
  double best_, smooth_, tokens_per_s_ = 0, mfu_ = 0;
  bool diverged_ = false;
  int64_t diverged_step_ = -1;
  std::chrono::steady_clock::time_point t0_;
  Progress* progress_ = nullptr;  // while train() runs
};

}  // namespace ufp4
