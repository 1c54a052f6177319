#include "models/row_exchange.h"

namespace ufp4 {

namespace {

// The exchange kept in an autograd node's saved data, which holds IValues only.
struct ExchangeHolder : torch::CustomClassHolder {
  explicit ExchangeHolder(std::shared_ptr<RowExchange> e) : exchange(std::move(e)) {}
  std::shared_ptr<RowExchange> exchange;
};

struct ExchangeRows : public torch::autograd::Function<ExchangeRows> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& in, std::vector<int64_t> send, std::vector<int64_t> recv,
                               std::shared_ptr<RowExchange> exchange) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["exchange"] = c10::IValue::make_capsule(c10::make_intrusive<ExchangeHolder>(exchange));
    return exchange->all_to_all(in.contiguous(), send, recv);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const std::vector<int64_t> send = ctx->saved_data["send"].toIntVector(), recv = ctx->saved_data["recv"].toIntVector();
    const auto holder = c10::static_intrusive_pointer_cast<ExchangeHolder>(ctx->saved_data["exchange"].toCapsule());
    return {holder->exchange->all_to_all(grads[0].contiguous(), recv, send), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor exchange_rows(const torch::Tensor& in, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                            const std::shared_ptr<RowExchange>& exchange) {
  return ExchangeRows::apply(in, send, recv, exchange);
}

}  // namespace ufp4
