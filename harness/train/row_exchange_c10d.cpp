#include "harness/train/row_exchange_c10d.h"

#include <numeric>

#include "common/error.h"

namespace ufp4 {

namespace {

class CommunicatorExchange : public RowExchange {
 public:
  explicit CommunicatorExchange(std::shared_ptr<Communicator> g) : group_(std::move(g)) {}
  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }

  torch::Tensor all_to_all(const torch::Tensor& in, const std::vector<int64_t>& send, const std::vector<int64_t>& recv) override {
    check_splits(send, "send");
    check_splits(recv, "recv");
    if (std::accumulate(send.begin(), send.end(), int64_t{0}) != in.size(0))
      throw RuntimeError("row exchange: the send counts sum to " + std::to_string(std::accumulate(send.begin(), send.end(), int64_t{0})) + ", not the " +
                         std::to_string(in.size(0)) + " rows given");
    std::vector<int64_t> shape = in.sizes().vec();
    shape[0] = std::accumulate(recv.begin(), recv.end(), int64_t{0});
    torch::Tensor out = torch::empty(shape, in.options());
    // c10d's splits count elements of dim 0 rows: the rows go whole.
    group_->all_to_all(out, in, recv, send).wait();
    return out;
  }

  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send) override {
    check_splits(send, "send");
    const auto device = group_->needs_cuda() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    torch::Tensor in = torch::tensor(send, torch::kInt64).to(device), out = torch::empty_like(in);
    const std::vector<int64_t> one(static_cast<size_t>(size()), 1);
    group_->all_to_all(out, in, one, one).wait();
    const torch::Tensor host = out.cpu();
    return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
  }

 private:
  void check_splits(const std::vector<int64_t>& s, const char* what) const {
    if (static_cast<int>(s.size()) != size())
      throw RuntimeError(std::string("row exchange: ") + what + " counts for " + std::to_string(s.size()) + " ranks in a group of " + std::to_string(size()));
  }
  std::shared_ptr<Communicator> group_;
};

}  // namespace

std::shared_ptr<RowExchange> row_exchange(std::shared_ptr<Communicator> group) { return std::make_shared<CommunicatorExchange>(std::move(group)); }

}  // namespace ufp4
