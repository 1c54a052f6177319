// Causal attention in deterministic mode (models/deterministic_attention.h): cuDNN's forward with
// flash's deterministic backward or, switched on, ours (kernels/attention/attention_backward.h). On the GPU: near an FP64 reference,
// the same bits on every rerun, and what the model's attention runs in that mode; fed by the packed
// RoPE as one op, the two ops' bits; our kernel near its CPU reference, and its RoPE'd dQ and dK the
// fused RoPE's bits. Everywhere: where it applies, and the CPU reference near LibTorch's FP64 autograd.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "harness/train/determinism.h"
#include "kernels/attention/attention_backward.h"
#include "kernels/fused/fused_kernels.h"
#include "models/deterministic_attention.h"
#include "models/fused_ops.h"
#include "models/layers.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"

using namespace ufp4;

namespace {

struct ForwardBackward {
  torch::Tensor o, dq, dk, dv;
};

// q [B, H, S, hd], k and v [B, KV, S, hd], each on [B, S, heads, hd] memory (the layout the model's
// attention takes), with a fixed seed.
std::vector<torch::Tensor> inputs(int64_t B, int64_t H, int64_t KV, int64_t S, int64_t hd, torch::Device dev) {
  torch::manual_seed(B * 1000 + H * 100 + S + hd);
  std::vector<torch::Tensor> t;
  for (int64_t h : {H, KV, KV, H}) t.push_back(torch::randn({B, S, h, hd}).to(torch::kBFloat16).to(dev).transpose(1, 2));
  return t;  // q, k, v and the output's gradient
}

template <typename F>
ForwardBackward run(F attention, const std::vector<torch::Tensor>& in) {
  torch::Tensor q = in[0].detach().requires_grad_(true), k = in[1].detach().requires_grad_(true), v = in[2].detach().requires_grad_(true);
  torch::Tensor o = attention(q, k, v);
  o.backward(in[3]);
  return {o.detach(), q.grad(), k.grad(), v.grad()};
}

// FP64 causal attention with the KV heads broadcast to their groups, and its gradients.
ForwardBackward reference(const std::vector<torch::Tensor>& in) {
  auto d = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64).requires_grad_(true); };
  torch::Tensor q = d(in[0]), k = d(in[1]), v = d(in[2]);
  const int64_t B = q.size(0), H = q.size(1), KV = k.size(1), S = q.size(2), hd = q.size(3);
  auto group = [&](const torch::Tensor& t) { return t.unsqueeze(2).expand({B, KV, H / KV, S, hd}).reshape({B, H, S, hd}); };
  torch::Tensor s = torch::matmul(q, group(k).transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
  s = s.masked_fill(torch::ones({S, S}, s.options().dtype(torch::kBool)).triu(1), -std::numeric_limits<double>::infinity());
  torch::Tensor o = torch::matmul(torch::softmax(s, -1), group(v));
  o.backward(in[3].to(torch::kFloat64));
  return {o.detach(), q.grad(), k.grad(), v.grad()};
}

double rel(const torch::Tensor& a, const torch::Tensor& ref) { return ((a.to(torch::kFloat64) - ref).norm() / ref.norm()).item<double>(); }

std::string bit_differences(const ForwardBackward& a, const ForwardBackward& b) {
  const char* names[] = {"o", "dq", "dk", "dv"};
  const torch::Tensor x[] = {a.o, a.dq, a.dk, a.dv}, y[] = {b.o, b.dq, b.dk, b.dv};
  for (int i = 0; i < 4; ++i) {
    const torch::Tensor u = x[i].cpu(), w = y[i].cpu();
    const int64_t at = test::first_bit_mismatch(u, w);
    if (at >= 0) return std::string(names[i]) + ": " + test::describe_mismatch(u, w, at);
  }
  return "";
}

struct Shape {
  int64_t B, H, KV, S, hd;
};

}  // namespace

