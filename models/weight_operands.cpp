#include "models/weight_operands.h"

#include <cstring>
#include <utility>

#include "models/quant_ops.h"

namespace ufp4 {

namespace {

// Equal where the batched kernel reads a spec: everything but the SR keys, which round-to-nearest
// (the only rounding it takes) never reads.
bool same_numerics(const KernelSpec& a, const KernelSpec& b) {
  const GridParams &g = a.grid, &h = b.grid;
  bool same = g.symmetric == h.symmetric && g.n == h.n && g.up_at_mid == h.up_at_mid && g.gmax == h.gmax &&
              std::memcmp(g.level, h.level, sizeof g.level) == 0 && std::memcmp(g.mid, h.mid, sizeof g.mid) == 0 &&
              std::memcmp(g.code, h.code, sizeof g.code) == 0;
  same = same && a.block == b.block && a.scale_kind == b.scale_kind && a.rounding == b.rounding && a.block_2d == b.block_2d && a.rht == b.rht &&
         std::memcmp(a.rht_signs, b.rht_signs, sizeof a.rht_signs) == 0 && a.rht_scale == b.rht_scale;
  return same && a.fast.kind == b.fast.kind && a.fast.step == b.fast.step && a.fast.inv_step == b.fast.inv_step && a.fast.top == b.fast.top;
}

struct Batch {
  QuantSpec row, col;
  KernelSpec krow, kcol;
  std::vector<torch::Tensor> weights;
};

// The specs of W in FPROP (rowwise) and DGRAD (columnwise) for u, when the batched kernel covers u.
bool covered(const QuantContext& ctx, const WeightUse& u, QuantSpec& row, QuantSpec& col) {
  if (u.layers.empty() || !u.weight.defined() || !u.weight.is_cuda()) return false;
  const Recipe& r = ctx.recipe;
  if (r.gemm_precision == "fp32" || ctx.telemetry) return false;
  if (!r.at(Gemm::kFprop).op[1].quantize || !r.at(Gemm::kDgrad).op[1].quantize) return false;
  for (const LayerQuant* L : u.layers)
    if (L->bf16 || (ctx.capture && ctx.capture->wants(ctx.step, L->name))) return false;
  row = operand_spec(*u.layers[0], Gemm::kFprop, 1, ctx.step);
  col = operand_spec(*u.layers[0], Gemm::kDgrad, 1, ctx.step);
  if (!quantize_pair_batch_fused(u.weight, row, col)) return false;
  // An expert linear's experts: one launch takes one pair of specs for all of them.
  const KernelSpec krow = make_kernel_spec(row), kcol = make_kernel_spec(col);
  for (size_t i = 1; i < u.layers.size(); ++i)
    if (!same_numerics(krow, make_kernel_spec(operand_spec(*u.layers[i], Gemm::kFprop, 1, ctx.step))) ||
        !same_numerics(kcol, make_kernel_spec(operand_spec(*u.layers[i], Gemm::kDgrad, 1, ctx.step))))
      return false;
  return true;
}

}  // namespace

WeightOperandScope::WeightOperandScope(QuantContext& ctx, const std::vector<WeightUse>& uses) : ctx_(ctx) {
  ctx_.weight_operands.clear();
  if (!ctx_.batch_weight_operands || !ctx_.pair_operands) return;
  try {
    make(uses);
  } catch (...) {
    ctx_.weight_operands.clear();  // a constructor that throws runs no destructor
    throw;
  }
}

void WeightOperandScope::make(const std::vector<WeightUse>& uses) {
  // Weights on equal specs share a launch (all of them under the recipes' shared RHT signs).
  std::vector<Batch> batches;
  for (const WeightUse& u : uses) {
    QuantSpec row, col;
    if (!covered(ctx_, u, row, col)) continue;
    const KernelSpec krow = make_kernel_spec(row), kcol = make_kernel_spec(col);
    Batch* b = nullptr;
    for (Batch& c : batches)
      if (same_numerics(c.krow, krow) && same_numerics(c.kcol, kcol) && c.weights.front().device() == u.weight.device()) b = &c;
    if (!b) {
      batches.push_back({row, col, krow, kcol, {}});
      b = &batches.back();
    }
    b->weights.push_back(u.weight);
  }
  for (const Batch& b : batches) {
    const auto ops = quantize_pair_batch(b.weights, b.row, b.col);
    for (size_t i = 0; i < ops.size(); ++i) ctx_.weight_operands[b.weights[i].unsafeGetTensorImpl()] = {ops[i].first, ops[i].second};
  }
}

WeightOperandScope::~WeightOperandScope() { ctx_.weight_operands.clear(); }

const WeightOperands* prepared_weight_operands(const QuantContext& ctx, const torch::Tensor& w) {
  if (ctx.weight_operands.empty() || !w.defined()) return nullptr;
  const auto it = ctx.weight_operands.find(w.unsafeGetTensorImpl());
  return it == ctx.weight_operands.end() ? nullptr : &it->second;
}

WeightOperands take_weight_operands(QuantContext& ctx, const torch::Tensor& w) {
  if (ctx.weight_operands.empty() || !w.defined()) return {};
  const auto it = ctx.weight_operands.find(w.unsafeGetTensorImpl());
  if (it == ctx.weight_operands.end()) return {};
  WeightOperands out = std::move(it->second);
  ctx.weight_operands.erase(it);
  return out;
}

}  // namespace ufp4
