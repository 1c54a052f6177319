#include "harness/train/data_parallel.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "common/error.h"
#include "harness/train/checkpoint.h"
#include "harness/train/train_step.h"

namespace ufp4 {

namespace {

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

}  // namespace

std::vector<GradientGroup> gradient_groups(Transformer& model, std::shared_ptr<Communicator> world, std::shared_ptr<Communicator> experts_data) {
  if (!experts_data) return {{model->parameters(), std::move(world)}};
  GradientGroup dense{{}, std::move(world)}, experts{{}, std::move(experts_data)};
  for (const auto& p : model->parameters()) (model->is_routed_expert_weight(p) ? experts : dense).params.push_back(p);
  if (experts.params.empty()) throw Error(model->config.name + ": expert parallelism needs routed experts (a MoE model); this model has none");
  return {dense, experts};
}

DataParallel::DataParallel(Transformer& model, torch::optim::AdamW& opt, std::vector<GradientGroup> groups, const DataParallelOptions& o)
    : model_(model), opt_(opt), groups_(std::move(groups)), o_(o) {
  if (groups_.empty() || !groups_.front().comm) throw RuntimeError("data parallel: no group of ranks");
  comm_ = groups_.front().comm;
  if (groups_.size() > 1 && !o_.shard_optimizer)
    throw Error("--replicate-optimizer: not with expert parallelism (each rank holds only its experts, so none can clip by the global norm alone; "
                "allowed: the sharded optimizer, the default)");
  params_ = model_->parameters();
  if (params_.empty()) throw RuntimeError("data parallel: the model has no parameters");
  std::map<const void*, size_t> group_of, in_group;
  for (size_t g = 0; g < opt_.param_groups().size(); ++g)
    for (const auto& p : opt_.param_groups()[g].params()) group_of[p.unsafeGetTensorImpl()] = g;
  for (size_t g = 0; g < groups_.size(); ++g)
    for (const auto& p : groups_[g].params) in_group[p.unsafeGetTensorImpl()] = g;
  param_offset_.assign(params_.size(), 0);
  param_bucket_.assign(params_.size(), 0);
  param_group_.assign(params_.size(), 0);
  std::vector<size_t> gradient_group(params_.size(), 0);
  for (size_t k = 0; k < params_.size(); ++k) {
    const torch::Tensor& p = params_[k];
    if (p.scalar_type() != torch::kFloat32 || p.device() != params_.front().device())
      throw RuntimeError("data parallel: every parameter must be FP32 on one device");
    if (!group_of.count(p.unsafeGetTensorImpl())) throw RuntimeError("data parallel: a parameter is in no optimizer group");
    if (!in_group.count(p.unsafeGetTensorImpl())) throw RuntimeError("data parallel: a parameter is in no gradient group");
    param_group_[k] = group_of.at(p.unsafeGetTensorImpl());
    gradient_group[k] = in_group.at(p.unsafeGetTensorImpl());
  }
  const int64_t total = make_buckets(gradient_group);
  const auto options = params_.front().options();
  flat_param_ = torch::zeros({total}, options);
  flat_grad_ = torch::zeros({total}, options);
  if (o_.shard_optimizer) {
    int64_t shard_total = 0;
    for (auto& b : buckets_) {
      b.shard_offset = shard_total;
      shard_total += b.shard;
    }
    grad_shard_ = torch::zeros({shard_total}, options);
    exp_avg_ = torch::zeros({shard_total}, options);
    exp_avg_sq_ = torch::zeros({shard_total}, options);
    for (const auto& b : buckets_) {
      const int64_t s0 = b.offset + comm_of(b).rank() * b.shard;
      for (size_t k : b.params) {
        const int64_t lo = std::max(param_offset_[k], s0), hi = std::min(param_offset_[k] + params_[k].numel(), s0 + b.shard);
        if (lo >= hi) continue;
        const int64_t at = b.shard_offset + (lo - s0);
        pieces_.push_back({flat_param_.narrow(0, lo, hi - lo), grad_shard_.narrow(0, at, hi - lo), exp_avg_.narrow(0, at, hi - lo),
                           exp_avg_sq_.narrow(0, at, hi - lo), param_group_[k]});
      }
    }
  }
  rebind_parameters(/*broadcast=*/true);
  // The hook runs after AccumulateGrad has added a parameter's gradient into its .grad (the view).
  for (size_t k = 0; k < params_.size(); ++k) {
    std::shared_ptr<torch::autograd::Node> acc = torch::autograd::impl::grad_accumulator(params_[k]);
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          on_gradient_ready(k);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

// Buckets in reverse registration order (the order backward produces gradients), one open bucket a
// gradient group, each at most bucket_bytes (or one parameter) and padded so that it splits into its
// group's W ranks' equal shards of a multiple of 16 elements (aligned collectives); a bucket's place
// in the flat buffers is the order in which it closed. Returns the buffers' length.
int64_t DataParallel::make_buckets(const std::vector<size_t>& gradient_group) {
  std::vector<Bucket> open(groups_.size());
  std::vector<int64_t> elems(groups_.size(), 0);
  int64_t offset = 0;
  auto close = [&](size_t g) {
    Bucket& b = open[g];
    if (b.params.empty()) return;
    const int64_t W = groups_[g].comm->size();
    b.group = g;
    b.offset = offset;
    b.size = round_up(elems[g], W * 16);
    b.shard = b.size / W;
    for (size_t k : b.params) {
      param_offset_[k] += offset;
      param_bucket_[k] = buckets_.size();
    }
    offset += b.size;
    buckets_.push_back(b);
    open[g] = Bucket();
    elems[g] = 0;
  };
  for (size_t k = params_.size(); k-- > 0;) {
    const size_t g = gradient_group[k];
    if (!open[g].params.empty() && (elems[g] + params_[k].numel()) * 4 > o_.bucket_bytes) close(g);
    param_offset_[k] = elems[g];  // relative to the bucket until it closes
    open[g].params.push_back(k);
    elems[g] += params_[k].numel();
  }
  for (size_t g = 0; g < groups_.size(); ++g) close(g);
  return offset;
}

DataParallel::~DataParallel() {
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
}

void DataParallel::rebind_parameters(bool broadcast) {
  torch::NoGradGuard ng;
  for (size_t k = 0; k < params_.size(); ++k) {
    torch::Tensor p = params_[k];
    torch::Tensor view = flat_param_.narrow(0, param_offset_[k], p.numel()).view(p.sizes());
    if (p.data_ptr() != view.data_ptr()) view.copy_(p.detach());
    p.set_data(view);
    p.mutable_grad() = flat_grad_.narrow(0, param_offset_[k], p.numel()).view(p.sizes());
  }
  if (!broadcast) return;
  if (groups_.size() == 1) comm_->broadcast(flat_param_, 0);
  else
    for (const auto& b : buckets_) comm_of(b).broadcast(flat_param_.narrow(0, b.offset, b.size), 0);
}

void DataParallel::on_gradient_ready(size_t param) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!syncing_) return;
  ++buckets_[param_bucket_[param]].ready;
  issue_ready_buckets(false);
}

void DataParallel::issue_ready_buckets(bool all) {
  while (next_bucket_ < buckets_.size()) {
    Bucket& b = buckets_[next_bucket_];
    if (!all && b.ready < b.params.size()) return;
    torch::Tensor grads = flat_grad_.narrow(0, b.offset, b.size);
    pending_.push_back(o_.shard_optimizer ? comm_of(b).reduce_scatter_sum(grad_shard_.narrow(0, b.shard_offset, b.shard), grads)
                                          : comm_of(b).all_reduce_sum(grads));
    ++next_bucket_;
  }
}

DataParallel::Result DataParallel::step(const std::function<torch::Tensor()>& next_batch, int64_t local_accum, int64_t global_accum,
                                        int64_t seq_len, double grad_clip, bool stop_requested) {
  flat_grad_.zero_();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : buckets_) b.ready = 0;
    next_bucket_ = 0;
    pending_.clear();
  }
  const torch::Tensor loss_sum = accumulate_gradients(model_, next_batch, local_accum, global_accum, seq_len, [this] {
    std::lock_guard<std::mutex> lock(mu_);
    syncing_ = true;
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    syncing_ = false;
    issue_ready_buckets(/*all=*/true);  // a bucket whose parameters got no gradient this step
  }
  for (auto& p : pending_) p.wait();
  pending_.clear();

  // One small all-reduce carries what every rank must agree on: the loss, the stop votes and (sharded)
  // the squared gradient norm of each rank's shard.
  const torch::Device dev = comm_->needs_cuda() ? flat_grad_.device() : torch::Device(torch::kCPU);
  torch::Tensor sq = o_.shard_optimizer ? at::linalg_vector_norm(grad_shard_, 2, c10::nullopt, false, torch::kFloat64).pow(2)
                                        : torch::zeros({}, flat_grad_.options().dtype(torch::kFloat64));
  torch::Tensor shared = torch::stack({loss_sum.to(torch::kFloat64).reshape({}), torch::full({}, stop_requested ? 1.0 : 0.0, sq.options()), sq}).to(dev);
  comm_->all_reduce_sum(shared).wait();
  const torch::Tensor host = shared.cpu();
  Result r;
  r.loss = host[0].item<double>() / static_cast<double>(global_accum);
  r.stop = host[1].item<double>() > 0;
  if (!o_.shard_optimizer) {
    r.grad_norm = clip_and_update(model_, opt_, grad_clip);
    return r;
  }
  r.grad_norm = std::sqrt(host[2].item<double>());
  // As clip_grad_norm_: scale only when the norm exceeds the clip.
  const double coef = grad_clip / (r.grad_norm + 1e-6);
  if (grad_clip > 0 && coef < 1.0) grad_shard_.mul_(coef);
  sharded_adamw();
  std::vector<Pending> gathers;
  for (const auto& b : buckets_)
    gathers.push_back(comm_of(b).all_gather(flat_param_.narrow(0, b.offset, b.size), flat_param_.narrow(0, b.offset + comm_of(b).rank() * b.shard, b.shard)));
  for (auto& g : gathers) g.wait();
  return r;
}

