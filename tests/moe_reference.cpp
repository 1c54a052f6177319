#include "tests/moe_reference.h"

#include <cmath>
#include <cstring>

#include "models/fused_ops.h"
#include "models/moe.h"
#include "tests/catch.h"

namespace ufp4::test {

namespace {

struct Leaves {
  torch::Tensor router;
  std::vector<torch::Tensor> fc1, fc2;  // expert e's [N, K] weights, leaves of their own
};

torch::Tensor reference_forward(MoeImpl& m, const torch::Tensor& x, const Leaves& w) {
  const int64_t d = x.size(-1), E = m.n_experts, k = m.top_k;
  torch::Tensor flat = x.reshape({-1, d});
  const int64_t T = flat.size(0);
  torch::Tensor probs = torch::softmax(torch::nn::functional::linear(flat.to(torch::kFloat32), w.router), -1);
  auto top = probs.topk(k, -1);
  torch::Tensor weights = std::get<0>(top) / std::get<0>(top).sum(-1, true);
  torch::Tensor idx = std::get<1>(top);
  torch::Tensor out = torch::zeros_like(flat);
  torch::Tensor flat_idx = idx.flatten(), flat_w = weights.flatten();
  torch::Tensor token_of = torch::arange(T, idx.options()).repeat_interleave(k);
  const int64_t capacity = m.capacity_factor > 0 ? static_cast<int64_t>(std::ceil(m.capacity_factor * T * k / E)) : T;
  for (int64_t e = 0; e < E; ++e) {
    torch::Tensor sel = (flat_idx == e).nonzero().flatten();
    if (sel.numel() == 0) continue;
    if (sel.numel() > capacity) sel = sel.slice(0, 0, capacity);
    torch::Tensor tok = token_of.index_select(0, sel);
    torch::Tensor h = quant_linear(flat.index_select(0, tok), w.fc1[e], torch::Tensor(), m.fc1->layers[e]);
    // SwiGLU as the per-expert MLP ran it: the fused kernel on CUDA, LibTorch's composition otherwise.
    if (m.fused && h.is_cuda() && fused_swiglu_applies(h)) h = fused_swiglu(h);
    else {
      auto gu = h.chunk(2, -1);
      h = torch::silu(gu[0]) * gu[1];
    }
    torch::Tensor y = quant_linear(h, w.fc2[e], torch::Tensor(), m.fc2->layers[e]);
    out.index_add_(0, tok, y * flat_w.index_select(0, sel).unsqueeze(1).to(y.scalar_type()));
  }
  if (m.shared) out = out + m.shared(flat);
  return out.view(x.sizes());
}

double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>() / (scale > 0 ? scale : 1.0);
}

bool same(const torch::Tensor& a, const torch::Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.sizes() == b.sizes() && torch::equal(a.cpu(), b.cpu()));
}

}  // namespace

// Routing of random top-k choices on `device` against its definition, for capacities 0 (dropless), 5
// and 1000: the inverse inverts the order; each token's slots and weights in ascending expert order;
// each expert's segment its assignments in token order, the first `capacity` of them; dropped rows last.
void check_routing(torch::Device device) {
  torch::manual_seed(7);
  const int64_t T = 40, k = 3, E = 6;
  torch::Tensor idx = std::get<1>(torch::rand({T, E}).topk(k, -1)).to(device);
  torch::Tensor w = torch::rand({T, k}).to(device);
  INFO(device);
  for (int64_t capacity : {0, 5, 1000}) {
    INFO("capacity " << capacity);
    const Routing r = route(idx, w, E, capacity);
    const int64_t A = T * k;
    REQUIRE(r.order.size(0) == A);
    CHECK(torch::equal(r.order.index_select(0, r.inverse).cpu(), torch::arange(A)));
    // Slots of each token in ascending expert order, weights moved with them.
    torch::Tensor ids = std::get<0>(idx.sort(-1));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = ids[t][j].item<int64_t>();
        int64_t slot = 0;
        while (idx[t][slot].item<int64_t>() != e) ++slot;
        CHECK(r.weights[t][j].item<float>() == w[t][slot].item<float>());
      }
    const torch::Tensor ends = r.host_ends();
    int64_t start = 0, kept = 0;
    for (int64_t e = 0; e < E; ++e) {
      const int64_t end = ends[e].item<int64_t>();
      // Expert e's segment: its assignments in token order, the first `capacity` of them.
      std::vector<int64_t> expected;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j)
          if (ids[t][j].item<int64_t>() == e) expected.push_back(t * k + j);
      if (capacity > 0 && static_cast<int64_t>(expected.size()) > capacity) expected.resize(capacity);
      REQUIRE(end - start == static_cast<int64_t>(expected.size()));
      for (int64_t i = 0; i < end - start; ++i) CHECK(r.order[start + i].item<int64_t>() == expected[i]);
      kept += end - start;
      start = end;
    }
    if (capacity == 0) {
      CHECK(!r.kept.defined());
      CHECK(kept == A);
    } else {
      CHECK(r.kept.sum().item<int64_t>() == kept);
      CHECK(r.kept.slice(0, 0, kept).all().item<bool>());
    }
  }
}


