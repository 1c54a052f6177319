#include "models/deterministic_attention.h"

#include <atomic>
#include <cmath>
#include <iostream>

#include "kernels/attention/attention_backward.h"
#include "models/fused_ops.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ufp4 {

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 5)
#define UFP4_CUDNN_FLASH_ATTENTION 1
#endif

#if defined(UFP4_CUDNN_FLASH_ATTENTION)
namespace {

std::atomic<bool> cudnn_refused{false};  // set when cuDNN's forward threw once: every later call falls back

// Our backward (kernels/attention/attention_backward.h) into dq, dk, dv (any views of 16-byte rows) where it
// applies: BF16, head dimension 64, S a multiple of 64, aligned rows; with rope_cos defined, dq and dk
// rotated back by RoPE (the tables as fused_qkv_rope takes them). False: flash's is the caller's to run.
bool own_backward(const torch::Tensor& dout_in, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                  const torch::Tensor& lse, const torch::Tensor& dq, const torch::Tensor& dk, const torch::Tensor& dv, const torch::Tensor& rope_cos,
                  const torch::Tensor& rope_sin) {
#ifdef UFP4_WITH_CUDA
  if (!own_attention_backward_enabled() || q.scalar_type() != torch::kBFloat16 || q.size(3) != kAttnHeadDim) return false;
  for (const torch::Tensor* t : {&q, &k, &v, &o, &dout_in, &dq, &dk, &dv})
    if (t->scalar_type() != torch::kBFloat16 || t->stride(3) != 1) return false;
  if (rope_cos.defined() && (rope_cos.scalar_type() != torch::kFloat32 || !rope_cos.is_contiguous() || rope_cos.size(-1) != kAttnHeadDim / 2 ||
                             !rope_sin.is_contiguous() || rope_sin.sizes() != rope_cos.sizes() || rope_cos.size(0) < q.size(2)))
    return false;
  const torch::Tensor dout = dout_in.stride(0) % 8 || dout_in.stride(1) % 8 || dout_in.stride(2) % 8 ? dout_in.contiguous() : dout_in;
  auto strides = [](const torch::Tensor& t) { return AttnStrides{t.stride(0), t.stride(1), t.stride(2)}; };
  auto bf16 = [](const torch::Tensor& t) { return static_cast<const uint16_t*>(t.data_ptr()); };
  AttentionBackwardIO io;
  io.batch = q.size(0), io.heads = q.size(1), io.kv_heads = k.size(1), io.seq = q.size(2);
  io.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));  // cuDNN's forward's default
  io.q = bf16(q), io.k = bf16(k), io.v = bf16(v), io.o = bf16(o), io.dout = bf16(dout), io.lse = lse.data_ptr<float>();
  io.q_st = strides(q), io.k_st = strides(k), io.v_st = strides(v), io.o_st = strides(o), io.dout_st = strides(dout);
  io.dq = static_cast<uint16_t*>(dq.data_ptr()), io.dk = static_cast<uint16_t*>(dk.data_ptr()), io.dv = static_cast<uint16_t*>(dv.data_ptr());
  io.dq_st = strides(dq), io.dk_st = strides(dk), io.dv_st = strides(dv);
  if (rope_cos.defined()) io.rope_cos = rope_cos.data_ptr<float>(), io.rope_sin = rope_sin.data_ptr<float>();
  if (!attention_backward_cuda_applies(io)) return false;
  const torch::Tensor ws = torch::empty({static_cast<int64_t>(attention_backward_workspace_bytes(io))}, q.options().dtype(torch::kUInt8));
  io.workspace = ws.data_ptr();
  cuda_attention_backward(io, at::cuda::getCurrentCUDAStream(q.device().index()).stream());
  return true;
#else
  (void)dout_in, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dq, (void)dk, (void)dv, (void)rope_cos, (void)rope_sin;
  return false;
#endif
}

// cuDNN's forward: o, and the log-sum-exp as flash's backward takes it ([B, H, S], from cuDNN's [B, H, S, 1]).
std::pair<torch::Tensor, torch::Tensor> cudnn_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true, 0.0, /*is_causal=*/true,
                                                   /*return_debug_mask=*/false);
  return {std::get<0>(r), std::get<1>(r)};
}

// Flash's deterministic backward (with LibTorch's switch on). Without dropout and packed sequences the
// sequence offsets are undefined and the RNG state is not read: placeholders as flash's own forward makes them.
std::vector<torch::Tensor> flash_backward(const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& o, const torch::Tensor& lse) {
  const int64_t S = q.size(2);
  torch::Tensor rng = torch::empty({}, torch::TensorOptions().dtype(torch::kLong));
  auto g = at::_scaled_dot_product_flash_attention_backward(dout, q, k, v, o, lse, torch::Tensor(), torch::Tensor(), S, S, 0.0,
                                                            /*is_causal=*/true, rng, rng);
  return {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
}

torch::Tensor flash_lse(const torch::Tensor& cudnn_lse, const torch::Tensor& q) {
  return cudnn_lse.contiguous().view({q.size(0), q.size(1), q.size(2)});
}

struct CudnnForwardFlashBackward : public torch::autograd::Function<CudnnForwardFlashBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    auto [o, lse] = cudnn_forward(q, k, v);
    ctx->save_for_backward({q, k, v, o, lse});
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &o = s[3];
    const torch::Tensor lse = flash_lse(s[4], q);
    torch::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
    if (own_backward(grads[0], q, k, v, o, lse, dq, dk, dv, torch::Tensor(), torch::Tensor())) return {dq, dk, dv};
    return flash_backward(grads[0], q, k, v, o, lse);
  }
};

