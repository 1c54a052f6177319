#include "tests/moe_reference.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "kernels/moe/expert_sort.h"
#include "kernels/moe/inverse_permutation.h"
#include "kernels/moe/router_top_k.h"
#include "models/fused_ops.h"
#include "models/grouped_linear.h"
#include "models/moe.h"
#include "models/router_top_k.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"

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

void check_inverse_permutation(torch::Device device) {
  torch::manual_seed(11);
  std::vector<std::array<int64_t, 2>> shapes{{1, 65536}, {4096, 2}, {333, 8}, {5, 1}, {0, 2}};
  if (device.is_cuda()) shapes.push_back({1, (int64_t{1} << 24) + 3});  // past 65535 blocks of 256: the grid loops
  for (const auto& shape : shapes) {
    const int64_t rows = shape[0], width = shape[1];
    INFO(device << " rows " << rows << " width " << width);
    torch::Tensor perm = torch::argsort(torch::rand({rows, width}), /*dim=*/-1, /*descending=*/false);
    if (rows == 1) perm = perm.view({width});  // one permutation as a 1-D tensor
    std::vector<int64_t> inv(static_cast<size_t>(rows * width), -1);
    InversePermutationIO io;
    io.rows = rows, io.width = width, io.perm = perm.data_ptr<int64_t>(), io.inv = inv.data();
    reference_inverse_permutation(io);
    const torch::Tensor expected = torch::from_blob(inv.data(), perm.sizes(), torch::kInt64);
    const torch::Tensor got = inverse_permutation(perm.to(device));
    CHECK(got.sizes() == perm.sizes());
    CHECK(torch::equal(got.cpu(), expected));
    if (rows * width) CHECK(torch::equal(perm.gather(-1, expected), torch::arange(width).expand_as(perm)));
  }
  const std::vector<int64_t> bad{0, 2};
  std::vector<int64_t> out(2);
  InversePermutationIO io;
  io.rows = 1, io.width = 2, io.perm = bad.data(), io.inv = out.data();
  CHECK(contains(thrown_message([&] { reference_inverse_permutation(io); }), "row 0 holds 2, outside 0..1"));
}

