#include "models/deterministic_attention.h"

#include <atomic>
#include <cmath>
#include <iostream>

#include "kernels/attention_backward.h"
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

// Our backward (kernels/attention_backward.h) where it applies: BF16, head dimension 64, S a multiple
// of 64, aligned rows. False: flash's is the caller's to run.
bool own_backward(const torch::Tensor& dout_in, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& o,
                  const torch::Tensor& lse, torch::Tensor& dq, torch::Tensor& dk, torch::Tensor& dv) {
#ifdef UFP4_WITH_CUDA
  if (!own_attention_backward_enabled() || q.scalar_type() != torch::kBFloat16 || q.size(3) != kAttnHeadDim) return false;
  for (const torch::Tensor* t : {&q, &k, &v, &o, &dout_in})
    if (t->scalar_type() != torch::kBFloat16 || t->stride(3) != 1) return false;
  const torch::Tensor dout = dout_in.stride(0) % 8 || dout_in.stride(1) % 8 || dout_in.stride(2) % 8 ? dout_in.contiguous() : dout_in;
  dq = at::empty_like(q);
  dk = at::empty_like(k);
  dv = at::empty_like(v);
  auto strides = [](const torch::Tensor& t) { return AttnStrides{t.stride(0), t.stride(1), t.stride(2)}; };
  auto bf16 = [](const torch::Tensor& t) { return static_cast<const uint16_t*>(t.data_ptr()); };
  AttentionBackwardIO io;
  io.batch = q.size(0), io.heads = q.size(1), io.kv_heads = k.size(1), io.seq = q.size(2);
  io.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3))));  // cuDNN's forward's default
  io.q = bf16(q), io.k = bf16(k), io.v = bf16(v), io.o = bf16(o), io.dout = bf16(dout), io.lse = lse.data_ptr<float>();
  io.q_st = strides(q), io.k_st = strides(k), io.v_st = strides(v), io.o_st = strides(o), io.dout_st = strides(dout);
  io.dq = static_cast<uint16_t*>(dq.data_ptr()), io.dk = static_cast<uint16_t*>(dk.data_ptr()), io.dv = static_cast<uint16_t*>(dv.data_ptr());
  io.dq_st = strides(dq), io.dk_st = strides(dk), io.dv_st = strides(dv);
  if (!attention_backward_cuda_applies(io)) return false;
  const torch::Tensor ws = torch::empty({static_cast<int64_t>(attention_backward_workspace_bytes(io))}, q.options().dtype(torch::kUInt8));
  io.workspace = ws.data_ptr();
  cuda_attention_backward(io, at::cuda::getCurrentCUDAStream(q.device().index()).stream());
  return true;
#else
  (void)dout_in, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dq, (void)dk, (void)dv;
  return false;
#endif
}

struct CudnnForwardFlashBackward : public torch::autograd::Function<CudnnForwardFlashBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
    auto r = at::_scaled_dot_product_cudnn_attention(q, k, v, std::nullopt, /*compute_log_sumexp=*/true, 0.0, /*is_causal=*/true,
                                                     /*return_debug_mask=*/false);
    torch::Tensor o = std::get<0>(r), lse = std::get<1>(r);
    ctx->save_for_backward({q, k, v, o, lse});
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto s = ctx->get_saved_variables();
    const torch::Tensor &q = s[0], &k = s[1], &v = s[2], &o = s[3];
    const int64_t B = q.size(0), H = q.size(1), S = q.size(2);
    // cuDNN's log-sum-exp is [B, H, S, 1] (natural log, FP32), flash's [B, H, S]. Without dropout and
    // packed sequences the sequence offsets are undefined and the RNG state is not read: placeholders
    // as flash's own forward makes them.
    torch::Tensor lse = s[4].contiguous().view({B, H, S});
    torch::Tensor dq, dk, dv;
    if (own_backward(grads[0], q, k, v, o, lse, dq, dk, dv)) return {dq, dk, dv};
    torch::Tensor rng = torch::empty({}, torch::TensorOptions().dtype(torch::kLong));
    auto g = at::_scaled_dot_product_flash_attention_backward(grads[0], q, k, v, o, lse, torch::Tensor(), torch::Tensor(), S, S, 0.0,
                                                              /*is_causal=*/true, rng, rng);
    return {std::get<0>(g), std::get<1>(g), std::get<2>(g)};
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

torch::Tensor deterministic_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if defined(UFP4_CUDNN_FLASH_ATTENTION)
  if (deterministic_causal_attention_applies(q, k, v)) {
    try {
      return CudnnForwardFlashBackward::apply(q, k, v);
    } catch (const c10::Error& e) {
      if (!cudnn_refused.exchange(true))
        std::cerr << "attention: cuDNN's fused forward refused the call; scaled_dot_product_attention from now on ("
                  << e.what_without_backtrace() << ")\n";
    }
  }
#endif
  return torch::Tensor();
}

}  // namespace ufp4
