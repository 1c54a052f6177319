#include "models/grouped_linear.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "kernels/moe/padded_segments.h"
#include "models/quant_ops.h"
#include "models/weight_operands.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define UFP4_GROUPED_MM 1
#endif

namespace ufp4 {

namespace {

// The segment starts on the device: 0, ends[0], ..., ends[E - 2].
torch::Tensor segment_starts(const torch::Tensor& ends) {
  return torch::cat({torch::zeros({1}, ends.options()), ends.slice(0, 0, ends.size(0) - 1)});
}

torch::Tensor grouped_mm(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& ends) {
#ifdef UFP4_GROUPED_MM
  return at::_grouped_mm(a, b, ends);
#else
  (void)a, (void)b, (void)ends;
  throw Error("grouped GEMM: this LibTorch has no _grouped_mm");
#endif
}

// Each expert's weight rows in the [E * N, K] view of the stacked weight: ends N, 2N, ..., EN.
torch::Tensor weight_ends(int64_t E, int64_t N, torch::Device device) {
  return torch::arange(1, E + 1, torch::TensorOptions().dtype(torch::kInt32).device(device)) * static_cast<int32_t>(N);
}

// The stacked weight w [E, N, K] as operand 1 of GEMM g for every expert, [E, N, K]: w itself where the
// recipe leaves it (no segment ends to form), else one segmented quantization of its [E * N, K] view.
torch::Tensor grouped_weight_operand(const GroupedLinearImpl& m, const torch::Tensor& w, Gemm g, int64_t step, bool columnwise) {
  const int64_t E = w.size(0), N = w.size(1), K = w.size(2);
  const LayerQuant& L = *m.layers[0];
  if (L.bf16 || !L.ctx->recipe.at(g).op[1].quantize) return w;
  return m.grouped_operand(w.view({E * N, K}), g, 1, step, columnwise, weight_ends(E, N, w.device()), torch::Tensor()).view({E, N, K});
}

// The experts of r with no rows: route()'s, else (a routing made by hand) from its segment ends.
torch::Tensor idle_experts(const Routing& r) { return r.idle.defined() ? r.idle : (r.ends - segment_starts(r.ends)) == 0; }

// The kept rows of r, or the 0-element placeholder of a dropless routing (autograd needs defined inputs).
torch::Tensor kept_or_empty(const Routing& r) {
  return r.kept.defined() ? r.kept : torch::empty({0}, r.ends.options().dtype(torch::kBool));
}

struct GroupedLinearFunction : public torch::autograd::Function<GroupedLinearFunction> {
  // kept: [A] bool rows of kept assignments, or a 0-element placeholder when dropless.
  // gather: [A] int64 when the rows are x's rows gather[0], ... read in place (forward_gathered: the
  // backward then returns x's gradient, through inverse and k), else a 0-element placeholder.
  // idle: [E] bool, the experts with no rows (their segments of ends are empty).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& ends,
                               const torch::Tensor& kept, const torch::Tensor& idle, const torch::Tensor& host_ends, const torch::Tensor& gather,
                               const torch::Tensor& inverse, int64_t module_ptr, int64_t k, bool fused_dispatch) {
    const auto& m = *reinterpret_cast<const GroupedLinearImpl*>(module_ptr);
    const int64_t step = m.layers[0]->ctx->step;
    const bool grouped_fprop = m.runs_grouped(x, Gemm::kFprop), grouped_dgrad = m.runs_grouped(x, Gemm::kDgrad),
               grouped_wgrad = m.runs_grouped(x, Gemm::kWgrad);
    // X's WGRAD operand quantized now, from the read that quantizes its FPROP operand (the segmented pair
    // kernel); then x itself is needed later only if DGRAD runs expert by expert (zeros_like(x)).
    const bool pair = grouped_fprop && grouped_wgrad && !gemm_untouched(*m.layers[0], Gemm::kWgrad) &&
                      m.pairs_operands(x, Gemm::kFprop, 0, Gemm::kWgrad, 1, step);
    const bool gathered = gather.numel() > 0;
    if (gathered && !(pair && grouped_dgrad)) throw Error("grouped linear " + m.layers[0]->name + ": a gathered input needs reads_gathered()");
    ctx->save_for_backward({pair && grouped_dgrad ? torch::Tensor() : x, w});
    ctx->saved_data["rows"] = gathered ? gather.size(0) : x.size(0);
    if (gathered) {
      ctx->saved_data["inverse"] = inverse;
      ctx->saved_data["k"] = k;
      ctx->saved_data["fused_dispatch"] = fused_dispatch;
    }
    ctx->saved_data["ends"] = ends;
    ctx->saved_data["kept"] = kept;
    ctx->saved_data["idle"] = idle;
    ctx->saved_data["host_ends"] = host_ends;
    ctx->saved_data["module"] = module_ptr;
    ctx->saved_data["step"] = step;
    // Decided now for the backward too: the recipe and the capture steps are those of this step.
    ctx->saved_data["grouped_dgrad"] = grouped_dgrad;
    ctx->saved_data["grouped_wgrad"] = grouped_wgrad;
    const int64_t N = w.size(1);
    if (grouped_fprop) {
      torch::Tensor xq;
      if (pair) {
        const GroupedRows rows = m.wgrad_rows(ends, ctx->saved_data["rows"].toInt());
        auto q = m.grouped_operand_pair(x, Gemm::kFprop, 0, Gemm::kWgrad, 1, step, ends, rows, gathered ? gather : torch::Tensor());
        xq = q.first;
        ctx->saved_data["x_wgrad"] = q.second;
      } else {
        xq = m.grouped_operand(x, Gemm::kFprop, 0, step, false, ends, torch::Tensor());
      }
      // W's operands: this forward's batch (models/weight_operands.h; DGRAD's kept for the backward), or made here.
      WeightOperands pre = grouped_dgrad ? take_weight_operands(*m.layers[0]->ctx, w) : WeightOperands{};
      if (pre.col.defined() && x.requires_grad()) ctx->saved_data["w_dgrad"] = pre.col;
      torch::Tensor wq = pre.row.defined() ? pre.row : grouped_weight_operand(m, w, Gemm::kFprop, step, false);
      torch::Tensor y = grouped_mm(xq.to(x.scalar_type()), wq.to(x.scalar_type()).transpose(1, 2), ends);
      if (kept.numel()) y.masked_fill_(kept.logical_not().unsqueeze(1), 0);  // rows past the last end are not written
      return y;
    }
    torch::Tensor y = torch::zeros({x.size(0), N}, x.options());
    const int64_t* end = host_ends.data_ptr<int64_t>();
    for (int64_t e = 0, s = 0; e < w.size(0); s = end[e++])
      if (end[e] > s) y.narrow(0, s, end[e] - s).copy_(quant_fprop(x.narrow(0, s, end[e] - s), w[e], torch::Tensor(), *m.layers[e], step));
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    const auto& m = *reinterpret_cast<const GroupedLinearImpl*>(ctx->saved_data["module"].toInt());
    const int64_t step = ctx->saved_data["step"].toInt();
    auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &w = saved[1];
    const torch::Tensor ends = ctx->saved_data["ends"].toTensor(), kept = ctx->saved_data["kept"].toTensor();
    // An empty gradient may come with any strides (sum()'s is expanded: strides 0), which contiguous()
    // keeps and the grouped GEMM refuses: a fresh one then.
    torch::Tensor dy = grads[0].numel() ? grads[0].contiguous() : torch::empty(grads[0].sizes(), grads[0].options());
    const int64_t E = w.size(0);
    torch::Tensor dx, dw;
    const bool want_dx = ctx->needs_input_grad(0), want_dw = ctx->needs_input_grad(1);
    const bool grouped_dgrad = ctx->saved_data["grouped_dgrad"].toBool(), grouped_wgrad = ctx->saved_data["grouped_wgrad"].toBool();
    const int64_t rows_in = ctx->saved_data["rows"].toInt();
    // dY's DGRAD and WGRAD operands from one read (the segmented pair kernel) when both GEMMs run grouped.
    torch::Tensor dy_wgrad;
    GroupedRows wrows_dy;
    const bool dy_pair = want_dx && want_dw && grouped_dgrad && grouped_wgrad && !gemm_untouched(*m.layers[0], Gemm::kWgrad) &&
                         m.pairs_operands(dy, Gemm::kDgrad, 0, Gemm::kWgrad, 0, step);
    if (want_dx && grouped_dgrad) {
      torch::Tensor a;
      if (dy_pair) {
        wrows_dy = m.wgrad_rows(ends, rows_in);
        std::tie(a, dy_wgrad) = m.grouped_operand_pair(dy, Gemm::kDgrad, 0, Gemm::kWgrad, 0, step, ends, wrows_dy);
      } else {
        a = m.grouped_operand(dy, Gemm::kDgrad, 0, step, false, ends, torch::Tensor());
      }
      // The batch's columnwise operand is [E, K, N] (each expert's matrix transposed): the same values.
      torch::Tensor b = ctx->saved_data.count("w_dgrad") ? ctx->saved_data["w_dgrad"].toTensor().transpose(1, 2)
                                                         : grouped_weight_operand(m, w, Gemm::kDgrad, step, true);
      dx = grouped_mm(a.to(dy.scalar_type()), b.to(dy.scalar_type()), ends);
      if (kept.numel()) dx.masked_fill_(kept.logical_not().unsqueeze(1), 0);
    }
    if (want_dw && grouped_wgrad) {
      if (gemm_untouched(*m.layers[0], Gemm::kWgrad)) {
        dw = grouped_mm(dy.t(), x, ends).to(w.scalar_type());
      } else {
        // Blocks and RHT segments run along tokens inside each expert's rows: each expert's rows start
        // on a whole group in a padded copy (wgrad_rows; x_wgrad, when the forward made it, is in this
        // layout: the same function of the same ends).
        const GroupedRows rows = dy_pair ? wrows_dy : m.wgrad_rows(ends, rows_in);
        torch::Tensor a = dy_pair ? dy_wgrad : m.grouped_operand(dy, Gemm::kWgrad, 0, step, true, rows.ends, rows.lens, rows.src);
        torch::Tensor b = ctx->saved_data.count("x_wgrad") ? ctx->saved_data["x_wgrad"].toTensor()
                                                            : m.grouped_operand(x, Gemm::kWgrad, 1, step, true, rows.ends, rows.lens, rows.src);
        dw = grouped_mm(a.to(dy.scalar_type()).t(), b.to(dy.scalar_type()), rows.ends).to(w.scalar_type());
      }
      // An expert without rows has no GEMM to write its slice: its gradient is 0.
      dw.masked_fill_(ctx->saved_data["idle"].toTensor().view({E, 1, 1}), 0);
    }
    const bool loop_dx = want_dx && !dx.defined(), loop_dw = want_dw && !dw.defined();
    if (loop_dx || loop_dw) {
      const torch::Tensor host_ends = ctx->saved_data["host_ends"].toTensor();
      const int64_t* end = host_ends.data_ptr<int64_t>();
      if (loop_dx) dx = torch::zeros_like(x);
      if (loop_dw) dw = torch::zeros_like(w);
      for (int64_t e = 0, s = 0; e < E; s = end[e++]) {
        if (end[e] == s) continue;
        const torch::Tensor dy_e = dy.narrow(0, s, end[e] - s);
        if (loop_dx) dx.narrow(0, s, end[e] - s).copy_(quant_dgrad(dy_e, w[e], *m.layers[e], step));
        if (loop_dw) dw[e].copy_(quant_wgrad(dy_e, x.narrow(0, s, end[e] - s), *m.layers[e], step));
      }
    }
    // Rows read in place from a gather: x's gradient sums each token's rows (the dispatch's backward).
    if (dx.defined() && ctx->saved_data.count("inverse"))
      dx = dispatch_backward(dx, ctx->saved_data["inverse"].toTensor(), ctx->saved_data["k"].toInt(), ctx->saved_data["fused_dispatch"].toBool());
    // One gradient an input of forward (11): x's and w's, none for the routing's tensors and the flags.
    return {dx, dw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

bool grouped_mm_available() {
#ifdef UFP4_GROUPED_MM
  return true;
#else
  return false;
#endif
}

GroupedLinearImpl::GroupedLinearImpl(int64_t experts, int64_t in_features, int64_t out_features, const std::string& prefix,
                                     const std::string& linear, const std::shared_ptr<QuantContext>& ctx, int64_t first_layer_id,
                                     int64_t id_stride, int layer_index, int n_layers, int64_t first_expert) {
  weight = register_parameter("weight", torch::empty({experts, out_features, in_features}));
  for (int64_t e = 0; e < experts; ++e) {
    auto L = std::make_shared<LayerQuant>();
    L->name = prefix + ".experts." + std::to_string(first_expert + e) + "." + linear;
    L->layer_id = first_layer_id + (first_expert + e) * id_stride;
    L->ctx = ctx;
    L->bf16 = ctx->recipe.layer_is_bf16(L->name, layer_index, n_layers);
    layers.push_back(std::move(L));
  }
}

void GroupedLinearImpl::init_expert(int64_t e) {
  torch::NoGradGuard ng;
  torch::Tensor slice = weight[e];
  torch::nn::init::kaiming_uniform_(slice, std::sqrt(5.0));
}

bool GroupedLinearImpl::weight_gemms_run_grouped() const {
  if (!weight.is_cuda()) return false;
  // runs_grouped() asks of the activations only that they be BF16 on the GPU: an empty probe answers for them.
  const torch::Tensor probe = torch::empty({0, weight.size(2)}, weight.options().dtype(torch::kBFloat16));
  return runs_grouped(probe, Gemm::kFprop) && runs_grouped(probe, Gemm::kDgrad);
}

bool GroupedLinearImpl::runs_grouped(const torch::Tensor& x, Gemm g) const {
  if (!allow_grouped || !grouped_mm_available() || !x.is_cuda() || x.scalar_type() != torch::kBFloat16) return false;
  // Grouped GEMMs need 16-byte rows: K and N multiples of 8 BF16 values.
  const int64_t N = weight.size(1);
  if (N % 8 || weight.size(2) % 8) return false;
  const QuantContext& ctx = *layers[0]->ctx;
  for (const auto& L : layers) {
    if (L->bf16 != layers[0]->bf16) return false;  // the layer policy treats experts alike, or they run one by one
    if (ctx.capture && ctx.capture->wants(ctx.step, L->name)) return false;
  }
  if (gemm_untouched(*layers[0], g)) return true;
  // Quantized operands in one segmented quantization per operand. Telemetry's alpha is per expert, and
  // grouped GEMMs take BF16 operands only: those steps and recipes run expert by expert.
  if (ctx.telemetry || ctx.recipe.gemm_precision == "fp32") return false;
  const GemmRecipe& r = ctx.recipe.at(g);
  for (const OperandRecipe& o : r.op)
    if (r.rht && !o.quantize) return false;  // rotated but not quantized: no segmented form
  // The weight's experts are segments of its [E * N, K] view: 16x16 tiles and, along N (DGRAD),
  // blocks and RHT segments must not cross experts.
  const OperandRecipe& w = r.op[1];
  if (g == Gemm::kFprop && w.quantize && w.spec.block_2d && N % 16) return false;
  if (g == Gemm::kDgrad && w.quantize && N % std::max({16, r.rht, w.spec.block})) return false;
  return true;
}

SegmentKeys GroupedLinearImpl::expert_keys(Gemm g, int slot, int64_t step) const {
  SegmentKeys k;
  for (const auto& L : layers) {
    const QuantSpec s = operand_spec(*L, g, slot, step);
    k.seeds.push_back(s.seed);
    k.rht_seeds.push_back(s.rht_seed);
  }
  return k;
}

torch::Tensor GroupedLinearImpl::grouped_operand(const torch::Tensor& t, Gemm g, int slot, int64_t step, bool columnwise,
                                                 const torch::Tensor& ends, const torch::Tensor& lens, const torch::Tensor& src) const {
  const LayerQuant& L = *layers[0];
  if (L.bf16 || !L.ctx->recipe.at(g).op[slot].quantize) return src.defined() ? gather_rows(t, src) : t;
  // The per-expert path's dequantized dtype: BF16 into the GPU's GEMMs, FP32 on CPU or when the recipe asks.
  const bool fp32 = !t.is_cuda() || L.ctx->recipe.gemm_precision == "fp32";
  const auto k = operand_keys(g, slot, step, t.device());
  return quantize_segments(t, k.first, k.second, ends, lens, columnwise, fp32 ? torch::kFloat32 : torch::kBFloat16, src);
}

std::pair<QuantSpec, torch::Tensor> GroupedLinearImpl::operand_keys(Gemm g, int slot, int64_t step, torch::Device device) const {
  const QuantSpec spec = operand_spec(*layers[0], g, slot, step);
  // The experts' keys follow from expert 0's (the same run seed, recipe and step, fixed layer ids): the
  // device table is rebuilt only when those change (every step with per-step RHT signs).
  KeyTable& k = key_tables_[static_cast<int>(g) * 2 + slot];
  if (!k.table.defined() || k.seed != spec.seed || k.rht_seed != spec.rht_seed || k.table.device() != device)
    k = {spec.seed, spec.rht_seed, segment_key_table(expert_keys(g, slot, step), device)};
  return {spec, k.table};
}

bool GroupedLinearImpl::pairs_operands(const torch::Tensor& t, Gemm row_g, int row_slot, Gemm col_g, int col_slot, int64_t step) const {
  const LayerQuant& L = *layers[0];
  if (L.bf16 || !L.ctx->recipe.at(row_g).op[row_slot].quantize || !L.ctx->recipe.at(col_g).op[col_slot].quantize) return false;
  if (L.ctx->recipe.gemm_precision == "fp32") return false;
  return quantize_segments_pair_fused(t, operand_spec(L, row_g, row_slot, step), operand_spec(L, col_g, col_slot, step), weight.size(0));
}

std::pair<torch::Tensor, torch::Tensor> GroupedLinearImpl::grouped_operand_pair(const torch::Tensor& t, Gemm row_g, int row_slot, Gemm col_g,
                                                                                int col_slot, int64_t step, const torch::Tensor& ends,
                                                                                const GroupedRows& rows, const torch::Tensor& gather) const {
  const auto r = operand_keys(row_g, row_slot, step, t.device());
  const auto c = operand_keys(col_g, col_slot, step, t.device());
  return quantize_segments_pair(t, r.first, r.second, ends, c.first, c.second, rows.ends, rows.lens, rows.src, gather);
}

GroupedRows GroupedLinearImpl::wgrad_rows(const torch::Tensor& ends, int64_t rows) const {
  const GemmRecipe& r = layers[0]->ctx->recipe.at(Gemm::kWgrad);
  const bool touched = !layers[0]->bf16;
  const int rht = touched ? r.rht : 0;
  int64_t align = std::max(16, rht);
  for (const OperandRecipe& o : r.op)
    if (touched && o.quantize) align = std::max<int64_t>(align, o.spec.block);
  WgradRowsCache& cache = *wgrad_rows_cache;
  if (cache.ends.defined() && cache.ends.unsafeGetTensorImpl() == ends.unsafeGetTensorImpl() && cache.rows == rows && cache.align == align &&
      cache.rht == rht)
    return cache.value;
  cache = {ends, rows, align, rht, padded_segment_rows(ends, rows, align, rht)};
  return cache.value;
}

GroupedRows padded_segment_rows(const torch::Tensor& ends, int64_t rows, int64_t align, int64_t rht) {
  const int64_t E = ends.size(0);
  GroupedRows out;
  // A bound on the padded rows that needs no look at the counts: each expert adds at most align - 1.
  out.rows = rows + E * (align - 1);
#ifdef UFP4_WITH_CUDA
  // One launch (kernels/moe/padded_segments.h) where the composition below takes about twenty small ones.
  if (ends.is_cuda() && ends.scalar_type() == torch::kInt32 && ends.is_contiguous() && E >= 1 && E <= kPaddedSegmentsMaxExperts) {
    const auto i32 = ends.options().dtype(torch::kInt32);
    out.lens = torch::empty({E}, i32);
    out.ends = torch::empty({E}, i32);
    out.src = torch::empty({out.rows}, ends.options().dtype(torch::kInt64));
    PaddedSegmentsIO io;
    io.experts = E, io.rows = out.rows, io.align = align, io.rht = rht;
    io.ends = ends.data_ptr<int32_t>();
    io.lens = out.lens.data_ptr<int32_t>(), io.padded_ends = out.ends.data_ptr<int32_t>(), io.src = out.src.data_ptr<int64_t>();
    cuda_padded_segments(io, at::cuda::getCurrentCUDAStream(ends.device().index()).stream());
    return out;
  }
#endif
  const torch::Tensor starts = segment_starts(ends), counts = ends - starts;
  out.lens = rht ? (counts + (rht - 1)).div(rht, "floor").mul(rht).to(torch::kInt32) : counts;
  const torch::Tensor padded = (counts + (align - 1)).div(align, "floor").mul(align).to(torch::kInt64);
  const torch::Tensor pends = torch::cumsum(padded, 0), pstarts = pends - padded;
  out.ends = pends.to(torch::kInt32);
  // Padded row p of expert e's segment holds source row p + starts[e] - pstarts[e] while p < pstarts[e]
  // + counts[e]; the rows past the last segment fall to expert E - 1 and past that bound too.
  const torch::Tensor at = torch::arange(out.rows, ends.options().dtype(torch::kInt64));
  const torch::Tensor g = torch::searchsorted(pends, at, /*out_int32=*/false, /*right=*/true).clamp_max(E - 1);
  const torch::Tensor shift = starts.to(torch::kInt64) - pstarts, valid_end = pstarts + counts.to(torch::kInt64);
  out.src = torch::where(at < valid_end.index_select(0, g), at + shift.index_select(0, g), torch::full_like(at, -1));
  return out;
}

torch::Tensor GroupedLinearImpl::forward(const torch::Tensor& x, const Routing& r) {
  if (x.dim() != 2 || x.size(1) != weight.size(2))
    throw Error("grouped linear " + layers[0]->name + ": input must be [rows, " + std::to_string(weight.size(2)) + "]");
  bool loop = false;
  for (Gemm g : kGemms) loop = loop || !runs_grouped(x, g);
  // 0-element placeholders where there is nothing to pass (autograd needs defined inputs).
  const torch::Tensor none = torch::empty({0}, r.ends.options().dtype(torch::kInt64));
  return GroupedLinearFunction::apply(x, weight, r.ends, kept_or_empty(r), idle_experts(r), loop ? r.host_ends() : torch::empty({0}, torch::kInt64), none,
                                      none, reinterpret_cast<int64_t>(this), r.top_k, false);
}

bool GroupedLinearImpl::reads_gathered(const torch::Tensor& x) const {
  if (!allow_gathered || x.dim() != 2 || x.size(1) != weight.size(2) || !x.is_contiguous()) return false;
  for (Gemm g : kGemms)
    if (!runs_grouped(x, g)) return false;
  return !gemm_untouched(*layers[0], Gemm::kWgrad) && pairs_operands(x, Gemm::kFprop, 0, Gemm::kWgrad, 1, layers[0]->ctx->step);
}

torch::Tensor GroupedLinearImpl::forward_gathered(const torch::Tensor& x, const Routing& r, const torch::Tensor& gather, bool fused_dispatch) {
  if (!reads_gathered(x)) throw Error("grouped linear " + layers[0]->name + ": forward_gathered() needs reads_gathered()");
  return GroupedLinearFunction::apply(x, weight, r.ends, kept_or_empty(r), idle_experts(r), torch::empty({0}, torch::kInt64), gather, r.inverse,
                                      reinterpret_cast<int64_t>(this), r.top_k, fused_dispatch);
}

}  // namespace ufp4
