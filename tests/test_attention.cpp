// Causal attention in deterministic mode (models/deterministic_attention.h): cuDNN's forward with
// flash's deterministic backward. On the GPU: near an FP64 reference, the same bits on every rerun, and
// what the model's attention runs in that mode. Everywhere: where it applies.
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "harness/train/determinism.h"
#include "models/deterministic_attention.h"
#include "models/layers.h"
#include "tests/catch.h"

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
  for (const Shape& sh : {Shape{2, 4, 2, 300, 64}, Shape{1, 3, 3, 129, 128}, Shape{2, 8, 1, 1024, 64}}) {
    INFO("B " << sh.B << " H " << sh.H << " KV " << sh.KV << " S " << sh.S << " hd " << sh.hd);
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
}

TEST_CASE("deterministic attention applies only to half-precision CUDA tensors with a head dimension cuDNN takes", "[attention]") {
  const auto cpu = inputs(1, 2, 1, 16, 64, torch::kCPU);
  CHECK_FALSE(deterministic_causal_attention_applies(cpu[0], cpu[1], cpu[2]));
  CHECK_FALSE(deterministic_causal_attention(cpu[0], cpu[1], cpu[2]).defined());
  if (!test::gpu_available()) return;
  const auto gpu = inputs(1, 2, 1, 16, 64, torch::kCUDA);
  CHECK_FALSE(deterministic_causal_attention_applies(gpu[0].to(torch::kFloat32), gpu[1].to(torch::kFloat32), gpu[2].to(torch::kFloat32)));
  const auto wide = inputs(1, 2, 1, 16, 256, torch::kCUDA);
  CHECK_FALSE(deterministic_causal_attention_applies(wide[0], wide[1], wide[2]));
  const auto odd = inputs(1, 3, 2, 16, 64, torch::kCUDA);  // 2 KV heads do not divide 3 heads
  CHECK_FALSE(deterministic_causal_attention_applies(odd[0], odd[1], odd[2]));
}
