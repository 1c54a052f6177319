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
  int64_t expert_parallel = 1;  // ranks an expert group (its experts in files of their own: expert_shard.h)
};

// What a checkpoint file says of itself: which run wrote it, after how many steps, and what it is
// ("checkpoint", "optimizer shard"). A stamp follows the LibTorch archive in the file, with the
// archive's size and SHA-256, so that a file is trusted by its content, not its name.
struct ArchiveStamp {
  std::string what, run_id;
  int64_t step = 0;
};

// A LibTorch archive written crash-safely (AtomicFile) with its stamp, and read back only when the
// stamp names the expected run (and step, when `expected.step` >= 0) and the archive's bytes match
// their SHA-256: otherwise an Error that names the file and what is wrong (another run's checkpoint,
// a damaged one, one written before checkpoints were stamped) instead of LibTorch's backtrace.
void write_archive(const std::string& path, torch::serialize::OutputArchive& archive, const ArchiveStamp& stamp);
ArchiveStamp read_archive(const std::string& path, torch::serialize::InputArchive& archive, const torch::Device& device, const ArchiveStamp& expected);

void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const LoopState& state, const std::string& run_id);
// Throws ufp4::Error, naming the file, when it is not a checkpoint of run `run_id` (read_archive), or
// when its model or optimizer does not fit this run's.
LoopState load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const torch::Device& device,
                          const std::string& run_id);

}  // namespace ufp4
