#include "models/quant_linear.h"

#include <fnmatch.h>

#include <tuple>

#include "common/error.h"
#include "common/fs.h"
#include "models/quant_ops.h"
#include "models/weight_operands.h"

namespace ufp4 {

namespace {

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool fp32_gemm(const torch::Tensor& x, const LayerQuant& L) { return !x.is_cuda() || L.ctx->recipe.gemm_precision == "fp32"; }

// W goes into FPROP and DGRAD as itself, cast to x's (lower) type: no quantizer or rotation touches it,
// and no operand capture of this step records W as it was (the master weight).
bool same_cast_serves_dgrad(const torch::Tensor& x, const torch::Tensor& w, const LayerQuant& L) {
  const bool captured = L.ctx->capture && L.ctx->capture->wants(L.ctx->step, L.name);
  return !captured && !fp32_gemm(x, L) && w.scalar_type() != x.scalar_type() && gemm_untouched(L, Gemm::kFprop) &&
         gemm_untouched(L, Gemm::kDgrad);
}

struct QuantLinearFunction : public torch::autograd::Function<QuantLinearFunction> {
  // `bias` is a 0-element placeholder when has_bias is false: autograd needs defined inputs.
  // backward_follows: grad mode was on and an input needs a gradient (the columnwise operands are then
  // made here, from the same read as the rowwise ones, and saved in place of x and w).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& bias_in, bool has_bias, int64_t layer_ptr, bool backward_follows) {
    const LayerQuant& L = *reinterpret_cast<const LayerQuant*>(layer_ptr);
    const int64_t step = L.ctx->step, K = x.size(-1), N = w.size(0);
    OperandPair xp, wp;
    if (backward_follows && w.requires_grad()) xp = prepare_operand_pair(x.reshape({-1, K}), L, Gemm::kFprop, 0, Gemm::kWgrad, 1, step);
    // W's operands: this forward's batch (models/weight_operands.h), or made here.
    WeightOperands pre = take_weight_operands(*L.ctx, w);
    if (pre.row.defined()) {
      wp.row = std::move(pre.row);
      if (backward_follows && x.requires_grad()) wp.col = std::move(pre.col);
    } else if (backward_follows && x.requires_grad()) {
      wp = prepare_operand_pair(w, L, Gemm::kFprop, 1, Gemm::kDgrad, 1, step);
    }
    // Where W enters both FPROP and DGRAD untouched, one cast to the activations' type serves both: the
    // backward then multiplies by the forward's copy instead of casting the master weight again (the
    // same values, so the same bits).
    const torch::Tensor w_used = same_cast_serves_dgrad(x, w, L) ? w.to(x.scalar_type()) : w;
    ctx->save_for_backward({xp.col.defined() ? xp.col : x, wp.col.defined() ? wp.col : w_used});
    ctx->saved_data["x_col"] = xp.col.defined();
    ctx->saved_data["w_col"] = wp.col.defined();
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    ctx->saved_data["n"] = N;
    ctx->saved_data["step"] = step;
    ctx->saved_data["layer"] = layer_ptr;
    ctx->saved_data["has_bias"] = has_bias;
    return quant_fprop(x, w_used, has_bias ? bias_in : torch::Tensor(), L, step, xp.row, wp.row);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const LayerQuant& L = *reinterpret_cast<const LayerQuant*>(ctx->saved_data["layer"].toInt());
    const int64_t step = ctx->saved_data["step"].toInt(), N = ctx->saved_data["n"].toInt();
    const std::vector<int64_t> x_sizes = ctx->saved_data["x_sizes"].toIntVector();
    const auto x_dtype = static_cast<torch::ScalarType>(ctx->saved_data["x_dtype"].toInt());
    const auto w_dtype = static_cast<torch::ScalarType>(ctx->saved_data["w_dtype"].toInt());
    auto saved = ctx->get_saved_variables();
    // Either the input itself or its columnwise operand, prepared in the forward.
    const bool x_col = ctx->saved_data["x_col"].toBool(), w_col = ctx->saved_data["w_col"].toBool();
    const torch::Tensor x2 = x_col ? torch::Tensor() : saved[0].reshape({-1, x_sizes.back()}), xt = x_col ? saved[0] : torch::Tensor();
    const torch::Tensor w = w_col ? torch::Tensor() : saved[1], wt = w_col ? saved[1] : torch::Tensor();
    torch::Tensor dy2 = grads[0].reshape({-1, N});
    const bool need_dx = ctx->needs_input_grad(0), need_dw = ctx->needs_input_grad(1);
    OperandPair dyp;
    if (need_dx && need_dw) dyp = prepare_operand_pair(dy2, L, Gemm::kDgrad, 0, Gemm::kWgrad, 0, step);
    torch::Tensor dx, dw, db;
    if (need_dx) dx = quant_dgrad(dy2, w, L, step, dyp.row, wt).to(x_dtype).view(x_sizes);
    if (need_dw) dw = quant_wgrad(dy2, x2, L, step, dyp.col, xt).to(w_dtype);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) db = dy2.sum(0).to(w_dtype);
    return {dx, dw, db, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

uint64_t rht_sign_seed(uint64_t recipe_seed, uint64_t run_seed) {
  return run_seed == 1 ? recipe_seed : mix64(recipe_seed ^ mix64(run_seed));
}

QuantSpec operand_spec(const LayerQuant& L, Gemm g, int slot, int64_t step) {
  const Recipe& r = L.ctx->recipe;
  QuantSpec s = r.at(g).op[slot].spec;
  s.rht = r.at(g).rht;
  const uint64_t base = rht_sign_seed(r.seed, L.ctx->recipe_rht_signs ? 1 : L.ctx->run_seed);
  uint64_t rht_seed = base;
  if (r.rht_signs == "per_layer") rht_seed = mix64(base ^ mix64(static_cast<uint64_t>(L.layer_id)));
  if (r.rht_signs == "per_step") rht_seed = mix64(base ^ mix64(static_cast<uint64_t>(L.layer_id)) ^ mix64(~static_cast<uint64_t>(step)));
  s.rht_seed = rht_seed;  // both operands of a GEMM share it, so the rotation cancels
  s.seed = mix64(L.ctx->run_seed ^ mix64(static_cast<uint64_t>(L.layer_id) + 1));
  s.offset = static_cast<uint64_t>(g) * 2 + static_cast<uint64_t>(slot);
  if (L.ctx->device_step_offset.defined()) s.offset_add = reinterpret_cast<const uint64_t*>(L.ctx->device_step_offset.data_ptr<int64_t>());
  else s.offset += static_cast<uint64_t>(step) * 8;
  return s;
}

bool gemm_untouched(const LayerQuant& L, Gemm g) {
  if (L.bf16) return true;
  const GemmRecipe& r = L.ctx->recipe.at(g);
  return !r.rht && !r.op[0].quantize && !r.op[1].quantize;
}

namespace {

// Telemetry's alpha and the capture of one prepared operand `out` of t.
void observe_operand(const torch::Tensor& t, const torch::Tensor& out, const LayerQuant& L, Gemm g, int slot, int64_t step, bool columnwise,
                     const QuantSpec& spec) {
  const OperandRecipe& o = L.ctx->recipe.at(g).op[slot];
  const int rht_size = L.ctx->recipe.at(g).rht;
  const bool touched = !L.bf16 && (o.quantize || rht_size);
  const bool capture = L.ctx->capture && L.ctx->capture->wants(step, L.name);
  if (!(L.ctx->telemetry && o.quantize && !L.bf16) && !capture) return;
  const std::string key = L.name + "/" + gemm_key(g) + "." + operand_key(g, slot);
  torch::NoGradGuard ng;
  const torch::Tensor raw = columnwise ? t.t() : t;
  torch::Tensor ref = raw;
  if (touched && rht_size) ref = rht(t, spec, columnwise, torch::kFloat32);
  if (L.ctx->telemetry && o.quantize && !L.bf16) {
    torch::Tensor r = ref.to(torch::kFloat64), q = out.to(torch::kFloat64);
    L.ctx->alpha[key] = ((q * r).sum() / (r * r).sum()).item<double>();
  }
  if (capture) L.ctx->capture->add(key, raw, ref, out);
}

}  // namespace

torch::Tensor prepare_operand(const torch::Tensor& t, const LayerQuant& L, Gemm g, int slot, int64_t step, bool columnwise,
                      torch::ScalarType dq_dtype) {
  const OperandRecipe& o = L.ctx->recipe.at(g).op[slot];
  const int rht_size = L.ctx->recipe.at(g).rht;
  torch::Tensor out;
  QuantSpec spec;
  const bool touched = !L.bf16 && (o.quantize || rht_size);
  if (touched) spec = operand_spec(L, g, slot, step);
  if (touched && columnwise && rht_size && t.size(0) % rht_size != 0) {
    // Rotating along tokens needs whole segments: zero rows complete the last one. Both operands of
    // the GEMM are padded alike, and zero rows add nothing to dY^T X.
    const int64_t pad = rht_size - t.size(0) % rht_size;
    return prepare_operand(torch::cat({t, torch::zeros({pad, t.size(1)}, t.options())}), L, g, slot, step, columnwise, dq_dtype);
  }
  if (!touched) {
    out = columnwise ? t.t() : t;
  } else if (o.quantize) {
    QuantizeOptions opt;
    opt.columnwise = columnwise;
    opt.out_dtype = dq_dtype;
    opt.want_codes = false;
    out = quantize(t, spec, opt).dequant;
  } else {
    out = rht(t, spec, columnwise, dq_dtype);
  }
  observe_operand(t, out, L, g, slot, step, columnwise, spec);
  return out;
}

OperandPair prepare_operand_pair(const torch::Tensor& t, const LayerQuant& L, Gemm g_row, int slot_row, Gemm g_col, int slot_col,
                                 int64_t step) {
  const Recipe& r = L.ctx->recipe;
  const int col_rht = r.at(g_col).rht;
  if (!L.ctx->pair_operands || L.bf16 || fp32_gemm(t, L) || !r.at(g_row).op[slot_row].quantize || !r.at(g_col).op[slot_col].quantize ||
      (col_rht && t.size(0) % col_rht != 0))
    return {};
  const QuantSpec rs = operand_spec(L, g_row, slot_row, step), cs = operand_spec(L, g_col, slot_col, step);
  torch::Tensor tc = t.contiguous();
  if (!quantize_pair_fused(tc, rs, cs)) return {};
  OperandPair p;
  std::tie(p.row, p.col) = quantize_pair(tc, rs, cs);
  observe_operand(t, p.row, L, g_row, slot_row, step, false, rs);
  observe_operand(t, p.col, L, g_col, slot_col, step, true, cs);
  return p;
}

torch::Tensor quant_fprop(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias, const LayerQuant& L, int64_t step,
                          const torch::Tensor& xq_in, const torch::Tensor& wq_in) {
  const int64_t K = x.size(-1), N = w.size(0);
  torch::Tensor x2 = x.reshape({-1, K});
  const bool fp32 = fp32_gemm(x, L);
  const torch::ScalarType dq = fp32 ? torch::kFloat32 : torch::kBFloat16;
  torch::Tensor xq = xq_in.defined() ? xq_in : prepare_operand(x2, L, Gemm::kFprop, 0, step, false, dq);
  torch::Tensor wq = wq_in.defined() ? wq_in : prepare_operand(w, L, Gemm::kFprop, 1, step, false, dq);
  // Untouched operands: exactly LibTorch's linear, on the caller's shape.
  if (xq.is_same(x2) && wq.is_same(w)) {
    const auto t = x.scalar_type();
    return torch::nn::functional::linear(x, w.to(t), bias.defined() ? bias.to(t) : bias);
  }
  torch::Tensor y2 = torch::nn::functional::linear(xq.to(dq), wq.to(dq), bias.defined() ? bias.to(dq) : bias).to(x.scalar_type());
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  return y2.view(shape);
}

torch::Tensor quant_dgrad(const torch::Tensor& dy2, const torch::Tensor& w, const LayerQuant& L, int64_t step, const torch::Tensor& dyq,
                          const torch::Tensor& wt) {
  // dX = dY W, reduction over N
  const torch::ScalarType dq = fp32_gemm(dy2, L) ? torch::kFloat32 : torch::kBFloat16;
  torch::Tensor a = dyq.defined() ? dyq : prepare_operand(dy2, L, Gemm::kDgrad, 0, step, false, dq);
  torch::Tensor bt = wt.defined() ? wt : prepare_operand(w, L, Gemm::kDgrad, 1, step, true, dq);  // [K, N]
  if (a.is_same(dy2) && !wt.defined() && bt.is_alias_of(w)) return dy2.mm(w.to(dy2.scalar_type()));
  return a.to(dq).mm(bt.to(dq).t());
}

torch::Tensor quant_wgrad(const torch::Tensor& dy2, const torch::Tensor& x2, const LayerQuant& L, int64_t step, const torch::Tensor& dyt,
                          const torch::Tensor& xt) {
  // dW = dY^T X, reduction over M
  const torch::ScalarType dq = fp32_gemm(dy2, L) ? torch::kFloat32 : torch::kBFloat16;
  torch::Tensor at = dyt.defined() ? dyt : prepare_operand(dy2, L, Gemm::kWgrad, 0, step, true, dq);  // [N, M]
  torch::Tensor bt = xt.defined() ? xt : prepare_operand(x2, L, Gemm::kWgrad, 1, step, true, dq);   // [K, M]
  if (!dyt.defined() && !xt.defined() && at.is_alias_of(dy2) && bt.is_alias_of(x2)) return dy2.t().mm(x2.to(dy2.scalar_type()));
  return at.to(dq).mm(bt.to(dq).t());
}

torch::Tensor quant_linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& bias,
                           const std::shared_ptr<LayerQuant>& layer) {
  if (x.size(-1) != w.size(1))
    throw Error("linear " + layer->name + ": input has " + std::to_string(x.size(-1)) + " features, weight expects " + std::to_string(w.size(1)));
  const bool has_bias = bias.defined();
  const bool backward_follows = torch::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  return QuantLinearFunction::apply(x, w, has_bias ? bias : torch::empty({0}, w.options()), has_bias,
                                    reinterpret_cast<int64_t>(layer.get()), backward_follows);
}

QuantLinearImpl::QuantLinearImpl(int64_t in_features, int64_t out_features, bool with_bias, const std::string& name,
                                 std::shared_ptr<QuantContext> ctx, int64_t layer_id, int layer_index, int n_layers) {
  weight = register_parameter("weight", torch::empty({out_features, in_features}));
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    bias = register_parameter("bias", torch::empty({out_features}).uniform_(-bound, bound));
  }
  layer = std::make_shared<LayerQuant>();
  layer->name = name;
  layer->layer_id = layer_id;
  layer->ctx = std::move(ctx);
  layer->bf16 = layer->ctx->recipe.layer_is_bf16(name, layer_index, n_layers);
}

torch::Tensor QuantLinearImpl::forward(const torch::Tensor& x) { return quant_linear(x, weight, bias, layer); }

// ---- capture ----------------------------------------------------------------------------------

OperandCapture::OperandCapture(std::set<int64_t> steps, std::vector<std::string> layer_patterns, int64_t max_tokens, bool on_device)
    : steps_(std::move(steps)), patterns_(std::move(layer_patterns)), max_tokens_(max_tokens), on_device_(on_device) {}

bool OperandCapture::wants(int64_t step, const std::string& layer) const {
  if (!steps_.count(step)) return false;
  if (patterns_.empty()) return true;
  for (const auto& p : patterns_)
    if (fnmatch(p.c_str(), layer.c_str(), 0) == 0) return true;
  return false;
}

// The first max_tokens tokens (along dim 0 of FPROP x and DGRAD dY, dim 1 of the transposed WGRAD
// operands; weights whole), as FP32, contiguous, on the CPU unless on_device.
torch::Tensor OperandCapture::keep(const std::string& key, const torch::Tensor& t) const {
  int token_dim = -1;
  if (ends_with(key, "/fprop.x") || ends_with(key, "/dgrad.dy")) token_dim = 0;
  if (key.find("/wgrad.") != std::string::npos) token_dim = 1;
  torch::Tensor u = t.detach();
  if (max_tokens_ > 0 && token_dim >= 0 && u.size(token_dim) > max_tokens_) u = u.narrow(token_dim, 0, max_tokens_);
  u = u.to(torch::kFloat32);
  u = (on_device_ ? u : u.cpu()).contiguous();
  // A copy, never a view: FP32 master weights are updated in place before the step's operands are read.
  return u.is_alias_of(t) ? u.clone() : u;
}

void OperandCapture::add(const std::string& key, const torch::Tensor& raw, const torch::Tensor& before, const torch::Tensor& after) {
  auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
    return a.data_ptr() == b.data_ptr() && a.sizes() == b.sizes() && a.strides() == b.strides();
  };
  if (observe_) {
    if (!same(before, after)) observe_(key, keep(key, before), keep(key, after));
    if (ends_with(key, "/fprop.x") || ends_with(key, "/fprop.w") || ends_with(key, "/dgrad.dy")) raw_[key] = keep(key, raw);
    return;
  }
  pending_[key] = {keep(key, before), same(before, after) ? torch::Tensor() : keep(key, after)};
  if (!same(raw, before)) raw_[key] = keep(key, raw);
}

OperandCapture::Operands OperandCapture::take() {
  Operands out;
  out.swap(pending_);
  raw_.clear();
  return out;
}

std::map<std::string, torch::Tensor> OperandCapture::take_raw() {
  std::map<std::string, torch::Tensor> out;
  out.swap(raw_);
  return out;
}

}  // namespace ufp4
