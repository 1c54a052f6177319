// Data parallelism for the training engine, over a Communicator (harness/dist). Every rank holds the
// whole model; each step each rank runs its slice of the global batch (the trainer hands it the
// micro-batches a single process would read at those positions), and the gradients are summed over
// ranks, in buckets, while the last micro-batch's backward pass still runs: the parameters and
// their gradients are views into flat FP32 buffers cut into buckets in reverse registration order
// (the order backward produces them), and an autograd hook after each parameter's gradient
// accumulation issues a bucket's collective as soon as the bucket is complete, always in bucket
// order (every rank issues the same collectives in the same order).
//
// Two modes:
//  - shard_optimizer (ZeRO-1, the default): each bucket is reduce-scattered, so each rank holds the
//    summed gradient of its 1/W of every bucket; the global gradient norm is the sum of the ranks'
//    squares; each rank runs AdamW on its part only, holding 1/W of the AdamW state; the updated
//    parameters are all-gathered. The FP32 weights are the model's parameters here (BF16 is a
//    compute cast), so they are whole on every rank after the gather: what is sharded is the AdamW
//    state (8 of the 16 bytes a parameter costs) and the update's work.
//  - replicated: each bucket is all-reduced and every rank runs the single-process update.
//
// Expert parallelism: a MoE model's routed experts are split over the ranks of an expert group, so
// their gradients are summed over a smaller group, the ranks that hold the same experts (one a
// replica of the model), while every other parameter's are summed over all ranks. Each such set of
// parameters is a GradientGroup with its own buckets and communicator; the buckets of all groups
// live in the same flat buffers and are issued in one fixed order. Every element of every parameter
// lies in exactly one rank's shard, so the sum over all ranks of the squared shards is the global
// gradient norm. Only with sharded AdamW (the replicated update would need the norm of experts it
// does not hold).
//
// Bits: at a given world size, backend and bucket size, reruns are bit-identical (fixed bucket
// order, fixed collective algorithms, the data and the SR/RHT keys independent of the rank layout).
// Against one process with the same global batch the curve is close, not bit-equal: a process sums
// its micro-batches' gradients in sequence, W ranks sum W partial sums, and floating-point addition
// is not associative.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/non_copyable.h"
#include "harness/dist/communicator.h"
#include "harness/train/checkpoint.h"
#include "models/model_config.h"
#include "models/transformer.h"

namespace ufp4 {

struct StepStats;

struct DataParallelOptions {
  bool shard_optimizer = true;
  int64_t bucket_bytes = 25ll << 20;
};

// Parameters whose gradients `comm`'s ranks sum (and whose AdamW state they shard).
struct GradientGroup {
  std::vector<torch::Tensor> params;
  std::shared_ptr<Communicator> comm;
};

// The model's parameters split by who sums them: the routed experts' over `experts_data` (the ranks
// that hold the same experts), every other over `world`; one group over `world` without experts_data.
std::vector<GradientGroup> gradient_groups(Transformer& model, std::shared_ptr<Communicator> world, std::shared_ptr<Communicator> experts_data);

class DataParallel : NonCopyable {
 public:
  // groups: the first one's communicator spans every rank (it carries the loss, the stop votes and the norm).
  DataParallel(Transformer& model, torch::optim::AdamW& opt, std::vector<GradientGroup> groups, const DataParallelOptions& o);
  ~DataParallel();

  // Points the parameters (again) at the flat buffer, copying their values in: after construction,
  // and after a checkpoint was loaded into the model (loading replaces parameters' storage).
  // broadcast: the values of rank 0 of each group's communicator go to its other ranks.
  void rebind_parameters(bool broadcast);

  struct Result {
    double loss = 0, grad_norm = 0;
    bool stop = false;  // some rank was asked to stop: every rank stops after this step
  };
  // One optimizer step: `local_accum` micro-batches from next_batch(), each loss scaled by
  // 1/global_accum, gradients summed over ranks, clipped by the global norm, AdamW.
  Result step(const std::function<torch::Tensor()>& next_batch, int64_t local_accum, int64_t global_accum, int64_t seq_len,
              double grad_clip, bool stop_requested);

  bool sharded() const { return o_.shard_optimizer; }
  Communicator& comm() { return *comm_; }
  // This rank's AdamW state (sharded mode), for its checkpoint file.
  void save_shard(const std::string& path, const ArchiveStamp& stamp) const;  // stamp.what: "optimizer shard"
  void load_shard(const std::string& path, const ArchiveStamp& stamp);
  double optimizer_state_gb() const;  // AdamW state this rank holds
  std::string describe() const;       // one line for the log

 private:
  struct Bucket {
    int64_t offset = 0, size = 0, shard = 0, shard_offset = 0;  // in elements; size = W * shard (padded), W its group's ranks
    std::vector<size_t> params;
    size_t group = 0;  // its GradientGroup
    size_t ready = 0;
  };
  struct Piece {  // a parameter's part inside this rank's shard of one bucket
    torch::Tensor p, g, m, v;
    size_t group;
  };
  void on_gradient_ready(size_t param);
  void issue_ready_buckets(bool all);
  void sharded_adamw();
  int64_t make_buckets(const std::vector<size_t>& gradient_group);
  Communicator& comm_of(const Bucket& b) const { return *groups_[b.group].comm; }

  Transformer& model_;
  torch::optim::AdamW& opt_;
  std::vector<GradientGroup> groups_;
  std::shared_ptr<Communicator> comm_;  // groups_[0]'s: every rank
  DataParallelOptions o_;
  std::vector<torch::Tensor> params_;
  std::vector<int64_t> param_offset_;
  std::vector<size_t> param_bucket_, param_group_;
  std::vector<Bucket> buckets_;
  torch::Tensor flat_param_, flat_grad_, grad_shard_, exp_avg_, exp_avg_sq_;
  std::vector<Piece> pieces_;
  int64_t adam_step_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  std::mutex mu_;
  bool syncing_ = false;
  size_t next_bucket_ = 0;
  std::vector<Pending> pending_;
};

}  // namespace ufp4