// AdamW (decoupled weight decay) on this rank's pieces, each with its parameter's group options: the
// arithmetic of torch::optim::AdamW, or LibTorch's fused kernel on CUDA with LibTorch >= 2 (as the
// single-process step).
void DataParallel::sharded_adamw() {
  torch::NoGradGuard ng;
  ++adam_step_;
  for (size_t g = 0; g < opt_.param_groups().size(); ++g) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(opt_.param_groups()[g].options());
    const double lr = o.lr(), b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas()), wd = o.weight_decay(), eps = o.eps();
    std::vector<torch::Tensor> p, gr, m, v;
    for (const auto& piece : pieces_)
      if (piece.group == g) {
        p.push_back(piece.p);
        gr.push_back(piece.g);
        m.push_back(piece.m);
        v.push_back(piece.v);
      }
    if (p.empty()) continue;
#if TORCH_VERSION_MAJOR >= 2
    if (p.front().is_cuda()) {
      const torch::Tensor step = torch::full({}, static_cast<double>(adam_step_), p.front().options());
      std::vector<torch::Tensor> steps(p.size(), step);
      at::_fused_adamw_(p, gr, m, v, {}, steps, lr, b1, b2, wd, eps, /*amsgrad=*/false, /*maximize=*/false);
      continue;
    }