std::string MoeComparison::bit_mismatches() const {
  std::string s;
  for (const auto& [ok, name] : {std::make_pair(output_equal, "output"), std::make_pair(expert_grads_equal, "expert gradients"),
                                 std::make_pair(idle_expert_grads_zero, "idle experts' zero gradients"),
                                 std::make_pair(operands_equal && operands > 0, "quantized operands"), std::make_pair(alpha_equal, "alpha")})
    if (!ok) s += std::string(s.empty() ? "" : ", ") + name;
  return s;
}

MoeComparison compare_moe(const ModelConfig& c, const std::string& recipe, torch::Device device, torch::ScalarType dtype, bool allow_grouped,
                          bool observe) {
  torch::manual_seed(11);
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = Recipe::load(recipe);
  ctx->run_seed = 2;
  ctx->step = 3;
  int64_t id = 5;
  Moe m(c, "layers.1.mlp", ctx, id, 1);
  m->to(device);
  m->fc1->allow_grouped = allow_grouped;
  m->fc2->allow_grouped = allow_grouped;
  const auto opt = torch::TensorOptions().device(device);
  torch::Tensor x0 = torch::randn({3, 16, c.d_model}, opt).to(dtype);
  torch::Tensor g = torch::randn({3, 16, c.d_model}, opt).to(dtype);
  Leaves w;
  w.router = m->router.detach().clone().requires_grad_(true);
  for (int64_t e = 0; e < c.n_experts; ++e) {
    w.fc1.push_back(m->fc1->weight[e].detach().clone().requires_grad_(true));
    w.fc2.push_back(m->fc2->weight[e].detach().clone().requires_grad_(true));
  }

  // The same batch through both, each with telemetry and a capture of every operand.
  auto run = [&](bool grouped, torch::Tensor& out, torch::Tensor& dx, OperandCapture::Operands& ops, std::map<std::string, double>& alpha) {
    ctx->telemetry = observe;
    ctx->alpha.clear();
    if (observe) ctx->capture = std::make_shared<OperandCapture>(std::set<int64_t>{ctx->step}, std::vector<std::string>{});
    torch::Tensor x = x0.detach().clone().requires_grad_(true);
    out = grouped ? m->forward(x) : reference_forward(*m, x, w);
    (out * g).sum().backward();
    dx = x.grad();
    if (observe) ops = ctx->capture->take();
    alpha = ctx->alpha;
    ctx->capture.reset();
  };
  MoeComparison r;
  torch::Tensor out_a, out_b, dx_a, dx_b;
  OperandCapture::Operands ops_a, ops_b;
  std::map<std::string, double> alpha_a, alpha_b;
  run(true, out_a, dx_a, ops_a, alpha_a);
  if (m->shared)
    for (auto& p : m->shared->parameters()) p.mutable_grad() = torch::Tensor();
  run(false, out_b, dx_b, ops_b, alpha_b);
  r.output_equal = same(out_a, out_b);
  r.output_rel = rel(out_a, out_b);
  r.input_grad_rel = rel(dx_a, dx_b);
  r.router_grad_rel = rel(m->router.grad(), w.router.grad());
  r.expert_grads_equal = r.idle_expert_grads_zero = true;
  for (int64_t e = 0; e < c.n_experts; ++e) {
    const torch::Tensor a1 = m->fc1->weight.grad()[e], a2 = m->fc2->weight.grad()[e];
    if (!w.fc1[e].grad().defined()) {
      r.idle_expert_grads_zero = r.idle_expert_grads_zero && a1.eq(0).all().item<bool>() && a2.eq(0).all().item<bool>();
      continue;
    }
    r.expert_grads_equal = r.expert_grads_equal && same(a1, w.fc1[e].grad()) && same(a2, w.fc2[e].grad());
    r.expert_grad_rel = std::max({r.expert_grad_rel, rel(a1, w.fc1[e].grad()), rel(a2, w.fc2[e].grad())});
  }
  r.operands_equal = ops_a.size() == ops_b.size();
  for (const auto& kv : ops_a) {
    auto it = ops_b.find(kv.first);
    if (it == ops_b.end()) {
      r.operands_equal = false;
      continue;
    }
    r.operands_equal = r.operands_equal && same(kv.second.first, it->second.first) && same(kv.second.second, it->second.second);
    ++r.operands;
  }
  r.alphas = static_cast<int64_t>(alpha_a.size());
  r.alpha_equal = alpha_a.size() == alpha_b.size();
  for (const auto& kv : alpha_a) {
    auto it = alpha_b.find(kv.first);
    r.alpha_equal = r.alpha_equal && it != alpha_b.end() && std::memcmp(&kv.second, &it->second, sizeof(double)) == 0;
  }
  return r;
}

}  // namespace ufp4::test
