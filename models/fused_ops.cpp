#include "models/fused_ops.h"

#include "common/error.h"
#include "kernels/fused/fused_kernels.h"
#include "models/quant_ops.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ufp4 {

namespace {

#ifdef UFP4_WITH_CUDA
bool cuda_takes(const torch::Tensor& t) { return t.is_contiguous() && fused_cuda_applies(t.size(-1), t.data_ptr()); }
#define UFP4_CUDA_OP(f) f
#else
#define UFP4_CUDA_OP(f) nullptr  // never called: check_kernel_device rejects CUDA tensors in such builds
#endif

// The CUDA kernel on `on`'s device and current stream, or the CPU reference.
template <class IO>
struct Launcher { using type = void (*)(const IO&, cudaStream_t); };  // a non-deduced context: nullptr fits
template <class IO>
void run_op(const torch::Tensor& on, const IO& io, typename Launcher<IO>::type cuda, void (*reference)(const IO&)) {
  if (!on.is_cuda()) return reference(io);
#ifdef UFP4_WITH_CUDA
  cuda(io, at::cuda::getCurrentCUDAStream(on.device().index()).stream());
#endif
}

// The fused norm over rows x2 [rows, d] (contiguous) with FP32 weight w: y and the rows' r; with res2
// defined, x2 + res2 goes to `sum` and is normalized instead (kernels/fused/fused_kernels.h, RmsNormIO).
void rms_norm_forward_rows(const torch::Tensor& x2, const torch::Tensor& res2, const torch::Tensor& w, double eps, const torch::Tensor& sum,
                           const torch::Tensor& y, const torch::Tensor& r, const char* what) {
  const int64_t d = x2.size(1);
  if (w.dim() != 1 || w.size(0) != d) throw Error(std::string(what) + ": weight of shape " + std::to_string(w.numel()) + " for " + std::to_string(d) + " features");
  if (x2.is_cuda() && !fused_rms_norm_applies(x2))
    throw Error(std::string(what) + ": the CUDA kernel takes a last dimension that is a multiple of 8 up to 2048, got " + std::to_string(d));
  RmsNormIO io;
  io.dtype = dtype_of(x2, (std::string(what) + " input").c_str());
  io.rows = x2.size(0);
  io.d = d;
  io.eps = static_cast<float>(eps);
  io.x = x2.data_ptr();
  io.residual = res2.defined() ? res2.data_ptr() : nullptr;
  io.sum = res2.defined() ? sum.data_ptr() : nullptr;
  io.w = w.data_ptr<float>();
  io.y = y.data_ptr();
  io.r = r.data_ptr<float>();
  run_op(x2, io, UFP4_CUDA_OP(cuda_rms_norm_forward), reference_rms_norm_forward);
}

// Its backward from the normalized rows x2, w and r: dx (plus dsum where defined) and dw.
std::pair<torch::Tensor, torch::Tensor> rms_norm_backward_rows(const torch::Tensor& x2, const torch::Tensor& w, const torch::Tensor& r, double eps,
                                                               const torch::Tensor& dy, const torch::Tensor& dsum) {
  const int64_t d = x2.size(1);
  torch::Tensor dx = torch::empty_like(x2), dw = torch::empty({d}, w.options());
  RmsNormIO io;
  io.dtype = dtype_of(x2, "rms_norm input");
  io.rows = x2.size(0);
  io.d = d;
  io.eps = static_cast<float>(eps);
  io.x = x2.data_ptr();
  io.w = w.data_ptr<float>();
  io.r = r.data_ptr<float>();
  io.dy = dy.data_ptr();
  io.dsum = dsum.defined() ? dsum.data_ptr() : nullptr;
  io.dx = dx.data_ptr();
  io.dw = dw.data_ptr<float>();
  torch::Tensor partials;  // the CUDA kernel's per-group weight-gradient sums
  if (x2.is_cuda()) {
    partials = torch::empty({rms_norm_partials(io.rows, d)}, w.options());
    io.partials = partials.data_ptr<float>();
  }
  run_op(x2, io, UFP4_CUDA_OP(cuda_rms_norm_backward), reference_rms_norm_backward);
  return {dx, dw};
}

// A gradient as the norm's rows [rows, d] in the input's dtype.
torch::Tensor grad_rows(const torch::Tensor& g, const torch::Tensor& x2) { return g.to(x2.scalar_type()).contiguous().view({-1, x2.size(1)}); }

struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    const int64_t d = x.size(-1);
    torch::Tensor x2 = x.contiguous().view({-1, d}), w = weight.to(torch::kFloat32).contiguous();
    torch::Tensor y = torch::empty_like(x2), r = torch::empty({x2.size(0)}, x2.options().dtype(torch::kFloat32));
    rms_norm_forward_rows(x2, torch::Tensor(), w, eps, torch::Tensor(), y, r, "rms_norm");
    ctx->save_for_backward({x2, w, r});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return y.view(x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dx, dw] = rms_norm_backward_rows(saved[0], saved[1], saved[2], ctx->saved_data["eps"].toDouble(), grad_rows(grads[0], saved[0]),
                                           torch::Tensor());
    const auto wt = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    return {dx.view(grads[0].sizes()), dw.to(wt), torch::Tensor()};
  }
};