// The packed projection's RoPE (fused_qkv_rope) and the attention as one autograd node, so that the
// backward hands our kernel the projection's gradient to write: dQ rotated back as the kernel converts
// it, dK as it stores it, dV in place. Two nodes would write the three, then read them back to rotate
// and pack them (a pass over the gradients and a launch more). Same bits.
struct CudnnQkvRopeAttention : public torch::autograd::Function<CudnnQkvRopeAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                               int64_t heads, int64_t kv_heads) {
    const std::vector<torch::Tensor> r = fused_qkv_rope(qkv, cos, sin, heads, kv_heads);  // (no graph inside a node's forward)
    auto [o, lse] = cudnn_forward(r[0], r[1], r[2]);
    ctx->save_for_backward({r[0], r[1], r[2], o, lse, cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["kv_heads"] = kv_heads;
    ctx->saved_data["sizes"] = qkv.sizes().vec();
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &o = s[3], &cos = s[5], &sin = s[6];
    const torch::Tensor lse = flash_lse(s[4], q);
    const int64_t heads = ctx->saved_data["heads"].toInt(), kv_heads = ctx->saved_data["kv_heads"].toInt();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    torch::Tensor dqkv = torch::empty(sizes, q.options());
    const std::vector<torch::Tensor> d = qkv_head_views(dqkv, heads, kv_heads);
    if (!own_backward(grads[0], q, k, v, o, lse, d[0], d[1], d[2], cos, sin))
      dqkv = fused_qkv_rope_backward(flash_backward(grads[0], q, k, v, o, lse), cos, sin, heads, kv_heads, sizes);
    return {dqkv, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

namespace {
std::atomic<bool> own_enabled{true};
}

void use_own_attention_backward(bool on) { own_enabled.store(on); }
bool own_attention_backward_enabled() { return own_enabled.load(); }

bool deterministic_causal_attention_applies(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if defined(UFP4_CUDNN_FLASH_ATTENTION)
  if (cudnn_refused.load(std::memory_order_relaxed)) return false;
  if (!q.is_cuda() || q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  if (q.scalar_type() != torch::kBFloat16 && q.scalar_type() != torch::kHalf) return false;
  if (k.scalar_type() != q.scalar_type() || v.scalar_type() != q.scalar_type()) return false;
  const int64_t hd = q.size(3);
  if (hd % 8 || hd > 128 || k.size(3) != hd || v.size(3) != hd) return false;
  if (k.size(1) == 0 || q.size(1) % k.size(1) || v.size(1) != k.size(1)) return false;
  if (k.size(2) != q.size(2) || v.size(2) != q.size(2)) return false;
  return q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1;
#else
  (void)q;
  (void)k;
  (void)v;
  return false;
#endif
}

#if defined(UFP4_CUDNN_FLASH_ATTENTION)
namespace {
// f() or, where cuDNN's forward throws, undefined (said once; every later call falls back).
template <class F>
torch::Tensor unless_cudnn_refuses(F f) {
  try {
    return f();
  } catch (const c10::Error& e) {
    if (!cudnn_refused.exchange(true))
      std::cerr << "attention: cuDNN's fused forward refused the call; scaled_dot_product_attention from now on (" << e.what_without_backtrace()
                << ")\n";
  }
  return torch::Tensor();
}
}  // namespace
#endif

torch::Tensor deterministic_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if defined(UFP4_CUDNN_FLASH_ATTENTION)
  if (deterministic_causal_attention_applies(q, k, v)) return unless_cudnn_refuses([&] { return CudnnForwardFlashBackward::apply(q, k, v); });
#endif
  return torch::Tensor();
}

torch::Tensor deterministic_qkv_rope_attention(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin, int64_t heads,
                                               int64_t kv_heads) {
#if defined(UFP4_CUDNN_FLASH_ATTENTION)
  if (!own_attention_backward_enabled() || !fused_qkv_rope_applies(qkv, cos, sin, heads, kv_heads)) return torch::Tensor();
  const std::vector<torch::Tensor> in = qkv_head_views(qkv, heads, kv_heads);
  if (in[0].size(3) != kAttnHeadDim || !deterministic_causal_attention_applies(in[0], in[1], in[2])) return torch::Tensor();
  return unless_cudnn_refuses([&] { return CudnnQkvRopeAttention::apply(qkv, cos, sin, heads, kv_heads); });
#else
  (void)qkv, (void)cos, (void)sin, (void)heads, (void)kv_heads;
  return torch::Tensor();
#endif
}

}  // namespace ufp4
