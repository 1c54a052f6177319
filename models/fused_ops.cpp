#include "models/fused_ops.h"

#include "harness/error.h"
#include "kernels/fused_ops.h"
#include "models/quant_ops.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ufp4 {

namespace {

#ifdef UFP4_WITH_CUDA
bool cuda_takes(const torch::Tensor& t) { return t.is_contiguous() && fused_cuda_applies(t.size(-1), t.data_ptr()); }
cudaStream_t stream_of(const torch::Tensor& t) { return at::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
#endif

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    const int64_t d = x.size(-1);
    if (weight.dim() != 1 || weight.size(0) != d)
      throw Error("rms_norm: weight of shape " + std::to_string(weight.numel()) + " for " + std::to_string(d) + " features");
    RmsNormIO io;
    io.dtype = dtype_of(x, "rms_norm input");
    torch::Tensor x2 = x.contiguous().view({-1, d}), w = weight.to(torch::kFloat32).contiguous();
    if (x2.is_cuda() && !fused_rms_norm_applies(x2))
      throw Error("rms_norm: the CUDA kernel takes a last dimension that is a multiple of 8 up to 2048, got " + std::to_string(d));
    torch::Tensor y = torch::empty_like(x2), r = torch::empty({x2.size(0)}, x2.options().dtype(torch::kFloat32));
    io.rows = x2.size(0);
    io.d = d;
    io.eps = static_cast<float>(eps);
    io.x = x2.data_ptr();
    io.w = w.data_ptr<float>();
    io.y = y.data_ptr();
    io.r = r.data_ptr<float>();
    if (x.is_cuda()) {
#ifdef UFP4_WITH_CUDA
      cuda_rms_norm_forward(io, stream_of(x));
#endif
    } else {
      reference_rms_norm_forward(io);
    }
    ctx->save_for_backward({x2, w, r});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return y.view(x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x2 = saved[0], &w = saved[1], &r = saved[2];
    const int64_t d = x2.size(1);
    torch::Tensor dy = grads[0].to(x2.scalar_type()).contiguous().view({-1, d});
    torch::Tensor dx = torch::empty_like(x2), dw = torch::empty({d}, w.options());
    RmsNormIO io;
    io.dtype = dtype_of(x2, "rms_norm input");
    io.rows = x2.size(0);
    io.d = d;
    io.eps = static_cast<float>(ctx->saved_data["eps"].toDouble());
    io.x = x2.data_ptr();
    io.w = w.data_ptr<float>();
    io.r = r.data_ptr<float>();
    io.dy = dy.data_ptr();
    io.dx = dx.data_ptr();
    io.dw = dw.data_ptr<float>();
    if (x2.is_cuda()) {
#ifdef UFP4_WITH_CUDA
      torch::Tensor partials = torch::empty({rms_norm_partials(io.rows, d)}, w.options());
      io.partials = partials.data_ptr<float>();
      cuda_rms_norm_backward(io, stream_of(x2));
#endif
    } else {
      reference_rms_norm_backward(io);
    }
    const auto wt = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    return {dx.view(grads[0].sizes()), dw.to(wt), torch::Tensor()};
  }
};

struct CrossEntropyFunction : public torch::autograd::Function<CrossEntropyFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits_in, const torch::Tensor& targets_in,
                               int64_t ignore_index) {
    if (logits_in.dim() != 2) throw Error("cross_entropy: expected 2-D logits, got " + std::to_string(logits_in.dim()) + "-D");
    if (targets_in.dim() != 1 || targets_in.size(0) != logits_in.size(0))
      throw Error("cross_entropy: expected " + std::to_string(logits_in.size(0)) + " targets, got shape of " + std::to_string(targets_in.numel()));
    if (targets_in.device() != logits_in.device()) throw Error("cross_entropy: targets and logits are on different devices");
    torch::Tensor logits = logits_in.contiguous(), targets = targets_in.to(torch::kInt64).contiguous();
    if (logits.is_cuda() && !fused_cross_entropy_applies(logits))
      throw Error("cross_entropy: the CUDA kernel takes a vocabulary that is a multiple of 8, got " + std::to_string(logits.size(1)));
    const torch::TensorOptions f32 = logits.options().dtype(torch::kFloat32);
    torch::Tensor loss = torch::empty({logits.size(0)}, f32), lse = torch::empty({logits.size(0)}, f32);
    CrossEntropyIO io;
    io.dtype = dtype_of(logits, "cross_entropy logits");
    io.rows = logits.size(0);
    io.vocab = logits.size(1);
    io.ignore_index = ignore_index;
    io.logits = logits.data_ptr();
    io.targets = targets.data_ptr<int64_t>();
    io.loss = loss.data_ptr<float>();
    io.lse = lse.data_ptr<float>();
    if (logits.is_cuda()) {
#ifdef UFP4_WITH_CUDA
      cuda_cross_entropy_forward(io, stream_of(logits));
#endif
    } else {
      reference_cross_entropy_forward(io);
    }
    torch::Tensor count = targets.ne(ignore_index).sum().to(torch::kFloat32);  // stays on the device: no sync
    ctx->save_for_backward({logits, targets, lse, count});
    ctx->saved_data["ignore_index"] = ignore_index;
    return loss.sum() / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &logits = saved[0], &targets = saved[1], &lse = saved[2], &count = saved[3];
    torch::Tensor scale = (grads[0].to(torch::kFloat32) / count).reshape({1}).contiguous();
    torch::Tensor dlogits = torch::empty_like(logits);
    CrossEntropyIO io;
    io.dtype = dtype_of(logits, "cross_entropy logits");
    io.rows = logits.size(0);
    io.vocab = logits.size(1);
    io.ignore_index = ctx->saved_data["ignore_index"].toInt();
    io.logits = logits.data_ptr();
    io.targets = targets.data_ptr<int64_t>();
    io.lse = lse.data_ptr<float>();
    io.scale = scale.data_ptr<float>();
    io.dlogits = dlogits.data_ptr();
    if (logits.is_cuda()) {
#ifdef UFP4_WITH_CUDA
      cuda_cross_entropy_backward(io, stream_of(logits));
#endif
    } else {
      reference_cross_entropy_backward(io);
    }
    return {dlogits, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fused_rms_norm_applies(const torch::Tensor& x) {
  const bool dtype_ok = x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16;
  if (!dtype_ok || x.dim() < 1 || x.numel() == 0) return false;
  if (x.device().is_cpu()) return true;
#ifdef UFP4_WITH_CUDA
  return x.is_cuda() && x.size(-1) <= 2048 && cuda_takes(x);
#else
  return false;
#endif
}

bool fused_cross_entropy_applies(const torch::Tensor& logits) {
  const bool dtype_ok = logits.scalar_type() == torch::kFloat32 || logits.scalar_type() == torch::kBFloat16;
  if (!dtype_ok || logits.dim() != 2 || logits.numel() == 0) return false;
  if (logits.device().is_cpu()) return true;
#ifdef UFP4_WITH_CUDA
  return logits.is_cuda() && cuda_takes(logits);
#else
  return false;
#endif
}

torch::Tensor fused_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  check_kernel_device(x, "rms_norm");
  if (weight.device() != x.device()) throw Error("rms_norm: weight and input are on different devices");
  return RmsNormFunction::apply(x, weight, eps);
}

torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index) {
  check_kernel_device(logits, "cross_entropy");
  return CrossEntropyFunction::apply(logits, targets, ignore_index);
}

}  // namespace ufp4