// s = x + residual (LibTorch's rounding), y = RMSNorm(s): one pass where the add and the norm were two; the
// backward adds s's gradient from its other use (the next residual add) to the norm's, as autograd's sum
// would, and hands the total to both inputs. The bits of x + residual followed by fused_rms_norm.
struct AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& residual,
                                                const torch::Tensor& weight, double eps) {
    if (residual.sizes() != x.sizes() || residual.scalar_type() != x.scalar_type() || residual.device() != x.device())
      throw Error("add_rms_norm: the residual's shape, dtype or device differs from the input's");
    const int64_t d = x.size(-1);
    torch::Tensor x2 = x.contiguous().view({-1, d}), res2 = residual.contiguous().view({-1, d}), w = weight.to(torch::kFloat32).contiguous();
    torch::Tensor sum = torch::empty_like(x2), y = torch::empty_like(x2), r = torch::empty({x2.size(0)}, x2.options().dtype(torch::kFloat32));
    rms_norm_forward_rows(x2, res2, w, eps, sum, y, r, "add_rms_norm");
    ctx->save_for_backward({sum, w, r});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    return {sum.view(x.sizes()), y.view(x.sizes())};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor& s2 = saved[0];
    const std::vector<int64_t> sizes = grads[1].defined() ? grads[1].sizes().vec() : grads[0].sizes().vec();
    torch::Tensor dy = grads[1].defined() ? grad_rows(grads[1], s2) : torch::zeros_like(s2);
    torch::Tensor dsum = grads[0].defined() ? grad_rows(grads[0], s2) : torch::Tensor();  // undefined: s had no other use
    auto [dx, dw] = rms_norm_backward_rows(s2, saved[1], saved[2], ctx->saved_data["eps"].toDouble(), dy, dsum);
    const auto wt = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    torch::Tensor g = dx.view(sizes);
    return {g, g, dw.to(wt), torch::Tensor()};
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
    run_op(logits, io, UFP4_CUDA_OP(cuda_cross_entropy_forward), reference_cross_entropy_forward);
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
    run_op(logits, io, UFP4_CUDA_OP(cuda_cross_entropy_backward), reference_cross_entropy_backward);
    return {dlogits, torch::Tensor(), torch::Tensor()};
  }
};

