// CUDA MPS for runs that share a GPU (`ufp4 run --gpus N --per-gpu K --mps on`). Without it the
// processes on one GPU take turns in time slices, so a small model's short kernels leave most of the GPU
// idle; under MPS the kernels of every process run at once. Each process still computes what it would
// alone: our kernels' results do not depend on how they are scheduled (checked by `ufp4 check --exact`
// of a packed run against the same run alone, tools/gpu-packing.sh).
// One control daemon a GPU, each with pipes of its own under a folder of this process, so that daemons of
// two GPUs or of two schedulers never meet. A job names its GPU by UUID: the daemon renumbers the GPUs
// it serves, and a UUID means the same GPU with or without it. No LibTorch here.
#pragma once
#include <string>
#include <vector>

#include "common/non_copyable.h"

namespace ufp4 {

// Whether nvidia-cuda-mps-control is on PATH.
bool mps_available();

class MpsDaemons : NonCopyable {
 public:
  // One daemon for each of `devices` (as CUDA_VISIBLE_DEVICES names a GPU: index or UUID), its pipes and
  // log under `dir`/<slot> (`dir`: a new folder of this process). Throws RuntimeError naming the GPU and the
  // daemon's log when one does not answer.
  MpsDaemons(const std::vector<std::string>& devices, const std::string& dir);
  ~MpsDaemons();  // every daemon told to quit (after the jobs have ended); `dir` removed unless one did not take it
  // The environment of a job on slot `slot`, as `env` takes it: its GPU's UUID and its daemon's pipes.
  std::string client_env(int slot) const;
  std::string describe() const;  // how many daemons, and their GPUs' UUIDs, for the log

 private:
  struct Daemon {
    std::string uuid, pipes, log;
  };
  std::vector<Daemon> daemons_;
  std::string dir_;
  void quit_all() noexcept;
};

}  // namespace ufp4
