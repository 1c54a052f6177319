// The Communicator over one c10d process group (ProcessGroupGloo or ProcessGroupNCCL; a ProcessGroup
// in LibTorch 1.x, a Backend in 2.x, with the same collective calls). Included only by the files
// that construct one (backend_gloo.cpp, backend_nccl.cpp), the only ones that see c10d's backends.
#pragma once
#include <utility>
#include <vector>

#include "harness/dist/communicator.h"

namespace ufp4 {

template <class Group>
class C10dCommunicator : public Communicator {
 public:
  // flat_collectives: the group has _reduce_scatter_base and _allgather_base (NCCL); otherwise
  // reduce-scatter is an all-reduce and a copy, and all-gather takes a list of parts (Gloo 1.13).
  C10dCommunicator(c10::intrusive_ptr<Group> group, int rank, int size, std::string backend, bool flat_collectives, bool cuda)
      : group_(std::move(group)), rank_(rank), size_(size), backend_(std::move(backend)), flat_(flat_collectives), cuda_(cuda) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return backend_; }
  bool needs_cuda() const override { return cuda_; }

  Pending all_reduce_sum(torch::Tensor t) override {
    std::vector<at::Tensor> v{t};
    auto work = group_->allreduce(v);
    return Pending([work]() mutable { work->wait(); }, who());
  }

  Pending reduce_scatter_sum(torch::Tensor shard, torch::Tensor flat) override {
    TORCH_CHECK(flat.numel() == shard.numel() * size_, "reduce_scatter_sum: flat must hold size() shards");
    if (flat_) {
      auto work = group_->_reduce_scatter_base(shard, flat);
      return Pending([work]() mutable { work->wait(); }, who());
    }
    std::vector<at::Tensor> v{flat};
    auto work = group_->allreduce(v);
    const int64_t n = shard.numel();
    return Pending([work, shard, flat, n, r = rank_]() mutable {
      work->wait();
      shard.copy_(flat.narrow(0, r * n, n));
    }, who());
  }

  Pending all_gather(torch::Tensor flat, torch::Tensor shard) override {
    TORCH_CHECK(flat.numel() == shard.numel() * size_, "all_gather: flat must hold size() shards");
    if (flat_) {
      auto work = group_->_allgather_base(flat, shard);
      return Pending([work]() mutable { work->wait(); }, who());
    }
    std::vector<std::vector<at::Tensor>> out{flat.chunk(size_)};
    std::vector<at::Tensor> in{shard};
    auto work = group_->allgather(out, in);
    return Pending([work, out, in]() mutable { work->wait(); }, who());
  }

  Pending all_to_all(torch::Tensor out, torch::Tensor in, std::vector<int64_t> out_splits, std::vector<int64_t> in_splits) override {
    TORCH_CHECK(static_cast<int>(out_splits.size()) == size_ && static_cast<int>(in_splits.size()) == size_, "all_to_all: one split a rank");
    auto work = group_->alltoall_base(out, in, out_splits, in_splits);
    return Pending([work, out, in]() mutable { work->wait(); }, who());
  }

  void broadcast(torch::Tensor t, int root) override {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    Pending([w = group_->broadcast(v, o)]() mutable { w->wait(); }, who()).wait();
  }

  void barrier() override {
    Pending([w = group_->barrier()]() mutable { w->wait(); }, who()).wait();
  }

 private:
  std::string who() const { return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (" + backend_ + ")"; }
  c10::intrusive_ptr<Group> group_;
  int rank_, size_;
  std::string backend_;
  bool flat_, cuda_;
};

}  // namespace ufp4