TEST_CASE("deterministic attention: near FP64, the same bits on every rerun, what the model runs in that mode", "[attention][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  // Grouped and plain heads; sequences that end inside a 128-row block; head dimensions 64 and 128.
  // Shapes S % 64 == 0 with hd 64 take our backward, the others flash's; then flash's for all.
  for (const bool own : {true, false})
  for (const Shape& sh : {Shape{2, 4, 2, 300, 64}, Shape{1, 3, 3, 129, 128}, Shape{2, 8, 1, 1024, 64}, Shape{2, 6, 2, 512, 64}}) {
    INFO("B " << sh.B << " H " << sh.H << " KV " << sh.KV << " S " << sh.S << " hd " << sh.hd << (own ? ", ours where it applies" : ", flash's"));
    use_own_attention_backward(own);
    const auto in = inputs(sh.B, sh.H, sh.KV, sh.S, sh.hd, torch::kCUDA);
    REQUIRE(deterministic_causal_attention_applies(in[0], in[1], in[2]));
    const ForwardBackward a = run(deterministic_causal_attention, in);
    REQUIRE(a.o.defined());
    // BF16 inputs, outputs and gradients over FP32 accumulation: about 3e-3 from FP64 at the proxies'
    // shapes, for flash and cuDNN alike (results/bench/logs/attention-kv-chunks.log); 1e-2 allows for
    // these shapes' spread, while a wrong scale, mask or log-sum-exp base is off by far more.
    const ForwardBackward r = reference(in);
    CHECK(rel(a.o, r.o) < 1e-2);
    CHECK(rel(a.dq, r.dq) < 1e-2);
    CHECK(rel(a.dk, r.dk) < 1e-2);
    CHECK(rel(a.dv, r.dv) < 1e-2);
    for (int rep = 0; rep < 3; ++rep) CHECK(bit_differences(a, run(deterministic_causal_attention, in)) == "");
    // The model's attention in deterministic mode is this one.
    CHECK(bit_differences(a, run(grouped_causal_attention, in)) == "");
  }
  use_own_attention_backward(true);  // the default
}

