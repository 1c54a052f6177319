// The exchange of routed token rows between the ranks of an expert-parallel group: the one collective
// a MoE layer whose experts are spread over ranks needs, as an interface the model calls and
// harness/dist implements over c10d's all-to-all (models/ sees no process group). A fixed rank order
// on both sides: with the same splits a rerun moves the same rows to the same places.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace ufp4 {

class RowExchange {
 public:
  virtual ~RowExchange() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // in's rows, send[r] of them to rank r in rank order; returns the recv[r] rows from each rank r, in rank order.
  virtual torch::Tensor all_to_all(const torch::Tensor& in, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) = 0;
  // The counts every rank sends to this one, from the counts this rank sends to each (send[r] to rank r).
  virtual std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send) = 0;
};

// The all-to-all of rows as an autograd node: its backward sends each row's gradient back to the rank
// the row came from (send and recv swapped), so a row's gradient lands where the row started.
torch::Tensor exchange_rows(const torch::Tensor& in, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                            const std::shared_ptr<RowExchange>& exchange);

}  // namespace ufp4