void check_expert_sort(torch::Device device) {
  torch::manual_seed(13);
  // {assignments, experts, k}: none; one; whole and partial chunks of 1024; the proxies' 32 x 1024 tokens at
  // top 2 (plus 7); 1024 experts (the kernels' most) and 333 at k = 3; on CUDA also 2^20 + 5 assignments.
  std::vector<std::array<int64_t, 3>> shapes{{0, 4, 2}, {1, 1, 1}, {1024, 16, 2}, {1025, 16, 2}, {65543, 16, 2}, {5000, 1024, 1}, {3000, 333, 3}};
  if (device.is_cuda()) shapes.push_back({(int64_t{1} << 20) + 5, 64, 4});
  for (const auto& shape : shapes) {
    const int64_t A = shape[0], E = shape[1], k = shape[2];
    INFO(device << " assignments " << A << " experts " << E << " k " << k);
    // A quarter of the experts get no assignment (idle).
    torch::Tensor keys = (torch::randint(0, std::max<int64_t>(E * 3 / 4, 1), {A}, torch::kInt64) * 4).div(3, "floor");
    std::vector<int64_t> order(A), inverse(A), rows(A), assigned(E);
    std::vector<int32_t> ends(E);
    ExpertSortIO io;
    io.assignments = A, io.experts = E, io.k = k, io.keys = keys.data_ptr<int64_t>();
    io.order = order.data(), io.inverse = inverse.data(), io.token_of_row = rows.data(), io.ends = ends.data(), io.assigned = assigned.data();
    reference_expert_sort(io);
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
    const torch::Tensor ro = torch::from_blob(order.data(), {A}, i64), ri = torch::from_blob(inverse.data(), {A}, i64),
                        rr = torch::from_blob(rows.data(), {A}, i64), ra = torch::from_blob(assigned.data(), {E}, i64),
                        re = torch::from_blob(ends.data(), {E}, torch::kInt32);
    if (!device.is_cuda()) {
      // The reference is LibTorch's stable sort and searchsorted, as route() forms them elsewhere.
      const auto sorted = keys.sort(/*stable=*/true, /*dim=*/0, /*descending=*/false);
      CHECK(torch::equal(ro, std::get<1>(sorted)));
      CHECK(torch::equal(ri, torch::argsort(std::get<1>(sorted))));
      CHECK(torch::equal(rr, std::get<1>(sorted).div(k, "floor")));
      const torch::Tensor e_ids = torch::arange(E, i64);
      CHECK(torch::equal(re, torch::searchsorted(std::get<0>(sorted), e_ids, false, /*right=*/true).to(torch::kInt32)));
      CHECK(torch::equal(ra, torch::bincount(keys, {}, E)));
      continue;
    }
#ifdef UFP4_WITH_CUDA
    const torch::Tensor dk = keys.to(device);
    torch::Tensor o = torch::full({A}, -1, i64.device(device)), inv = o.clone(), rw = o.clone(), as = torch::full({E}, -1, i64.device(device));
    torch::Tensor en = torch::full({E}, -1, torch::TensorOptions().dtype(torch::kInt32).device(device));
    torch::Tensor ws = torch::empty({static_cast<int64_t>(expert_sort_workspace_bytes(io))}, torch::TensorOptions().dtype(torch::kByte).device(device));
    io.keys = dk.data_ptr<int64_t>(), io.order = o.data_ptr<int64_t>(), io.inverse = inv.data_ptr<int64_t>(), io.token_of_row = rw.data_ptr<int64_t>();
    io.ends = en.data_ptr<int32_t>(), io.assigned = as.data_ptr<int64_t>(), io.workspace = ws.data_ptr();
    cuda_expert_sort(io, nullptr);
    CHECK(torch::equal(o.cpu(), ro));
    CHECK(torch::equal(inv.cpu(), ri));
    CHECK(torch::equal(rw.cpu(), rr));
    CHECK(torch::equal(en.cpu(), re));
    CHECK(torch::equal(as.cpu(), ra));
#endif
  }
  const std::vector<int64_t> bad{0, 2};
  std::vector<int64_t> o(2), inv(2), rows(2), assigned(2);
  std::vector<int32_t> ends(2);
  ExpertSortIO io;
  io.assignments = 2, io.experts = 2, io.keys = bad.data(), io.order = o.data(), io.inverse = inv.data(), io.token_of_row = rows.data(), io.ends = ends.data(),
  io.assigned = assigned.data();
  CHECK(contains(thrown_message([&] { reference_expert_sort(io); }), "assignment 1 names expert 2, outside 0..1"));
}

