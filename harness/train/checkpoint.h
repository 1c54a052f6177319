// A run's checkpoint: one file holding the model, the optimizer and the loop's state (step, data
// cursor, curves, telemetry, clock) as nested archives of one LibTorch archive, written through
// AtomicFile: a full disk or a kill leaves the previous checkpoint as it was. Loading restores every
// field, so a resumed run continues bit for bit and writes whole curves.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "harness/io/run_results.h"
#include "harness/train/token_stream.h"
#include "models/transformer.h"

namespace ufp4 {

// What the training loop carries from one process of a run to the next.
struct LoopState {
  int64_t step = 0;             // steps done
  TokenStream::Cursor cursor;   // where the data order stands
  RunCurves curves;
  double elapsed_before = 0;    // training seconds of earlier processes (train/time is cumulative)
  // The process layout that wrote it (a checkpoint resumes only under the same one): ranks, and
  // whether each rank holds its AdamW state in a file of its own (data_parallel.h). Checkpoints
  // written before data parallelism read as one process.
  int64_t world_size = 1;
  bool sharded_optimizer = false;
};

// A LibTorch archive written crash-safely (AtomicFile), and read with an error that names the file
// and what it should have been ("checkpoint", "optimizer shard") instead of LibTorch's backtrace.
void write_archive(const std::string& path, torch::serialize::OutputArchive& archive);
void read_archive(const std::string& path, torch::serialize::InputArchive& archive, const torch::Device& device, const std::string& what);

void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const LoopState& state);
// Throws ufp4::RuntimeError, naming the file, when it is not a readable checkpoint.
LoopState load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const torch::Device& device);

}  // namespace ufp4
