#include "harness/train/train_step.h"

#include <map>
#include <vector>

namespace ufp4 {

std::unique_ptr<torch::optim::AdamW> make_optimizer(Transformer& model, const OptimizerSection& m) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) (p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(m.lr).betas({m.beta1, m.beta2}).eps(m.eps).weight_decay(m.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(m.lr).betas({m.beta1, m.beta2}).eps(m.eps).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(groups);
}

namespace {

#if TORCH_VERSION_MAJOR >= 2
std::vector<torch::Tensor> defined_grads(torch::optim::AdamW& opt) {
  std::vector<torch::Tensor> grads;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}
#endif

}  // namespace

#if TORCH_VERSION_MAJOR >= 2
torch::Tensor clip_gradients(torch::optim::AdamW& opt, double grad_clip) {
  const std::vector<torch::Tensor> grads = defined_grads(opt);
  if (grads.empty()) return torch::Tensor();
  torch::Tensor total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
  if (grad_clip > 0) at::_foreach_mul_(grads, at::clamp_max(grad_clip / (total + 1e-6), 1.0));
  return total;
}

void fused_adamw_update(torch::optim::AdamW& opt) {
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> p, g, m, v, steps;
    std::map<int64_t, torch::Tensor> step_tensor;  // one device scalar per distinct step count (the kernel only reads them)
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto& slot = opt.state()[param.unsafeGetTensorImpl()];
      if (!slot) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      st.step(st.step() + 1);
      p.push_back(param);
      g.push_back(param.grad());
      m.push_back(st.exp_avg());
      v.push_back(st.exp_avg_sq());
      torch::Tensor& t = step_tensor[st.step()];
      if (!t.defined()) t = torch::full({}, static_cast<double>(st.step()), param.options().dtype(torch::kFloat32));
      steps.push_back(t);
    }
    if (p.empty()) continue;
    at::_fused_adamw_(p, g, m, v, {}, steps, o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      o.amsgrad(), /*maximize=*/false);
  }
}
#endif

torch::Tensor accumulate_gradients(Transformer& model, const std::function<torch::Tensor()>& next_batch, int64_t count,
                                   int64_t scale_accum, int64_t seq_len, const std::function<void()>& before_last) {
  torch::Tensor loss_sum;
  for (int64_t a = 0; a < count; ++a) {
    torch::Tensor batch = next_batch();
    TransformerOutput o = model->loss(batch.slice(1, 0, seq_len), batch.slice(1, 1, seq_len + 1));
    if (a + 1 == count && before_last) before_last();
    (o.loss / static_cast<double>(scale_accum)).backward();
    torch::Tensor l = o.lm_loss.detach().to(torch::kFloat64);  // summed in double, read once
    loss_sum = a == 0 ? l : loss_sum + l;
  }
  return loss_sum;
}

double clip_and_update(Transformer& model, torch::optim::AdamW& opt, double grad_clip) {
#if TORCH_VERSION_MAJOR >= 2
  if (model->parameters().front().is_cuda() && !opt.param_groups().front().params().empty()) {
    const torch::Tensor norm = clip_gradients(opt, grad_clip);
    fused_adamw_update(opt);
    return norm.defined() ? norm.item<double>() : 0.0;
  }
#endif
  const double norm = torch::nn::utils::clip_grad_norm_(model->parameters(), grad_clip > 0 ? grad_clip : 1e30);
  opt.step();
  return norm;
}

StepStats train_step(Transformer& model, torch::optim::AdamW& opt, const std::function<torch::Tensor()>& next_batch, int64_t accum,
                     int64_t seq_len, double grad_clip) {
  // Gradients to none, not to zero (LibTorch 2's default, done by hand for 1.13): an expert that gets
  // no tokens has no gradient, so clipping and AdamW skip it alike whether or not the run was resumed
  // (a zero gradient left from before a checkpoint would still decay and move its weights).
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
  const torch::Tensor loss_sum = accumulate_gradients(model, next_batch, accum, accum, seq_len);
  StepStats st;
  st.grad_norm = clip_and_update(model, opt, grad_clip);
  st.loss = loss_sum.item<double>() / static_cast<double>(accum);
  return st;
}

}  // namespace ufp4