struct SwiGluFunction : public torch::autograd::Function<SwiGluFunction> {
  static SwiGluIO io_for(const torch::Tensor& gu2) {
    SwiGluIO io;
    io.dtype = dtype_of(gu2, "swiglu input");
    io.rows = gu2.size(0);
    io.hidden = gu2.size(1) / 2;
    io.gu = gu2.data_ptr();
    return io;
  }

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gu) {
    const int64_t two_h = gu.size(-1);
    if (two_h % 2) throw Error("swiglu: the last dimension (" + std::to_string(two_h) + ") must be even (gate and up halves)");
    torch::Tensor gu2 = gu.contiguous().view({-1, two_h});
    if (gu2.is_cuda() && !fused_swiglu_applies(gu2))
      throw Error("swiglu: the CUDA kernel takes halves that are a multiple of 8 wide, got " + std::to_string(two_h / 2));
    torch::Tensor out = torch::empty({gu2.size(0), two_h / 2}, gu2.options());
    SwiGluIO io = io_for(gu2);
    io.out = out.data_ptr();
    run_op(gu2, io, UFP4_CUDA_OP(cuda_swiglu_forward), reference_swiglu_forward);
    ctx->save_for_backward({gu2});
    std::vector<int64_t> shape(gu.sizes().begin(), gu.sizes().end());
    shape.back() = two_h / 2;
    return out.view(shape);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const torch::Tensor gu2 = ctx->get_saved_variables()[0];
    torch::Tensor dout = grads[0].to(gu2.scalar_type()).contiguous().view({gu2.size(0), gu2.size(1) / 2});
    torch::Tensor dgu = torch::empty_like(gu2);
    SwiGluIO io = io_for(gu2);
    io.dout = dout.data_ptr();
    io.dgu = dgu.data_ptr();
    run_op(gu2, io, UFP4_CUDA_OP(cuda_swiglu_backward), reference_swiglu_backward);
    std::vector<int64_t> shape(grads[0].sizes().begin(), grads[0].sizes().end());
    shape.back() = gu2.size(1);
    return {dgu.view(shape)};
  }
};

// x [B, H, S, hd] and y [B, H, S, hd], any strides with the last dimension contiguous.
RopeIO rope_io(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& y, bool inverse) {
  RopeIO io;
  io.dtype = dtype_of(x, "rope input");
  io.batch = x.size(0);
  io.heads = x.size(1);
  io.seq = x.size(2);
  io.head_dim = x.size(3);
  io.x = x.data_ptr();
  io.stride_b = x.stride(0);
  io.stride_h = x.stride(1);
  io.stride_s = x.stride(2);
  io.cos = cos.data_ptr<float>();
  io.sin = sin.data_ptr<float>();
  io.inverse = inverse;
  io.y = y.data_ptr();
  io.y_stride_b = y.stride(0);
  io.y_stride_h = y.stride(1);
  io.y_stride_s = y.stride(2);
  return io;
}

// [B, H, S, hd] viewed on [B, S, H, hd] memory: the layout SDPA's kernels take and give, so neither the
// attention nor the reshape to [B, S, H hd] around it copies (forward or backward).
torch::Tensor empty_heads_inner(const torch::Tensor& like) {
  return torch::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options().memory_format(torch::MemoryFormat::Contiguous))
      .transpose(1, 2);
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    torch::Tensor y = empty_heads_inner(x);
    run_op(x, rope_io(x, cos, sin, y, false), UFP4_CUDA_OP(cuda_rope), reference_rope);
    ctx->save_for_backward({cos, sin});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor dy = grads[0], dx = empty_heads_inner(dy);
    if (!fused_rope_applies(dy, saved[0], saved[1])) dy = dy.contiguous();  // the kernel reads any 16-byte strides
    run_op(dy, rope_io(dy, saved[0], saved[1], dx, true), UFP4_CUDA_OP(cuda_rope), reference_rope);
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

// q, k and v of a packed projection [B, S, (H + 2 KV) hd] as [B, heads, S, hd] views.
std::vector<torch::Tensor> qkv_views(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads) {
  const int64_t B = qkv.size(0), S = qkv.size(1), hd = qkv.size(2) / (heads + 2 * kv_heads);
  auto parts = qkv.split({heads * hd, kv_heads * hd, kv_heads * hd}, -1);
  return {parts[0].view({B, S, heads, hd}).transpose(1, 2), parts[1].view({B, S, kv_heads, hd}).transpose(1, 2),
          parts[2].view({B, S, kv_heads, hd}).transpose(1, 2)};
}

HeadsView heads_view(const torch::Tensor& t) {
  HeadsView v;
  v.p = t.data_ptr();
  v.stride_b = t.stride(0);
  v.stride_h = t.stride(1);
  v.stride_s = t.stride(2);
  return v;
}

