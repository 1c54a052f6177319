#include "models/quant_mlp.h"

#include "common/error.h"
#include "models/fused_ops.h"

namespace ufp4 {

namespace {

const LayerQuant& layer_at(int64_t ptr) { return *reinterpret_cast<const LayerQuant*>(ptr); }

// fc2(swiglu(fc1(x))) with QuantLinear's operands and GEMMs; the SwiGLU's output is fc2's X and its
// gradient fc1's dY, each made as its pair of operands (swiglu_quantize_pair).
struct QuantMlpFunction : public torch::autograd::Function<QuantMlpFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w1, const torch::Tensor& w2,
                               int64_t l1, int64_t l2) {
    const LayerQuant &L1 = layer_at(l1), &L2 = layer_at(l2);
    const int64_t step = L1.ctx->step;
    const torch::Tensor x2 = x.reshape({-1, x.size(-1)});
    const OperandPair xp = prepare_operand_pair(x2, L1, Gemm::kFprop, 0, Gemm::kWgrad, 1, step);
    const OperandPair w1p = prepare_operand_pair(w1, L1, Gemm::kFprop, 1, Gemm::kDgrad, 1, step);
    const torch::Tensor h = quant_fprop(x, w1, {}, L1, step, xp.row, w1p.row);  // [..., 2 hidden]: gate, up
    const torch::Tensor h2 = h.reshape({-1, h.size(-1)}).contiguous();
    const auto sp = swiglu_quantize_pair(h2, {}, operand_spec(L2, Gemm::kFprop, 0, step), operand_spec(L2, Gemm::kWgrad, 1, step));
    const OperandPair w2p = prepare_operand_pair(w2, L2, Gemm::kFprop, 1, Gemm::kDgrad, 1, step);
    std::vector<int64_t> s_shape(x.sizes().begin(), x.sizes().end());
    s_shape.back() = h2.size(1) / 2;
    const torch::Tensor y = quant_fprop(sp.first.view(s_shape), w2, {}, L2, step, sp.first, w2p.row);
    ctx->save_for_backward({xp.col.defined() ? xp.col : x2, w1p.col.defined() ? w1p.col : w1, h2, sp.second, w2p.col.defined() ? w2p.col : w2});
    ctx->saved_data["x_col"] = xp.col.defined();
    ctx->saved_data["w1_col"] = w1p.col.defined();
    ctx->saved_data["w2_col"] = w2p.col.defined();
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w1_dtype"] = static_cast<int64_t>(w1.scalar_type());
    ctx->saved_data["w2_dtype"] = static_cast<int64_t>(w2.scalar_type());
    ctx->saved_data["l1"] = l1;
    ctx->saved_data["l2"] = l2;
    ctx->saved_data["step"] = step;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const LayerQuant &L1 = layer_at(ctx->saved_data["l1"].toInt()), &L2 = layer_at(ctx->saved_data["l2"].toInt());
    const int64_t step = ctx->saved_data["step"].toInt();
    const auto saved = ctx->get_saved_variables();
    // Each weight and X: its columnwise operand from the forward, or the tensor itself.
    const bool x_col = ctx->saved_data["x_col"].toBool(), w1_col = ctx->saved_data["w1_col"].toBool(), w2_col = ctx->saved_data["w2_col"].toBool();
    const torch::Tensor x2 = x_col ? torch::Tensor() : saved[0], xt = x_col ? saved[0] : torch::Tensor();
    const torch::Tensor w1 = w1_col ? torch::Tensor() : saved[1], w1t = w1_col ? saved[1] : torch::Tensor();
    const torch::Tensor &h2 = saved[2], &st = saved[3];
    const torch::Tensor w2 = w2_col ? torch::Tensor() : saved[4], w2t = w2_col ? saved[4] : torch::Tensor();
    const auto dtype = [&](const char* key) { return static_cast<torch::ScalarType>(ctx->saved_data[key].toInt()); };

    // linear_fc2: dY from the residual stream; dS = dY W2 in the SwiGLU's dtype, as QuantLinear returns it.
    const torch::Tensor dy2 = grads[0].reshape({-1, grads[0].size(-1)});
    const OperandPair dyp = prepare_operand_pair(dy2, L2, Gemm::kDgrad, 0, Gemm::kWgrad, 0, step);
    const torch::Tensor ds = quant_dgrad(dy2, w2, L2, step, dyp.row, w2t).to(h2.scalar_type());
    const torch::Tensor dw2 = quant_wgrad(dy2, torch::Tensor(), L2, step, dyp.col, st).to(dtype("w2_dtype"));
    // linear_fc1: its dY is the SwiGLU's gradient, straight into its two operands.
    const auto dh = swiglu_quantize_pair(h2, ds, operand_spec(L1, Gemm::kDgrad, 0, step), operand_spec(L1, Gemm::kWgrad, 0, step));
    torch::Tensor dx;
    if (ctx->needs_input_grad(0))
      dx = quant_dgrad(dh.first, w1, L1, step, dh.first, w1t).to(dtype("x_dtype")).view(ctx->saved_data["x_sizes"].toIntVector());
    const torch::Tensor dw1 = quant_wgrad(dh.first, x2, L1, step, dh.second, xt).to(dtype("w1_dtype"));
    return {dx, dw1, dw2, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool quant_mlp_applies(const torch::Tensor& x, const QuantLinearImpl& fc1, const QuantLinearImpl& fc2) {
  const LayerQuant &L1 = *fc1.layer, &L2 = *fc2.layer;
  if (!x.is_cuda() || x.scalar_type() != torch::kBFloat16 || x.dim() < 2 || !torch::GradMode::is_enabled()) return false;
  if (!x.requires_grad() || !fc1.weight.requires_grad() || !fc2.weight.requires_grad() || fc1.bias.defined() || fc2.bias.defined()) return false;
  if (L1.ctx != L2.ctx || L1.ctx->telemetry) return false;
  const int64_t step = L1.ctx->step, rows = x.numel() / x.size(-1), hidden = fc2.weight.size(1);
  if (L1.ctx->capture && (L1.ctx->capture->wants(step, L1.name) || L1.ctx->capture->wants(step, L2.name))) return false;
  if (fc1.weight.size(0) != 2 * hidden || fc2.weight.size(0) != x.size(-1)) return false;
  // The SwiGLU's output as fc2's X and its gradient as fc1's dY, each a pair from the pair kernel.
  return operand_pair_wanted(L2, Gemm::kFprop, 0, Gemm::kWgrad, 1, rows, true) &&
         operand_pair_wanted(L1, Gemm::kDgrad, 0, Gemm::kWgrad, 0, rows, true) &&
         swiglu_quantize_pair_fused(rows, hidden, false, operand_spec(L2, Gemm::kFprop, 0, step), operand_spec(L2, Gemm::kWgrad, 1, step)) &&
         swiglu_quantize_pair_fused(rows, hidden, true, operand_spec(L1, Gemm::kDgrad, 0, step), operand_spec(L1, Gemm::kWgrad, 0, step));
}

torch::Tensor quant_mlp(const torch::Tensor& x, const QuantLinearImpl& fc1, const QuantLinearImpl& fc2) {
  if (!quant_mlp_applies(x, fc1, fc2)) throw Error("quant_mlp: " + fc1.layer->name + " and " + fc2.layer->name + " are not a fused quantized MLP here");
  return QuantMlpFunction::apply(x, fc1.weight, fc2.weight, reinterpret_cast<int64_t>(fc1.layer.get()), reinterpret_cast<int64_t>(fc2.layer.get()));
}

}  // namespace ufp4
