#include "harness/dist/communicator.h"

#include <cstring>

#include "common/error.h"

namespace ufp4 {

void Pending::wait() {
  if (!wait_) return;
  auto w = std::move(wait_);
  wait_ = nullptr;
  try {
    w();
  } catch (const RuntimeError&) {
    throw;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto nl = msg.find('\n'); nl != std::string::npos) msg = msg.substr(0, nl);
    throw RuntimeError(who_ + ": a collective failed (a peer rank exited, or the others did not come within --dist-timeout): " + msg);
  }
}

std::string Communicator::broadcast_bytes(const std::string& bytes, int root) {
  const auto opts = torch::TensorOptions().device(needs_cuda() ? torch::kCUDA : torch::kCPU);
  torch::Tensor n = torch::full({1}, static_cast<int64_t>(rank() == root ? bytes.size() : 0), opts.dtype(torch::kInt64));
  broadcast(n, root);
  const int64_t len = n.cpu().item<int64_t>();
  if (len == 0) return "";
  torch::Tensor t = torch::zeros({len}, torch::kUInt8);
  if (rank() == root) std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  torch::Tensor d = t.to(opts.device());
  broadcast(d, root);
  t = d.cpu();
  return std::string(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()), static_cast<size_t>(len));
}

}  // namespace ufp4