#endif
    const double bc1 = 1 - std::pow(b1, static_cast<double>(adam_step_)), bc2 = 1 - std::pow(b2, static_cast<double>(adam_step_));
    for (size_t i = 0; i < p.size(); ++i) {
      if (wd != 0) p[i].mul_(1 - lr * wd);
      m[i].mul_(b1).add_(gr[i], 1 - b1);
      v[i].mul_(b2).addcmul_(gr[i], gr[i], 1 - b2);
      const torch::Tensor denom = (v[i].sqrt() / std::sqrt(bc2)).add_(eps);
      p[i].addcdiv_(m[i], denom, -lr / bc1);
    }
  }
}

void DataParallel::save_shard(const std::string& path, const ArchiveStamp& stamp) const {
  torch::serialize::OutputArchive ar;
  ar.write("exp_avg", exp_avg_.cpu());
  ar.write("exp_avg_sq", exp_avg_sq_.cpu());
  ar.write("adam_step", torch::tensor(adam_step_, torch::kInt64));
  ar.write("rank", torch::tensor(static_cast<int64_t>(comm_->rank()), torch::kInt64));
  ar.write("world_size", torch::tensor(static_cast<int64_t>(comm_->size()), torch::kInt64));
  write_archive(path, ar, stamp);
}

void DataParallel::load_shard(const std::string& path, const ArchiveStamp& stamp) {
  torch::serialize::InputArchive ar;
  torch::Tensor m, v, step, rank, world;
  read_archive(path, ar, torch::kCPU, stamp);
  try {
    ar.read("exp_avg", m);
    ar.read("exp_avg_sq", v);
    ar.read("adam_step", step);
    ar.read("rank", rank);
    ar.read("world_size", world);
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    throw RuntimeError(path + ": not a readable optimizer shard (" + msg.substr(0, msg.find('\n')) + ")");
  }
  if (rank.item<int64_t>() != comm_->rank() || world.item<int64_t>() != comm_->size() || m.numel() != exp_avg_.numel())
    throw RuntimeError(path + ": an optimizer shard of another layout (rank " + std::to_string(rank.item<int64_t>()) + " of " +
                       std::to_string(world.item<int64_t>()) + ")");
  torch::NoGradGuard ng;
  exp_avg_.copy_(m);
  exp_avg_sq_.copy_(v);
  adam_step_ = step.item<int64_t>();
}

double DataParallel::optimizer_state_gb() const {
  const int64_t n = o_.shard_optimizer ? exp_avg_.numel() : flat_param_.numel();
  return 2.0 * 4.0 * static_cast<double>(n) / 1e9;
}

std::string DataParallel::describe() const {
  char line[320];
  std::snprintf(line, sizeof line, "data parallel: %d ranks over %s, %zu buckets of <= %.3g MB, AdamW state %s: %.3f GB a rank", comm_->size(),
                comm_->backend().c_str(), buckets_.size(), static_cast<double>(o_.bucket_bytes) / (1 << 20),
                o_.shard_optimizer ? "sharded (ZeRO-1)" : "replicated", optimizer_state_gb());
  std::string s = line;
  if (groups_.size() > 1)
    s += "; the experts' gradients summed over the " + std::to_string(groups_[1].comm->size()) + " rank(s) that hold the same experts";
  return s;
}

}  // namespace ufp4