namespace {

// Dense FP32 [B, h, S, 64] copies of BF16 GPU tensors (any strides).
std::vector<float> host(const torch::Tensor& t) {
  const torch::Tensor c = t.to(torch::kCPU, torch::kFloat32).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// max |a - r| over max |r|.
double max_error(const torch::Tensor& a, const std::vector<float>& r) {
  const std::vector<float> x = host(a);
  double e = 0, m = 0;
  for (size_t i = 0; i < r.size(); ++i) e = std::max(e, std::fabs(static_cast<double>(x[i]) - r[i])), m = std::max(m, std::fabs(static_cast<double>(r[i])));
  return e / m;
}

}  // namespace

TEST_CASE("attention backward kernel: near its CPU reference, the same bits on every rerun", "[attention][cuda]") {
  UFP4_NEED_GPU();
#ifdef UFP4_WITH_CUDA
  for (const Shape& sh : {Shape{1, 2, 1, 64, 64}, Shape{2, 6, 2, 256, 64}, Shape{1, 4, 4, 384, 64}}) {
    INFO("B " << sh.B << " H " << sh.H << " KV " << sh.KV << " S " << sh.S);
    auto in = inputs(sh.B, sh.H, sh.KV, sh.S, sh.hd, torch::kCUDA);
    const float scale = 0.125f;
    // The forward in double on the host (o rounded to BF16, as a forward returns it), the gradients too.
    const std::vector<float> q = host(in[0]), k = host(in[1]), v = host(in[2]), dout = host(in[3]);
    std::vector<float> o(q.size()), lse(static_cast<size_t>(sh.B * sh.H * sh.S)), rq(q.size()), rk(k.size()), rv(v.size());
    reference_attention_forward(sh.B, sh.H, sh.KV, sh.S, scale, q.data(), k.data(), v.data(), o.data(), lse.data());
    const torch::Tensor o_dev = torch::from_blob(o.data(), {sh.B, sh.H, sh.S, 64}).to(torch::kCUDA, torch::kBFloat16);
    const std::vector<float> o16 = host(o_dev);
    reference_attention_backward(sh.B, sh.H, sh.KV, sh.S, scale, q.data(), k.data(), v.data(), o16.data(), dout.data(), lse.data(), rq.data(),
                                 rk.data(), rv.data());
    const torch::Tensor lse_dev = torch::from_blob(lse.data(), {sh.B, sh.H, sh.S}).to(torch::kCUDA);
    torch::Tensor dq = torch::empty_like(in[0]), dk = torch::empty_like(in[1]), dv = torch::empty_like(in[2]);
    auto st = [](const torch::Tensor& t) { return AttnStrides{t.stride(0), t.stride(1), t.stride(2)}; };
    auto p = [](const torch::Tensor& t) { return static_cast<uint16_t*>(t.data_ptr()); };
    AttentionBackwardIO io;
    io.batch = sh.B, io.heads = sh.H, io.kv_heads = sh.KV, io.seq = sh.S, io.scale = scale;
    io.q = p(in[0]), io.k = p(in[1]), io.v = p(in[2]), io.o = p(o_dev), io.dout = p(in[3]), io.lse = lse_dev.data_ptr<float>();
    io.q_st = st(in[0]), io.k_st = st(in[1]), io.v_st = st(in[2]), io.o_st = st(o_dev), io.dout_st = st(in[3]);
    io.dq = p(dq), io.dk = p(dk), io.dv = p(dv), io.dq_st = st(dq), io.dk_st = st(dk), io.dv_st = st(dv);
    REQUIRE(attention_backward_cuda_applies(io));
    const torch::Tensor ws = torch::empty({static_cast<int64_t>(attention_backward_workspace_bytes(io))}, in[0].options().dtype(torch::kUInt8));
    io.workspace = ws.data_ptr();
    cuda_attention_backward(io, nullptr);
    torch::cuda::synchronize();
    // P and dS are rounded to BF16 before their products (relative 2^-9 each, as flash attention
    // does), sums in FP32 and the outputs in BF16: about 4e-3 of the largest gradient at these shapes
    // (results/bench/logs/attention-backward-check.log); 1.5e-2 allows for the spread, while a wrong
    // mask, scale, head group or a lost block term is off by far more.
    CHECK(max_error(dq, rq) < 1.5e-2);
    CHECK(max_error(dk, rk) < 1.5e-2);
    CHECK(max_error(dv, rv) < 1.5e-2);
    const torch::Tensor dq0 = dq.clone(), dk0 = dk.clone(), dv0 = dv.clone();
    for (int rep = 0; rep < 3; ++rep) {
      cuda_attention_backward(io, nullptr);
      torch::cuda::synchronize();
      CHECK(test::first_bit_mismatch(dq.cpu(), dq0.cpu()) < 0);
      CHECK(test::first_bit_mismatch(dk.cpu(), dk0.cpu()) < 0);
      CHECK(test::first_bit_mismatch(dv.cpu(), dv0.cpu()) < 0);
    }
    // With RoPE's tables, dQ and dK rotated back in the same passes: bit for bit the fused RoPE's
    // backward of the plain ones (tables of more rows than S, as the model's are; any values in [-1, 1]).
    const torch::Tensor cos = torch::rand({sh.S + 64, 32}, torch::kCUDA) * 2 - 1, sin = torch::rand({sh.S + 64, 32}, torch::kCUDA) * 2 - 1;
    auto rope_back = [&](const torch::Tensor& x) {
      torch::Tensor y = torch::empty_like(x);
      RopeIO rio;
      rio.dtype = DType::kBF16, rio.batch = x.size(0), rio.heads = x.size(1), rio.seq = x.size(2), rio.head_dim = 64;
      rio.x = x.data_ptr(), rio.stride_b = x.stride(0), rio.stride_h = x.stride(1), rio.stride_s = x.stride(2);
      rio.y = y.data_ptr(), rio.y_stride_b = y.stride(0), rio.y_stride_h = y.stride(1), rio.y_stride_s = y.stride(2);
      rio.cos = cos.data_ptr<float>(), rio.sin = sin.data_ptr<float>(), rio.inverse = true;
      cuda_rope(rio, nullptr);
      return y;
    };
    const torch::Tensor want_dq = rope_back(dq0), want_dk = rope_back(dk0);
    io.rope_cos = cos.data_ptr<float>(), io.rope_sin = sin.data_ptr<float>();
    REQUIRE(attention_backward_cuda_applies(io));
    cuda_attention_backward(io, nullptr);
    torch::cuda::synchronize();
    CHECK(test::first_bit_mismatch(dq.cpu(), want_dq.cpu()) < 0);
    CHECK(test::first_bit_mismatch(dk.cpu(), want_dk.cpu()) < 0);
    CHECK(test::first_bit_mismatch(dv.cpu(), dv0.cpu()) < 0);
  }
#endif
}

TEST_CASE("deterministic attention fed by the packed RoPE: one op with the two ops' bits", "[attention][cuda]") {
  UFP4_NEED_GPU();
  set_deterministic(true);
  // dense-113m's head groups on a short sequence, plain heads, and a sequence our backward does not take.
  for (const Shape& sh : {Shape{2, 12, 4, 256, 64}, Shape{1, 4, 4, 128, 64}, Shape{2, 4, 2, 100, 64}}) {
    INFO("B " << sh.B << " H " << sh.H << " KV " << sh.KV << " S " << sh.S);
    torch::manual_seed(sh.S + sh.H);
    const torch::Tensor y0 = torch::randn({sh.B, sh.S, (sh.H + 2 * sh.KV) * sh.hd}).to(torch::kBFloat16).to(torch::kCUDA);
    const torch::Tensor dout = torch::randn({sh.B, sh.S, sh.H, sh.hd}).to(torch::kBFloat16).to(torch::kCUDA).transpose(1, 2);
    const torch::Tensor cos = torch::rand({sh.S + 64, 32}, torch::kCUDA) * 2 - 1, sin = torch::rand({sh.S + 64, 32}, torch::kCUDA) * 2 - 1;
    REQUIRE(fused_qkv_rope_applies(y0, cos, sin, sh.H, sh.KV));
    // Two ops: the RoPE node, then the attention's.
    torch::Tensor y_two = y0.clone().requires_grad_(true);
    const std::vector<torch::Tensor> qkv = fused_qkv_rope(y_two, cos, sin, sh.H, sh.KV);
    const torch::Tensor o_two = deterministic_causal_attention(qkv[0], qkv[1], qkv[2]);
    REQUIRE(o_two.defined());
    o_two.backward(dout);
    // One op.
    torch::Tensor y_one = y0.clone().requires_grad_(true);
    const torch::Tensor o_one = deterministic_qkv_rope_attention(y_one, cos, sin, sh.H, sh.KV);
    REQUIRE(o_one.defined());
    o_one.backward(dout);
    CHECK(test::first_bit_mismatch(o_one.detach().cpu(), o_two.detach().cpu()) < 0);
    const int64_t at = test::first_bit_mismatch(y_one.grad().cpu(), y_two.grad().cpu());
    INFO((at < 0 ? std::string() : test::describe_mismatch(y_one.grad().cpu(), y_two.grad().cpu(), at)));
    CHECK(at < 0);
  }
  // Only with our backward: flash's keeps the two ops.
  use_own_attention_backward(false);
  const torch::Tensor y = torch::randn({1, 64, 8 * 64}).to(torch::kBFloat16).to(torch::kCUDA);
  const torch::Tensor cos = torch::rand({64, 32}, torch::kCUDA), sin = torch::rand({64, 32}, torch::kCUDA);
  CHECK_FALSE(deterministic_qkv_rope_attention(y, cos, sin, 4, 2).defined());
  use_own_attention_backward(true);
}

TEST_CASE("attention reference: the CPU forward and backward match LibTorch's FP64 autograd", "[attention]") {
  // Grouped heads (2 query heads a KV head), a short sequence.
  const int64_t B = 2, H = 4, KV = 2, S = 20;
  torch::manual_seed(5);
  auto draw = [](int64_t h) { return torch::randn({B, h, S, 64}, torch::kFloat64); };
  const torch::Tensor q = draw(H), k = draw(KV), v = draw(KV), dout = draw(H);
  const ForwardBackward r = reference({q, k, v, dout});
  const float scale = 0.125f;
  auto f = [](const torch::Tensor& t) {
    const torch::Tensor c = t.to(torch::kFloat32).contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  };
  const std::vector<float> qf = f(q), kf = f(k), vf = f(v), df = f(dout);
  std::vector<float> o(qf.size()), lse(static_cast<size_t>(B * H * S)), dq(qf.size()), dk(kf.size()), dv(vf.size());
  reference_attention_forward(B, H, KV, S, scale, qf.data(), kf.data(), vf.data(), o.data(), lse.data());
  reference_attention_backward(B, H, KV, S, scale, qf.data(), kf.data(), vf.data(), o.data(), df.data(), lse.data(), dq.data(), dk.data(), dv.data());
  // Inputs are FP32 values and results FP32 roundings of double sums: relative 1e-6 is FP32's reach.
  auto rel_to = [](const std::vector<float>& a, const torch::Tensor& ref) {
    const torch::Tensor t = torch::from_blob(const_cast<float*>(a.data()), ref.sizes(), torch::kFloat32).to(torch::kFloat64);
    return ((t - ref).norm() / ref.norm()).item<double>();
  };
  CHECK(rel_to(o, r.o) < 1e-6);
  CHECK(rel_to(dq, r.dq) < 1e-6);
  CHECK(rel_to(dk, r.dk) < 1e-6);
  CHECK(rel_to(dv, r.dv) < 1e-6);
}

TEST_CASE("deterministic attention applies only to half-precision CUDA tensors with a head dimension cuDNN takes", "[attention]") {
  const auto cpu = inputs(1, 2, 1, 16, 64, torch::kCPU);
  CHECK_FALSE(deterministic_causal_attention_applies(cpu[0], cpu[1], cpu[2]));
  CHECK_FALSE(deterministic_causal_attention(cpu[0], cpu[1], cpu[2]).defined());
  const torch::Tensor y = torch::randn({1, 16, 4 * 64}).to(torch::kBFloat16);
  CHECK_FALSE(deterministic_qkv_rope_attention(y, torch::rand({16, 32}), torch::rand({16, 32}), 2, 1).defined());
  if (!test::gpu_available()) return;
  const auto gpu = inputs(1, 2, 1, 16, 64, torch::kCUDA);
  CHECK_FALSE(deterministic_causal_attention_applies(gpu[0].to(torch::kFloat32), gpu[1].to(torch::kFloat32), gpu[2].to(torch::kFloat32)));
  const auto wide = inputs(1, 2, 1, 16, 256, torch::kCUDA);
  CHECK_FALSE(deterministic_causal_attention_applies(wide[0], wide[1], wide[2]));
  const auto odd = inputs(1, 3, 2, 16, 64, torch::kCUDA);  // 2 KV heads do not divide 3 heads
  CHECK_FALSE(deterministic_causal_attention_applies(odd[0], odd[1], odd[2]));
}