QkvRopeIO qkv_rope_io(const std::vector<torch::Tensor>& in, const std::vector<torch::Tensor>& out, const torch::Tensor& cos,
                      const torch::Tensor& sin, bool inverse) {
  QkvRopeIO io;
  io.dtype = dtype_of(in[0], "qkv rope input");
  io.batch = in[0].size(0);
  io.heads = in[0].size(1);
  io.kv_heads = in[1].size(1);
  io.seq = in[0].size(2);
  io.head_dim = in[0].size(3);
  io.cos = cos.data_ptr<float>();
  io.sin = sin.data_ptr<float>();
  io.inverse = inverse;
  for (int i = 0; i < 3; ++i) {
    io.in[i] = heads_view(in[i]);
    io.out[i] = heads_view(out[i]);
  }
  return io;
}

struct QkvRopeFunction : public torch::autograd::Function<QkvRopeFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv, const torch::Tensor& cos,
                                                const torch::Tensor& sin, int64_t heads, int64_t kv_heads) {
    const std::vector<torch::Tensor> in = qkv_views(qkv, heads, kv_heads);
    const std::vector<torch::Tensor> out = {empty_heads_inner(in[0]), empty_heads_inner(in[1]), empty_heads_inner(in[2])};
    run_op(qkv, qkv_rope_io(in, out, cos, sin, false), UFP4_CUDA_OP(cuda_qkv_rope), reference_qkv_rope);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    ctx->saved_data["sizes"] = qkv.sizes().vec();
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const int64_t heads = ctx->saved_data["heads"].toInt(), kv_heads = ctx->saved_data["kv_heads"].toInt();
    torch::Tensor dqkv = fused_qkv_rope_backward(grads, saved[0], saved[1], heads, kv_heads, ctx->saved_data["sizes"].toIntVector());
    return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::vector<torch::Tensor> qkv_head_views(const torch::Tensor& qkv, int64_t heads, int64_t kv_heads) { return qkv_views(qkv, heads, kv_heads); }

torch::Tensor fused_qkv_rope_backward(const std::vector<torch::Tensor>& grads, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                                      int64_t kv_heads, const std::vector<int64_t>& sizes) {
  const torch::TensorOptions opts = grads[0].defined() ? grads[0].options() : (grads[1].defined() ? grads[1].options() : grads[2].options());
  torch::Tensor dqkv = torch::empty(sizes, opts);
  const std::vector<torch::Tensor> out = qkv_views(dqkv, heads, kv_heads);
  std::vector<torch::Tensor> in(3);
  for (int i = 0; i < 3; ++i) in[i] = grads[i].defined() ? grads[i] : torch::zeros_like(out[i]);
  QkvRopeIO io = qkv_rope_io(in, out, cos, sin, true);
#ifdef UFP4_WITH_CUDA
  if (dqkv.is_cuda() && !qkv_rope_cuda_applies(io)) {  // gradients of other strides: the kernel reads 16-byte rows
    for (auto& t : in) t = t.contiguous();
    io = qkv_rope_io(in, out, cos, sin, true);
  }
#endif
  run_op(dqkv, io, UFP4_CUDA_OP(cuda_qkv_rope), reference_qkv_rope);
  return dqkv;
}

bool fused_rope_applies(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const bool dtype_ok = x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16;
  if (!dtype_ok || x.dim() != 4 || x.numel() == 0 || x.size(3) % 2 || x.stride(3) != 1) return false;
  const int64_t half = x.size(3) / 2;
  for (const torch::Tensor* t : {&cos, &sin})
    if (t->scalar_type() != torch::kFloat32 || t->dim() != 2 || !t->is_contiguous() || t->size(0) < x.size(2) || t->size(1) != half ||
        t->device() != x.device())
      return false;
  if (x.device().is_cpu()) return true;
#ifdef UFP4_WITH_CUDA
  RopeIO io = rope_io(x, cos, sin, x, false);  // y: a fresh tensor of the layout empty_heads_inner makes (16-byte aligned)
  io.y_stride_b = io.y_stride_h = io.y_stride_s = 0;
  return x.is_cuda() && rope_cuda_applies(io);
#else
  return false;
#endif
}

torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  check_kernel_device(x, "rope");
  if (!fused_rope_applies(x, cos, sin))
    throw Error("rope: x must be [B, H, S, hd] (float32 or bfloat16, last dimension contiguous, CUDA: hd a multiple of 16 and strides of "
                "16 bytes), cos and sin FP32 [>= S, hd / 2] on its device");
  return RopeFunction::apply(x, cos, sin);
}

