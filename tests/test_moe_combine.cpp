// The MoE combine and the dispatch's backward as fused ops (models/fused_ops.h, through the fused
// switch of models/moe_routing.h) against LibTorch's composition: bit for bit where the contract says
// so (the combined tokens, the expert rows' gradient, the dispatched tokens' gradient), within a
// tolerance for the weights' gradient (another summation order); and the CUDA kernels against the CPU
// reference bit for bit.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "models/fused_ops.h"
#include "models/moe_routing.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

struct Case {
  int64_t tokens, top_k, experts, d, capacity;
};

// One routed batch: distinct experts per token, softmax-like weights, expert rows and upstream
// gradients in BF16; some gradients are -0 (what the slots' zero-filled sum turns to +0) or 0.
struct Batch {
  torch::Tensor idx, weights, y, dout, x, g;
};

Batch make_batch(const Case& c, uint64_t seed) {
  torch::manual_seed(static_cast<int64_t>(seed));
  Batch b;
  b.idx = torch::argsort(torch::rand({c.tokens, c.experts}), /*dim=*/1, /*descending=*/false).slice(1, 0, c.top_k).contiguous();
  b.weights = torch::softmax(torch::randn({c.tokens, c.top_k}), 1);
  const int64_t A = c.tokens * c.top_k;
  b.y = (torch::randn({A, c.d}) * 2).to(torch::kBFloat16);
  b.dout = torch::randn({c.tokens, c.d});
  b.dout.index_put_({0, 0}, -0.0f);
  b.dout.index_put_({c.tokens - 1, 1}, 0.0f);
  b.dout.index_put_({c.tokens / 2, 2}, -1e-30f);  // times a weight: -0 in BF16
  b.dout = b.dout.to(torch::kBFloat16);
  b.x = torch::randn({c.tokens, c.d}).to(torch::kBFloat16);
  b.g = torch::randn({A, c.d}).to(torch::kBFloat16);
  b.g.index_put_({0, 0}, -0.0f);
  return b;
}

struct Outputs {
  torch::Tensor out, dy, dw, rows, dx;
};

// Combine then dispatch on `dev`, fused or composed: the forward values and the inputs' gradients.
Outputs run(const Case& c, const Batch& b, const torch::Device& dev, bool fused) {
  // Fresh leaves (on the CPU, to() would return the batch's own tensors, and their gradients would pile up).
  auto leaf = [&](const torch::Tensor& t) { return t.to(dev).clone().detach().requires_grad_(true); };
  torch::Tensor weights = leaf(b.weights), y = leaf(b.y), x = leaf(b.x);
  const Routing r = route(b.idx.to(dev), weights, c.experts, c.capacity);
  Outputs o;
  o.out = combine_tokens(y, r, fused);
  o.rows = dispatch_tokens(x, r, fused);
  torch::autograd::backward({o.out, o.rows}, {b.dout.to(dev), b.g.to(dev)});
  o.dy = y.grad().cpu().clone();
  o.dw = weights.grad().cpu().clone();
  o.dx = x.grad().cpu().clone();
  o.out = o.out.detach().cpu().clone();
  o.rows = o.rows.detach().cpu().clone();
  return o;
}

// "" when every bit-exact output agrees, else the first that differs and where.
std::string exact_difference(const Outputs& a, const Outputs& b, bool with_dw) {
  std::vector<std::pair<std::string, std::pair<torch::Tensor, torch::Tensor>>> pairs = {
      {"out", {a.out, b.out}}, {"dy", {a.dy, b.dy}}, {"rows", {a.rows, b.rows}}, {"dx", {a.dx, b.dx}}};
  if (with_dw) pairs.push_back({"dw", {a.dw, b.dw}});
  for (const auto& p : pairs) {
    const int64_t at = test::first_bit_mismatch(p.second.first, p.second.second);
    if (at >= 0) return p.first + ": " + test::describe_mismatch(p.second.first, p.second.second, at);
  }
  return "";
}

// Max |a - b| / (atol + rtol |b|): <= 1 passes.
double worst(const torch::Tensor& a, const torch::Tensor& b, double atol, double rtol) {
  torch::Tensor a64 = a.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  return ((a64 - b64).abs() / (atol + rtol * b64.abs())).max().item<double>();
}

const std::vector<Case> kCases = {
    {37, 1, 8, 24, 0}, {37, 2, 8, 40, 0}, {64, 4, 16, 64, 0}, {50, 4, 8, 24, 20}, {29, 8, 12, 16, 0}, {33, 3, 6, 392, 15},
};

}  // namespace

TEST_CASE("fused MoE combine and dispatch == the composition: tokens, row gradients bitwise; weights' gradient by rounding", "[moe][fused]") {
  int n = 0;
  for (const Case& c : kCases) {
    const Batch b = make_batch(c, 100 + n++);
    const Outputs fused = run(c, b, torch::kCPU, true), composed = run(c, b, torch::kCPU, false);
    INFO("tokens " << c.tokens << " k " << c.top_k << " experts " << c.experts << " d " << c.d << " capacity " << c.capacity);
    CHECK(exact_difference(fused, composed, false) == "");
    // BF16 sums of d products in another order: a last-place difference, and cancellation near zero.
    CHECK(worst(fused.dw, composed.dw, 0.05, 0.01) <= 1);
    if (c.capacity) CHECK(fused.dy.eq(0).all(1).any().item<bool>());  // dropped rows get no gradient
  }
  CHECK_FALSE(fused_moe_combine_applies(torch::zeros({4, 8}), 2));                          // FP32
  CHECK_FALSE(fused_moe_combine_applies(torch::zeros({4, 8}, torch::kBFloat16), 9));       // k past the kernels' 8
  CHECK(fused_moe_combine_applies(torch::zeros({4, 8}, torch::kBFloat16), 2));
}

TEST_CASE("CUDA MoE combine and dispatch == CPU reference bit for bit, and == the composition on the GPU", "[moe][fused][cuda]") {
  UFP4_NEED_GPU();
  int n = 0;
  for (const Case& c : kCases) {
    if (c.d % 8) continue;
    const Batch b = make_batch(c, 200 + n++);
    const Outputs gpu = run(c, b, torch::kCUDA, true), cpu = run(c, b, torch::kCPU, true), composed = run(c, b, torch::kCUDA, false);
    INFO("tokens " << c.tokens << " k " << c.top_k << " experts " << c.experts << " d " << c.d << " capacity " << c.capacity);
    CHECK(exact_difference(gpu, cpu, true) == "");
    CHECK(exact_difference(gpu, composed, false) == "");
    CHECK(worst(gpu.dw, composed.dw, 0.05, 0.01) <= 1);
  }
}
