#include "harness/train/stream_probe.h"

#include <cmath>
#include <utility>

#include "common/error.h"

namespace ufp4 {

namespace {

// The recipe with every GEMM's operands left as they are: no quantizer, no rotation. The layers the recipe
// keeps in BF16 are untouched in both passes.
Recipe untouched(Recipe r) {
  for (GemmRecipe& g : r.gemm) {
    g.rht = 0;
    for (OperandRecipe& o : g.op) {
      o.quantize = false;
      o.spec.rht = 0;
    }
  }
  return r;
}

// What a pass changes in the shared quantization state, put back however the pass ends.
class PassState {
 public:
  PassState(Transformer& model, std::vector<torch::Tensor>* taps)
      : model_(model), recipe_(model->ctx->recipe), telemetry_(model->ctx->telemetry), capture_(std::move(model->ctx->capture)) {
    model->ctx->telemetry = false;
    model->stream_taps = taps;
  }
  ~PassState() {
    QuantContext& ctx = *model_->ctx;
    ctx.recipe = std::move(recipe_);
    ctx.telemetry = telemetry_;
    ctx.capture = std::move(capture_);
    model_->stream_taps = nullptr;
    // A MoE layer keeps its last forward's load-balancing loss, whose graph (the router's inputs) would stay alive
    // until the next forward: the value is kept, the graph let go.
    for (auto& m : model_->moe)
      if (m && m->aux_loss.defined()) m->aux_loss = m->aux_loss.detach();
  }
  PassState(const PassState&) = delete;
  PassState& operator=(const PassState&) = delete;

 private:
  Transformer& model_;
  Recipe recipe_;
  bool telemetry_;
  std::shared_ptr<OperandCapture> capture_;
};

struct Pass {
  std::vector<torch::Tensor> values, grads;
  double loss = 0;
};

// One forward and backward of `batch`; the gradients are the LM loss's at the taps alone (autograd::grad:
// no parameter's .grad is written, no accumulation hook runs).
Pass run_pass(Transformer& model, const torch::Tensor& batch, int64_t seq_len, bool exact) {
  std::vector<torch::Tensor> taps;
  PassState state(model, &taps);
  if (exact) model->ctx->recipe = untouched(model->ctx->recipe);
  const TransformerOutput o = model->loss(batch.slice(1, 0, seq_len), batch.slice(1, 1, seq_len + 1));
  model->stream_taps = nullptr;
  Pass p;
  p.loss = o.lm_loss.item<double>();
  p.grads = torch::autograd::grad({o.lm_loss}, taps, /*grad_outputs=*/{}, /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
  for (const auto& t : taps) p.values.push_back(t.detach());
  return p;
}

// alpha = <q, e> / ||e||^2 and ||q - e|| / ||e||: products in FP32, sums in FP64.
std::pair<double, double> project(const torch::Tensor& q, const torch::Tensor& e) {
  if (!q.defined() || !e.defined()) return {NAN, NAN};
  const torch::Tensor qf = q.to(torch::kFloat32), ef = e.to(torch::kFloat32);
  const double ee = (ef * ef).sum(torch::kFloat64).item<double>();
  const double qe = (qf * ef).sum(torch::kFloat64).item<double>();
  const torch::Tensor d = qf - ef;
  const double dd = (d * d).sum(torch::kFloat64).item<double>();
  return {qe / ee, std::sqrt(dd / ee)};
}

}  // namespace

std::vector<std::string> stream_tap_names(int64_t n_layers) {
  std::vector<std::string> names = {"embedding"};
  for (int64_t i = 0; i < n_layers; ++i) names.push_back("layers." + std::to_string(i));
  names.push_back("final_norm");
  names.push_back("logits");
  return names;
}

StreamComparison compare_stream(Transformer& model, const torch::Tensor& batch, int64_t seq_len) {
  const Pass exact = run_pass(model, batch, seq_len, /*exact=*/true);
  const Pass recipe = run_pass(model, batch, seq_len, /*exact=*/false);
  const std::vector<std::string> names = stream_tap_names(model->config.n_layers);
  if (exact.values.size() != names.size() || recipe.values.size() != names.size())
    throw Error("stream probe: the model's forward gave " + std::to_string(exact.values.size()) + " and " + std::to_string(recipe.values.size()) +
                " taps for " + std::to_string(names.size()) + " points of its residual stream");
  StreamComparison c;
  c.loss_exact = exact.loss;
  c.loss_recipe = recipe.loss;
  c.tokens = batch.size(0) * seq_len;
  for (size_t i = 0; i < names.size(); ++i) {
    StreamTap t;
    t.name = names[i];
    std::tie(t.alpha_forward, t.error_forward) = project(recipe.values[i], exact.values[i]);
    std::tie(t.alpha_backward, t.error_backward) = project(recipe.grads[i], exact.grads[i]);
    c.taps.push_back(t);
  }
  return c;
}

}  // namespace ufp4
