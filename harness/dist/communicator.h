// A process group as the training engine uses it: the few collectives data parallelism needs, on
// flat tensors, over LibTorch's c10d (ProcessGroupNCCL on GPUs, ProcessGroupGloo on CPU or on CUDA
// tensors through the host). Collectives on one communicator must be issued in the same order on
// every rank; each returns a Pending that finishes it. With the same world size, backend and
// inputs a collective gives the same bits on every rerun (NCCL and Gloo both use fixed rings for a
// fixed size and topology; keep NCCL's algorithm choice fixed: NCCL_NVLS_ENABLE=0 as set).
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ufp4 {

// An issued collective. wait() blocks the host (Gloo) or orders the current CUDA stream after it
// (NCCL), and throws ufp4::RuntimeError naming the group when a peer failed or the timeout passed.
class Pending {
 public:
  Pending() = default;
  // who: the rank and group, for the error ("rank 1 of 2 (gloo)").
  Pending(std::function<void()> wait, std::string who) : wait_(std::move(wait)), who_(std::move(who)) {}
  void wait();
  bool issued() const { return static_cast<bool>(wait_); }

 private:
  std::function<void()> wait_;
  std::string who_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "nccl" or "gloo"
  // Sum over ranks, in place.
  virtual Pending all_reduce_sum(torch::Tensor t) = 0;
  // shard = the sum over ranks of flat's rank-th of size() equal parts (flat.numel() = size() * shard.numel()).
  virtual Pending reduce_scatter_sum(torch::Tensor shard, torch::Tensor flat) = 0;
  // flat = the ranks' shards one after another; `shard` may be flat's own rank-th part.
  virtual Pending all_gather(torch::Tensor flat, torch::Tensor shard) = 0;
  // Rows of `in` (dim 0) to every rank in rank order, in_splits[r] of them to rank r; `out` receives
  // out_splits[r] rows from rank r, in rank order (expert parallelism's dispatch and combine).
  virtual Pending all_to_all(torch::Tensor out, torch::Tensor in, std::vector<int64_t> out_splits, std::vector<int64_t> in_splits) = 0;
  virtual void broadcast(torch::Tensor t, int root) = 0;
  virtual void barrier() = 0;
  // Rank `root`'s bytes on every rank (small metadata: telemetry keys, decisions).
  std::string broadcast_bytes(const std::string& bytes, int root);
  // The device a collective's tensors must live on (CUDA for NCCL, CPU or CUDA for Gloo).
  virtual bool needs_cuda() const = 0;
};

}  // namespace ufp4