bool fused_qkv_rope_applies(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads, int64_t kv_heads) {
  if (heads <= 0 || kv_heads <= 0 || qkv.dim() != 3 || qkv.numel() == 0 || qkv.size(2) % (heads + 2 * kv_heads) || qkv.stride(2) != 1)
    return false;
  const std::vector<torch::Tensor> in = qkv_views(qkv, heads, kv_heads);
  if (!fused_rope_applies(in[0], cos, sin) || !fused_rope_applies(in[1], cos, sin)) return false;  // dtype, tables, head_dim, strides
  if (qkv.device().is_cpu()) return true;
#ifdef UFP4_WITH_CUDA
  QkvRopeIO io = qkv_rope_io(in, in, cos, sin, false);  // out: fresh tensors of empty_heads_inner's layout (16-byte aligned)
  for (auto& v : io.out) v.stride_b = v.stride_h = v.stride_s = 0;
  return qkv.is_cuda() && qkv_rope_cuda_applies(io);
#else
  return false;
#endif
}

std::vector<torch::Tensor> fused_qkv_rope(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                                          int64_t kv_heads) {
  check_kernel_device(qkv, "qkv rope");
  if (!fused_qkv_rope_applies(qkv, cos, sin, heads, kv_heads))
    throw Error("qkv rope: qkv must be [B, S, (heads + 2 kv_heads) hd] (float32 or bfloat16, last dimension contiguous, CUDA: hd a multiple "
                "of 16 and 16-byte rows), cos and sin FP32 [>= S, hd / 2] on its device");
  return QkvRopeFunction::apply(qkv, cos, sin, heads, kv_heads);
}

bool fused_swiglu_applies(const torch::Tensor& gu) {
  const bool dtype_ok = gu.scalar_type() == torch::kFloat32 || gu.scalar_type() == torch::kBFloat16;
  if (!dtype_ok || gu.dim() < 1 || gu.numel() == 0 || gu.size(-1) % 2) return false;
  if (gu.device().is_cpu()) return true;
#ifdef UFP4_WITH_CUDA
  return gu.is_cuda() && (gu.size(-1) / 2) % 8 == 0 && cuda_takes(gu);
#else
  return false;
#endif
}

torch::Tensor fused_swiglu(const torch::Tensor& gu) {
  check_kernel_device(gu, "swiglu");
  return SwiGluFunction::apply(gu);
}

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

std::pair<torch::Tensor, torch::Tensor> fused_add_rms_norm(const torch::Tensor& x, const torch::Tensor& residual, const torch::Tensor& weight,
                                                           double eps) {
  check_kernel_device(x, "add_rms_norm");
  if (weight.device() != x.device()) throw Error("add_rms_norm: weight and input are on different devices");
  auto out = AddRmsNormFunction::apply(x, residual, weight, eps);
  return {out[0], out[1]};
}

torch::Tensor fused_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets, int64_t ignore_index) {
  check_kernel_device(logits, "cross_entropy");
  return CrossEntropyFunction::apply(logits, targets, ignore_index);
}