namespace {

bool bit_identical(const torch::Tensor& a, const torch::Tensor& b) { return first_bit_mismatch(a, b) == -1; }

// Values and ids of each row in ascending id order: the same pairs compare equal whatever their order.
std::pair<torch::Tensor, torch::Tensor> by_id(const torch::Tensor& v, const torch::Tensor& i) {
  const auto s = i.sort(-1);
  return {v.gather(1, std::get<1>(s)).cpu(), std::get<0>(s).cpu()};
}

// Router probabilities with topk's hard cases: every third row drawn from four levels (ties at and inside
// the top k), row 7 one NaN and row 8 two (topk counts NaN the largest), row 9 zeros of both signs (-0
// below +0 in topk's order).
constexpr int64_t kSignedZeroRow = 9;
torch::Tensor router_probs(int64_t rows, int64_t experts) {
  torch::Tensor p = torch::rand({rows, experts});
  p.index_put_({torch::indexing::Slice(0, rows, 3)}, (torch::randint(0, 4, {(rows + 2) / 3, experts}).to(torch::kFloat32) + 1) / 8);
  p[7][5].fill_(std::nanf(""));
  p[8][3].fill_(std::nanf(""));
  p[8][experts - 2].fill_(std::nanf(""));
  p[kSignedZeroRow].copy_(torch::where(torch::arange(experts) % 2 == 0, torch::full({experts}, -0.0), torch::zeros({experts})));
  return p;
}

// The kernel's CPU reference (rv, ri) against topk on the CPU, which breaks a tie at the k-th value as it
// likes and sees -0 and +0 as one value (the GPU's topk keeps the smallest columns and orders the zeros,
// as the reference does: the device check holds every row where the kernel selects, k <= 2): the ids on
// rows without such a tie or a NaN, the values, larger first, on every row but the signed zeros'; and the
// reference's ids on the NaN and signed-zero rows, which follow from topk's order alone.
void check_reference_against_cpu_topk(const torch::Tensor& probs, int64_t k, const torch::Tensor& rv, const torch::Tensor& ri) {
  const int64_t rows = probs.size(0), E = probs.size(1);
  const auto cpu_top = probs.topk(k, -1);
  const torch::Tensor desc = std::get<0>(probs.sort(-1, /*descending=*/true));
  const torch::Tensor others = torch::arange(rows) != kSignedZeroRow;
  const torch::Tensor clear = (desc.select(1, k - 1) != desc.select(1, std::min<int64_t>(k, E - 1))) & probs.isnan().any(1).logical_not() & others;
  CHECK(clear.sum().item<int64_t>() > rows / 2);
  CHECK(torch::equal(by_id(rv, ri).second.index({clear}), by_id(std::get<0>(cpu_top), std::get<1>(cpu_top)).second.index({clear})));
  CHECK(bit_identical(rv.index({others}), std::get<0>(cpu_top).index({others})));  // equal values make the same sequence
  CHECK(ri[7][0].item<int64_t>() == 5);  // the NaN first
  CHECK(ri[8][0].item<int64_t>() == 3);  // two NaNs: the smaller column first
  if (k > 1) CHECK(ri[8][1].item<int64_t>() == E - 2);
  for (int64_t j = 0; j < k; ++j) CHECK(ri[kSignedZeroRow][j].item<int64_t>() == 2 * j + 1);  // +0 at the odd columns, before every -0
}

// top_k_experts on `device` against topk and its autograd there: the same pairs, the same sequence of
// values, the probabilities' gradient bit for bit (signed zeros too); where the kernel selects (CUDA,
// k <= 2), its order is the reference's.
void check_against_topk_autograd(const torch::Tensor& probs, int64_t k, torch::Device device, const torch::Tensor& rv, const torch::Tensor& ri) {
  torch::Tensor G = torch::randn(probs.sizes());  // the upstream gradient per (token, expert), exact and negative zeros among it
  G.index_put_({torch::indexing::Slice(0, probs.size(0), 5)}, 0.0);
  G.index_put_({torch::indexing::Slice(1, probs.size(0), 5)}, -0.0);
  torch::Tensor p1 = probs.to(device).clone().requires_grad_(true), p2 = probs.to(device).clone().requires_grad_(true);
  const torch::Tensor Gd = G.to(device);
  const auto ours = top_k_experts(p1, k);
  const auto theirs = p2.topk(k, -1);
  const auto a = by_id(ours.first.detach(), ours.second), b = by_id(std::get<0>(theirs).detach(), std::get<1>(theirs));
  CHECK(torch::equal(a.second, b.second));
  CHECK(bit_identical(a.first, b.first));
  CHECK(bit_identical(ours.first.detach(), std::get<0>(theirs).detach()));
  if (device.is_cuda() && k <= 2) {
    CHECK(torch::equal(ours.second.cpu(), ri));
    CHECK(bit_identical(ours.first.detach(), rv));
  }
  (ours.first * Gd.gather(1, ours.second)).sum().backward();
  (std::get<0>(theirs) * Gd.gather(1, std::get<1>(theirs))).sum().backward();
  CHECK(bit_identical(p1.grad(), p2.grad()));
}

// The kernel's CPU reference in expert order (by_expert) against its order by value (rv, ri): the same
// pairs, ids ascending; and the backward's reference against LibTorch's scatter into zeros, signed zeros
// and NaNs of the gradient copied.
void check_reference_by_expert_and_backward(const torch::Tensor& probs, int64_t k, const torch::Tensor& rv, const torch::Tensor& ri) {
  const int64_t rows = probs.size(0), E = probs.size(1);
  torch::Tensor ev = torch::empty({rows, k}), ei = torch::empty({rows, k}, torch::kInt64);
  RouterTopKIO io;
  io.rows = rows, io.experts = E, io.k = k, io.by_expert = true;
  io.probs = probs.data_ptr<float>(), io.values = ev.data_ptr<float>(), io.ids = ei.data_ptr<int64_t>();
  reference_router_top_k(io);
  const auto expected = by_id(rv, ri);
  CHECK(torch::equal(ei, expected.second));
  CHECK(bit_identical(ev, expected.first));
  torch::Tensor g = torch::randn({rows, k});
  g[0].fill_(-0.0);
  g[1][0].fill_(std::nanf(""));
  torch::Tensor dprobs = torch::full({rows, E}, 7.0f);
  RouterTopKBackwardIO bio;
  bio.rows = rows, bio.experts = E, bio.k = k, bio.grad = g.data_ptr<float>(), bio.ids = ri.data_ptr<int64_t>(), bio.dprobs = dprobs.data_ptr<float>();
  reference_router_top_k_backward(bio);
  CHECK(bit_identical(dprobs, torch::zeros({rows, E}).scatter(1, ri, g)));
}

// choose_experts on `device` against its composition there (topk, the weights normalised in topk's
// order, then moved into expert order by in_expert_order): the same ids, the weights and the
// probabilities' gradient bit for bit. On CUDA for k <= 2 the kernel forms the expert order itself.
void check_choose_experts(const torch::Tensor& probs, int64_t k, torch::Device device, const torch::Tensor& ri) {
  torch::Tensor g = torch::randn({probs.size(0), k});  // the weights' upstream gradient, zeros of both signs among it
  g.index_put_({torch::indexing::Slice(0, probs.size(0), 7)}, 0.0);
  g.index_put_({torch::indexing::Slice(2, probs.size(0), 7)}, -0.0);
  const torch::Tensor G = g.to(device);
  torch::Tensor p1 = probs.to(device).clone().requires_grad_(true), p2 = probs.to(device).clone().requires_grad_(true);
  const ExpertChoice ours = choose_experts(p1, k);
  const auto top = p2.topk(k, -1);
  const ExpertChoice theirs = in_expert_order(std::get<1>(top), std::get<0>(top) / std::get<0>(top).sum(-1, true));
  CHECK(torch::equal(ours.ids.cpu(), theirs.ids.cpu()));
  if (device.is_cuda() && k <= 2) CHECK(torch::equal(ours.ids.cpu(), std::get<0>(ri.sort(-1))));  // the kernel's: the reference's ids in expert order
  CHECK(bit_identical(ours.weights.detach(), theirs.weights.detach()));
  (ours.weights * G).sum().backward();
  (theirs.weights * G).sum().backward();
  CHECK(bit_identical(p1.grad(), p2.grad()));
}

}  // namespace

