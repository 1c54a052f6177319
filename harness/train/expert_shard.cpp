#include "harness/train/expert_shard.h"

#include "common/error.h"
#include "common/sha256.h"

namespace ufp4 {

namespace {

// The group's whole tensor: every rank's [local experts, ...] one after another (dim 0 in rank order).
torch::Tensor gathered(const torch::Tensor& local, Communicator& experts) {
  std::vector<int64_t> shape = local.sizes().vec();
  shape[0] *= experts.size();
  torch::Tensor whole = torch::empty(shape, local.options());
  experts.all_gather(whole.view({-1}), local.detach().contiguous().view({-1})).wait();
  return whole;
}

}  // namespace

void save_expert_shard(const std::string& path, Transformer& model, const Communicator& experts, const ArchiveStamp& stamp) {
  torch::serialize::OutputArchive ar;
  for (const auto& p : model->named_parameters())
    if (model->is_routed_expert_weight(p.value())) ar.write(p.key(), p.value().detach().cpu());
  ar.write("expert_rank", torch::tensor(static_cast<int64_t>(experts.rank()), torch::kInt64));
  ar.write("expert_ranks", torch::tensor(static_cast<int64_t>(experts.size()), torch::kInt64));
  write_archive(path, ar, stamp);
}

void load_expert_shard(const std::string& path, Transformer& model, const Communicator& experts, const torch::Device& device,
                       const ArchiveStamp& stamp) {
  torch::serialize::InputArchive ar;
  read_archive(path, ar, torch::kCPU, stamp);
  torch::Tensor rank, ranks;
  torch::NoGradGuard ng;
  try {
    ar.read("expert_rank", rank);
    ar.read("expert_ranks", ranks);
    if (rank.item<int64_t>() != experts.rank() || ranks.item<int64_t>() != experts.size())
      throw Error(path + ": the experts of expert rank " + std::to_string(rank.item<int64_t>()) + " of " + std::to_string(ranks.item<int64_t>()) +
                  ", not of rank " + std::to_string(experts.rank()) + " of " + std::to_string(experts.size()) + "; remove the checkpoint to start over");
    for (const auto& p : model->named_parameters()) {
      if (!model->is_routed_expert_weight(p.value())) continue;
      torch::Tensor t;
      ar.read(p.key(), t);
      if (t.sizes() != p.value().sizes()) throw Error(path + ": " + p.key() + " has another shape than this run's; remove the checkpoint to start over");
      p.value().copy_(t.to(device));
    }
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    throw Error(path + ": not a readable experts shard (" + msg.substr(0, msg.find('\n')) + "); remove the checkpoint to start over");
  }
}

std::string weights_sha256(Transformer& model, Communicator* experts, bool hash) {
  Sha256 h;
  for (const auto& p : model->named_parameters()) {
    const bool routed = experts && model->is_routed_expert_weight(p.value());
    if (!hash) {
      if (routed) gathered(p.value(), *experts);
      continue;
    }
    torch::Tensor t = routed ? gathered(p.value(), *experts) : p.value().detach();
    t = t.to(torch::kCPU, torch::kFloat32).contiguous();
    h.update(p.key());
    h.update(t.data_ptr(), static_cast<size_t>(t.numel()) * 4);
  }
  return hash ? h.hex() : std::string();
}

}  // namespace ufp4