namespace {

const int64_t* index_ptr(const torch::Tensor& t) { return t.data_ptr<int64_t>(); }

// t contiguous and 16-byte aligned (the MoE kernels' row vectors): copied only when it is neither.
torch::Tensor vector_rows(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 ? c.clone() : c;
}

// MoE combine: the routing's index tensors ride along as saved data (no gradient).
struct MoeCombineFunction : public torch::autograd::Function<MoeCombineFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& y_in, const torch::Tensor& w_in,
                               const torch::Tensor& inverse, const torch::Tensor& order, const torch::Tensor& kept) {
    const torch::Tensor y = vector_rows(y_in), w = w_in.contiguous();
    const int64_t T = w.size(0), k = w.size(1), d = y.size(1);
    torch::Tensor out = torch::empty({T, d}, y.options());
    MoeCombineIO io;
    io.tokens = T;
    io.top_k = k;
    io.d = d;
    io.y = static_cast<const uint16_t*>(y.data_ptr());
    io.inverse = index_ptr(inverse);
    io.kept = kept.numel() ? kept.data_ptr<bool>() : nullptr;
    io.w = static_cast<const uint16_t*>(w.data_ptr());
    io.out = static_cast<uint16_t*>(out.data_ptr());
    run_op(y, io, UFP4_CUDA_OP(cuda_moe_combine_forward), reference_moe_combine_forward);
    ctx->save_for_backward({y, w});
    ctx->saved_data["inverse"] = inverse;
    ctx->saved_data["order"] = order;
    ctx->saved_data["kept"] = kept;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &y = saved[0], &w = saved[1];
    const torch::Tensor inverse = ctx->saved_data["inverse"].toTensor(), order = ctx->saved_data["order"].toTensor(),
                        kept = ctx->saved_data["kept"].toTensor();
    const torch::Tensor dout = vector_rows(grads[0]);
    torch::Tensor dy = torch::empty_like(y), dw = torch::empty_like(w);
    MoeCombineIO io;
    io.tokens = w.size(0);
    io.top_k = w.size(1);
    io.d = y.size(1);
    io.y = static_cast<const uint16_t*>(y.data_ptr());
    io.inverse = index_ptr(inverse);
    io.order = index_ptr(order);
    io.kept = kept.numel() ? kept.data_ptr<bool>() : nullptr;
    io.w = static_cast<const uint16_t*>(w.data_ptr());
    io.dout = static_cast<const uint16_t*>(dout.data_ptr());
    io.dy = static_cast<uint16_t*>(dy.data_ptr());
    io.dw = static_cast<uint16_t*>(dw.data_ptr());
    run_op(y, io, UFP4_CUDA_OP(cuda_moe_combine_backward), reference_moe_combine_backward);
    return {dy, dw, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fused_moe_combine_applies(const torch::Tensor& rows, int64_t top_k) {
  if (rows.scalar_type() != torch::kBFloat16 || rows.dim() != 2 || rows.numel() == 0 || top_k < 1 || top_k > kMoeMaxTopK) return false;
  if (rows.device().is_cpu()) return true;
#ifdef UFP4_WITH_CUDA
  return rows.is_cuda() && moe_combine_cuda_applies(rows.size(1), top_k) && rows.is_contiguous() && fused_cuda_applies(rows.size(1), rows.data_ptr());
#else
  return false;
#endif
}

torch::Tensor fused_moe_combine(const torch::Tensor& y, const torch::Tensor& w, const torch::Tensor& inverse, const torch::Tensor& order,
                                const torch::Tensor& kept) {
  check_kernel_device(y, "moe combine");
  const int64_t A = y.size(0);
  if (w.scalar_type() != torch::kBFloat16 || w.dim() != 2 || w.size(0) * w.size(1) != A || w.device() != y.device())
    throw Error("moe combine: weights must be bfloat16 [tokens, k] on the rows' device with tokens x k = " + std::to_string(A) + " rows");
  if (inverse.numel() != A || order.numel() != A || (kept.defined() && kept.numel() != A))
    throw Error("moe combine: inverse, order and kept must hold one entry a row (" + std::to_string(A) + ")");
  return MoeCombineFunction::apply(y, w, inverse.contiguous(), order.contiguous(),
                                   kept.defined() ? kept.contiguous() : torch::empty({0}, y.options().dtype(torch::kBool)));
}

torch::Tensor fused_moe_dispatch_backward(const torch::Tensor& g_in, const torch::Tensor& inverse, int64_t top_k) {
  check_kernel_device(g_in, "moe dispatch backward");
  if (g_in.dim() != 2 || top_k < 1 || g_in.size(0) % top_k || inverse.numel() != g_in.size(0))
    throw Error("moe dispatch backward: " + std::to_string(top_k) + " rows a token and one inverse entry a row");
  const torch::Tensor g = vector_rows(g_in), inv = inverse.contiguous();
  torch::Tensor dx = torch::empty({g.size(0) / top_k, g.size(1)}, g.options());
  MoeDispatchBackwardIO io;
  io.tokens = dx.size(0);
  io.top_k = top_k;
  io.d = g.size(1);
  io.g = static_cast<const uint16_t*>(g.data_ptr());
  io.inverse = index_ptr(inv);
  io.dx = static_cast<uint16_t*>(dx.data_ptr());
  run_op(g, io, UFP4_CUDA_OP(cuda_moe_dispatch_backward), reference_moe_dispatch_backward);
  return dx;
}

}  // namespace ufp4