void check_top_k_experts(torch::Device device) {
  torch::manual_seed(12);
  for (const int64_t E : {16, 128})
    for (const int64_t k : {1, 2, 3, 8}) {
      INFO(device << " experts " << E << " k " << k);
      const torch::Tensor probs = router_probs(600, E);
      torch::Tensor rv = torch::empty({600, k}), ri = torch::empty({600, k}, torch::kInt64);
      RouterTopKIO io;
      io.rows = 600, io.experts = E, io.k = k, io.probs = probs.data_ptr<float>(), io.values = rv.data_ptr<float>(), io.ids = ri.data_ptr<int64_t>();
      reference_router_top_k(io);
      check_reference_against_cpu_topk(probs, k, rv, ri);
      check_reference_by_expert_and_backward(probs, k, rv, ri);
      check_against_topk_autograd(probs, k, device, rv, ri);
      check_choose_experts(probs, k, device, ri);
    }
}

// Routing of random top-k choices on `device` against its definition, for capacities 0 (dropless), 5
// and 1000: the inverse inverts the order; each token's slots and weights in ascending expert order;
// each expert's segment its assignments in token order, the first `capacity` of them; dropped rows last.
void check_routing(torch::Device device) {
  torch::manual_seed(7);
  // 6 experts (one-byte sort keys), 300 experts over 400 assignments (two-byte keys), and 3000 assignments of
  // 16 experts (on CUDA the counting sort's chunks of 1024: three of them).
  for (const auto& shape : std::vector<std::array<int64_t, 3>>{{40, 3, 6}, {200, 2, 300}, {1500, 2, 16}}) {
    const int64_t T = shape[0], k = shape[1], E = shape[2];
    torch::Tensor idx = std::get<1>(torch::rand({T, E}).topk(k, -1)).to(device);
    torch::Tensor w = torch::rand({T, k}).to(device);
    INFO(device << " T " << T << " k " << k << " E " << E);
    torch::Tensor idx_cpu = idx.cpu(), w_cpu = w.cpu();
    torch::Tensor ids = std::get<0>(idx_cpu.sort(-1));
    auto I = idx_cpu.accessor<int64_t, 2>(), S = ids.accessor<int64_t, 2>();
    auto W = w_cpu.accessor<float, 2>();
    for (int64_t capacity : {int64_t{0}, int64_t{5}, int64_t{1000}}) {
      INFO("capacity " << capacity);
      const Routing r = route(idx, w, E, capacity);
      const int64_t A = T * k;
      REQUIRE(r.order.size(0) == A);
      CHECK(torch::equal(r.order.index_select(0, r.inverse).cpu(), torch::arange(A)));
      // Slots of each token in ascending expert order, weights moved with them.
      torch::Tensor rw = r.weights.cpu(), order = r.order.cpu();
      auto RW = rw.accessor<float, 2>();
      auto O = order.accessor<int64_t, 1>();
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) {
          int64_t slot = 0;
          while (I[t][slot] != S[t][j]) ++slot;
          CHECK(RW[t][j] == W[t][slot]);
        }
      const torch::Tensor ends = r.host_ends();
      // Each expert's assignments in token order.
      std::vector<std::vector<int64_t>> expected(E);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) expected[S[t][j]].push_back(t * k + j);
      int64_t start = 0, kept = 0;
      for (int64_t e = 0; e < E; ++e) {
        const int64_t end = ends[e].item<int64_t>();
        // Expert e's segment: the first `capacity` of them.
        if (capacity > 0 && static_cast<int64_t>(expected[e].size()) > capacity) expected[e].resize(capacity);
        REQUIRE(end - start == static_cast<int64_t>(expected[e].size()));
        for (int64_t i = 0; i < end - start; ++i) CHECK(O[start + i] == expected[e][i]);
        kept += end - start;
        start = end;
      }
      // Counts, idle experts and the rows' tokens, as route() defines them whichever path formed them.
      CHECK(r.token_of_row.defined() == (device.is_cuda() && capacity == 0));  // the counting sort ran where it applies
      CHECK(r.ends.scalar_type() == torch::kInt32);
      for (int64_t e = 0; e < E; ++e) CHECK(r.assigned[e].item<int64_t>() == std::count_if(S.data(), S.data() + A, [&](int64_t x) { return x == e; }));
      CHECK(torch::equal(r.idle.cpu(), r.assigned.cpu() == 0));
      CHECK(torch::equal(dispatch_rows(r).cpu(), order.div(k, "floor")));
      if (device.is_cuda()) {  // every integer of the layout the CPU's, bit for bit
        const Routing c = route(idx_cpu, w_cpu, E, capacity);
        CHECK(torch::equal(r.order.cpu(), c.order));
        CHECK(torch::equal(r.inverse.cpu(), c.inverse));
        CHECK(torch::equal(r.ends.cpu(), c.ends));
        CHECK(torch::equal(r.assigned.cpu(), c.assigned));
        CHECK(torch::equal(r.weights.cpu(), c.weights));
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

namespace {

// Bit patterns, so that equal NaNs compare equal and +0 differs from -0.
torch::Tensor bits(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().cpu();
  return c.scalar_type() == torch::kBFloat16 ? c.view(torch::kInt16) : c.view(torch::kInt32);
}

}  // namespace

namespace {

// A MoE layer's fc1 of E experts, K -> N, under `recipe` at `step` of run seed 7, its experts initialised
// from the fixed `seed`, on `device`.
GroupedLinear expert_fc1(const Recipe& recipe, int64_t E, int64_t K, int64_t N, int64_t step, uint64_t seed, torch::Device device) {
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = recipe;
  ctx->run_seed = 7;
  ctx->step = step;
  torch::manual_seed(seed);
  GroupedLinear m(E, K, N, "layers.1.mlp", "linear_fc1", ctx, /*first_layer_id=*/20, /*id_stride=*/2, /*layer_index=*/-1, 0);
  for (int64_t e = 0; e < E; ++e) m->init_expert(e);
  m->to(device);
  return m;
}

}  // namespace

OperandComparison compare_grouped_operands(const Recipe& recipe, torch::Device device) {
  OperandComparison out;
  const int64_t E = 8, K = 128, N = 256;
  GroupedLinear m = expert_fc1(recipe, E, K, N, /*step=*/5, /*seed=*/11, device);
  const auto& ctx = m->layers[0]->ctx;
  // Expert rows: idle experts, a single row, rows that are and are not multiples of 16; 9 dropped rows at the end.
  const std::vector<int32_t> counts = {17, 0, 70, 1, 32, 0, 45, 16};
  std::vector<int32_t> ends_host;
  int32_t total = 0;
  for (int32_t n : counts) ends_host.push_back(total += n);
  const int64_t A = total + 9;
  const torch::Tensor ends = torch::tensor(ends_host, torch::kInt32).to(device);
  const torch::ScalarType act = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  // Activations with an outlier row and a zero row; gradients of another scale.
  torch::Tensor x = torch::randn({A, K});
  x[3] *= 40;
  x[20].zero_();
  torch::Tensor dy = torch::randn({A, N}) * 1e-3;
  x = x.to(device, act);
  dy = dy.to(device, act);
  const torch::Tensor w = m->weight.detach();
  const int64_t step = ctx->step;
  auto fail = [&](const std::string& what) {
    if (!out.mismatches.empty()) out.mismatches += "; ";
    out.mismatches += what;
  };
  auto check = [&](const torch::Tensor& grouped, const torch::Tensor& expert, const std::string& what) {
    ++out.operands;
    if (grouped.sizes() != expert.sizes() || !torch::equal(bits(grouped), bits(expert))) fail(what);
  };
  auto zero_rows = [&](const torch::Tensor& t, int64_t from, int64_t to, const std::string& what) {
    if (to > from && !torch::equal(bits(t.slice(0, from, to)), bits(torch::zeros_like(t.slice(0, from, to))))) fail(what + " padding");
  };
  const torch::Tensor wrows = torch::arange(1, E + 1, torch::TensorOptions().dtype(torch::kInt32).device(device)) * static_cast<int32_t>(N);
  const torch::Tensor fx = m->grouped_operand(x, Gemm::kFprop, 0, step, false, ends, torch::Tensor());
  const torch::Tensor fw = m->grouped_operand(w.view({E * N, K}), Gemm::kFprop, 1, step, false, wrows, torch::Tensor()).view({E, N, K});
  const torch::Tensor ddy = m->grouped_operand(dy, Gemm::kDgrad, 0, step, false, ends, torch::Tensor());
  const torch::Tensor dw = m->grouped_operand(w.view({E * N, K}), Gemm::kDgrad, 1, step, true, wrows, torch::Tensor()).view({E, N, K});
  const GroupedRows rows = m->wgrad_rows(ends, A);
  // The layout is reused for the same ends tensor (a MoE layer's second linear), recomputed for
  // another tensor of the same values and for another row count, and equal each time.
  {
    const GroupedRows again = m->wgrad_rows(ends, A), other = m->wgrad_rows(ends.clone(), A), more = m->wgrad_rows(ends, A + 16);
    if (again.src.data_ptr() != rows.src.data_ptr()) fail("wgrad_rows not reused for the same ends");
    if (other.src.data_ptr() == rows.src.data_ptr() || more.src.data_ptr() == rows.src.data_ptr()) fail("wgrad_rows reused for other ends or rows");
    if (!torch::equal(other.src, rows.src) || !torch::equal(other.ends, rows.ends) || !torch::equal(other.lens, rows.lens))
      fail("wgrad_rows recomputed differently");
    if (more.rows != rows.rows + 16 || !torch::equal(more.ends, rows.ends)) fail("wgrad_rows for more rows");
  }
  // As the layer's backward makes them: the tokens read in place through the padded layout's row map.
  const torch::Tensor wdy = m->grouped_operand(dy, Gemm::kWgrad, 0, step, true, rows.ends, rows.lens, rows.src);
  const torch::Tensor wx = m->grouped_operand(x, Gemm::kWgrad, 1, step, true, rows.ends, rows.lens, rows.src);
  // Both operands of X and of dY from one read where the segmented pair kernel covers the recipe: the
  // whole tensors (padding and dropped rows included) equal the separate quantizations'. The pair gives
  // BF16 operands: the GPU's grouped GEMMs' (the CPU and FP32 GEMMs take FP32 ones).
  if (device.is_cuda() && recipe.gemm_precision != "fp32") {
    const std::pair<torch::Tensor, torch::Tensor> px = m->grouped_operand_pair(x, Gemm::kFprop, 0, Gemm::kWgrad, 1, step, ends, rows);
    const std::pair<torch::Tensor, torch::Tensor> pdy = m->grouped_operand_pair(dy, Gemm::kDgrad, 0, Gemm::kWgrad, 0, step, ends, rows);
    out.pairs_fused = m->pairs_operands(x, Gemm::kFprop, 0, Gemm::kWgrad, 1, step) + m->pairs_operands(dy, Gemm::kDgrad, 0, Gemm::kWgrad, 0, step);
    const bool quantized[] = {!m->layers[0]->bf16 && recipe.at(Gemm::kFprop).op[0].quantize, !m->layers[0]->bf16 && recipe.at(Gemm::kWgrad).op[1].quantize,
                              !m->layers[0]->bf16 && recipe.at(Gemm::kDgrad).op[0].quantize, !m->layers[0]->bf16 && recipe.at(Gemm::kWgrad).op[0].quantize};
    if (quantized[0] && quantized[1]) {
      check(px.first, fx, "pair fprop.x");
      check(px.second, wx, "pair wgrad.x");
    }
    if (quantized[2] && quantized[3]) {
      check(pdy.first, ddy, "pair dgrad.dy");
      check(pdy.second, wdy, "pair wgrad.dy");
    }
  }
  const torch::Tensor pends = rows.ends.cpu(), plens = rows.lens.cpu();
  const torch::ScalarType dq = act;
  int64_t begin = 0, pbegin = 0;
  for (int64_t e = 0; e < E; begin = ends_host[e], pbegin = pends[e].item<int32_t>(), ++e) {
    const LayerQuant& L = *m->layers[e];
    const std::string ex = "expert " + std::to_string(e) + " ";
    check(fw[e], prepare_operand(w[e], L, Gemm::kFprop, 1, step, false, dq), ex + "fprop.w");
    check(dw[e], prepare_operand(w[e], L, Gemm::kDgrad, 1, step, true, dq).t(), ex + "dgrad.w");
    const int64_t n = ends_host[e] - begin;
    if (n == 0) continue;
    check(fx.slice(0, begin, begin + n), prepare_operand(x.slice(0, begin, begin + n), L, Gemm::kFprop, 0, step, false, dq), ex + "fprop.x");
    check(ddy.slice(0, begin, begin + n), prepare_operand(dy.slice(0, begin, begin + n), L, Gemm::kDgrad, 0, step, false, dq),
          ex + "dgrad.dy");
    const int64_t len = plens[e].item<int32_t>(), pend = pends[e].item<int32_t>();
    check(wdy.slice(0, pbegin, pbegin + len), prepare_operand(dy.slice(0, begin, begin + n), L, Gemm::kWgrad, 0, step, true, dq).t(),
          ex + "wgrad.dy");
    check(wx.slice(0, pbegin, pbegin + len), prepare_operand(x.slice(0, begin, begin + n), L, Gemm::kWgrad, 1, step, true, dq).t(),
          ex + "wgrad.x");
    zero_rows(wdy, pbegin + len, pend, ex + "wgrad.dy");
    zero_rows(wx, pbegin + len, pend, ex + "wgrad.x");
  }
  // Rows past the last segment: the dropped rows (rowwise) and the unused padded rows (WGRAD).
  const torch::Tensor layout[] = {fx, ddy};
  for (const torch::Tensor& t : layout)
    if (!t.is_same(x) && !t.is_same(dy)) zero_rows(t, total, A, "dropped rows");
  zero_rows(wdy, pends[E - 1].item<int32_t>(), rows.rows, "wgrad.dy tail");
  zero_rows(wx, pends[E - 1].item<int32_t>(), rows.rows, "wgrad.x tail");
  return out;
}

std::string grouped_linear_without_rows(const Recipe& recipe, torch::Device device) {
  const int64_t E = 4, K = 128, N = 256;
  GroupedLinear m = expert_fc1(recipe, E, K, N, /*step=*/3, /*seed=*/5, device);
  const auto& ctx = m->layers[0]->ctx;
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  Routing r;
  r.top_k = 2, r.experts = E;
  r.ends = torch::zeros({E}, i64.dtype(torch::kInt32));
  r.order = r.inverse = torch::empty({0}, i64);
  r.assigned = torch::zeros({E}, i64);
  const torch::Tensor x = torch::zeros({0, K}, torch::TensorOptions().dtype(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32).device(device))
                              .requires_grad_(true);
  try {
    // The segmented quantizer on no rows, as the grouped path calls it (the per-expert loop skips idle
    // experts): X's FPROP operand, and its WGRAD layout, whose rows are all padding.
    const torch::Tensor fx = m->grouped_operand(x.detach(), Gemm::kFprop, 0, ctx->step, false, r.ends, torch::Tensor());
    const GroupedRows rows = m->wgrad_rows(r.ends, 0);
    const torch::Tensor wx = m->grouped_operand(x.detach(), Gemm::kWgrad, 1, ctx->step, true, rows.ends, rows.lens, rows.src);
    if (fx.size(0) != 0 || wx.size(0) != rows.rows || wx.count_nonzero().item<int64_t>() != 0) return "the operands of no rows are not empty or zero";
    const torch::Tensor y = m->forward(x, r);
    if (y.sizes() != torch::IntArrayRef({0, N})) return "output of shape " + std::to_string(y.size(0)) + "x" + std::to_string(y.size(1));
    y.sum().backward();
    if (!x.grad().defined() || x.grad().sizes() != x.sizes()) return "no [0, K] input gradient";
    if (!m->weight.grad().defined() || m->weight.grad().count_nonzero().item<int64_t>() != 0) return "the weight's gradient is not zero";
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

torch::Tensor random_segment_ends(int64_t E, int64_t max_count, int64_t seed) {
  torch::manual_seed(seed);
  torch::Tensor counts = torch::randint(0, max_count, {E}, torch::kInt32);
  counts.index_put_({torch::rand({E}) < 0.25}, 0);
  return torch::cumsum(counts, 0).to(torch::kInt32);
}

}  // namespace ufp4::test
