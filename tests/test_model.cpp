#include <torch/torch.h>

#include "common/error.h"
#include "models/transformer.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

std::shared_ptr<QuantContext> context(const std::string& recipe, uint64_t seed = 1) {
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = Recipe::load(recipe);
  ctx->run_seed = seed;
  return ctx;
}

int64_t numel(torch::nn::Module& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace

TEST_CASE("the paper's models are within 2% of the stated totals", "[model]") {
  CHECK(std::abs(count_params(model_config("dense-1.5b")).total / 1.5e9 - 1) < 0.02);
  CHECK(std::abs(count_params(model_config("moe-7.9b")).total / 7.9e9 - 1) < 0.02);
  CHECK(std::abs(count_params(model_config("moe-124b")).total / 124e9 - 1) < 0.02);
  CHECK(count_params(model_config("moe-7.9b")).active < count_params(model_config("moe-7.9b")).total / 4);
  for (const auto& n : model_names()) CHECK_NOTHROW(model_config(n).validate());
  CHECK_THROWS_AS(model_config("gpt5"), Error);
}

TEST_CASE("the non-embedding proxies carry their non-embedding parameter count in their names", "[model]") {
  int found = 0;
  for (const auto& name : model_names()) {
    if (name.rfind("dense-ne", 0) != 0) continue;
    ++found;
    const double stated = std::stod(name.substr(8, name.size() - 9)) * 1e6;
    const ParamCount p = count_params(model_config(name));
    INFO(name << ": " << p.non_embedding() << " non-embedding parameters");
    CHECK(std::abs(p.non_embedding() / stated - 1) < 0.05);
    CHECK(p.non_embedding() == p.total - p.embedding - p.head);
    CHECK(model_config(name).vocab == 8192);
  }
  CHECK(found >= 5);  // the Figure 9 ladder needs five sizes
}

TEST_CASE("runs of different recipes with the same seed start from the same weights; other seeds do not", "[model]") {
  auto weights = [](const std::string& recipe, uint64_t seed) {
    torch::manual_seed(seed);  // as the trainer seeds before it builds the model
    Transformer m(model_config("tiny"), context(recipe, seed));
    std::vector<torch::Tensor> w;
    for (const auto& p : m->parameters()) w.push_back(p.detach().clone());
    return w;
  };
  const auto a = weights("bf16", 3), b = weights("ufp4", 3), c = weights("bf16", 4);
  REQUIRE(a.size() == b.size());
  bool same = true, differs = false;
  for (size_t i = 0; i < a.size(); ++i) {
    same = same && torch::equal(a[i], b[i]);
    differs = differs || !torch::equal(a[i], c[i]);
  }
  CHECK(same);
  CHECK(differs);
}

TEST_CASE("parameter accounting matches the built modules", "[model]") {
  for (const char* name : {"tiny", "tiny-moe", "dense-20m", "moe-23m"}) {
    Transformer m(model_config(name), context("bf16"));
    INFO(name);
    CHECK(numel(*m) == count_params(model_config(name)).total);
  }
}

TEST_CASE("tiny dense and MoE models: forward, loss at init, backward through every recipe", "[model]") {
  for (const char* name : {"tiny", "tiny-moe"})
    for (const char* recipe : {"bf16", "e2m1_ref", "ufp4", "nvfp4_nvidia", "mxfp4"}) {
      torch::manual_seed(0);
      Transformer m(model_config(name), context(recipe));
      torch::Tensor tokens = torch::randint(0, 256, {4, 64}, torch::kInt64);
      TransformerOutput o = m->loss(tokens.slice(1, 0, 63), tokens.slice(1, 1, 64));
      INFO(name << " " << recipe);
      CHECK(std::isfinite(o.loss.item<double>()));
      CHECK(std::abs(o.lm_loss.item<double>() - std::log(256.0)) < 0.5);  // near uniform at init
      o.loss.backward();
      int64_t with_grad = 0, total = 0;
      for (const auto& p : m->parameters()) {
        ++total;
        with_grad += p.grad().defined() && torch::isfinite(p.grad()).all().item<bool>();
      }
      // Unrouted experts of a MoE may get no gradient in one batch; every dense parameter must.
      if (std::string(name) == "tiny") CHECK(with_grad == total);
      else CHECK(with_grad > total / 2);
      if (std::string(name) == "tiny-moe") CHECK(o.aux_loss.item<double>() > 0.5);
    }
}

TEST_CASE("4-bit recipes change the computation; the layer policy keeps lm_head in BF16", "[model]") {
  torch::manual_seed(0);
  torch::Tensor tokens = torch::randint(0, 256, {2, 64}, torch::kInt64);
  double loss[2];
  for (int i = 0; i < 2; ++i) {
    torch::manual_seed(1);
    Transformer m(model_config("tiny"), context(i ? "ufp4" : "bf16"));
    loss[i] = m->loss(tokens.slice(1, 0, 63), tokens.slice(1, 1, 64)).lm_loss.item<double>();
    if (i == 1) {
      CHECK(m->lm_head->layer->bf16);
      CHECK(!m->attention[0]->qkv->layer->bf16);
    }
  }
  CHECK(loss[0] != loss[1]);
  CHECK(std::abs(loss[0] - loss[1]) < 0.05);
}

TEST_CASE("a tiny model learns a fixed batch with bf16 and with ufp4", "[model]") {
  for (const char* recipe : {"bf16", "ufp4"}) {
    torch::manual_seed(3);
    auto ctx = context(recipe);
    Transformer m(model_config("tiny"), ctx);
    torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3));
    torch::Tensor tokens = torch::randint(0, 256, {8, 64}, torch::kInt64);
    double first = 0, last = 0;
    for (int step = 0; step < 30; ++step) {
      ctx->step = step;
      opt.zero_grad();
      TransformerOutput o = m->loss(tokens.slice(1, 0, 63), tokens.slice(1, 1, 64));
      o.loss.backward();
      opt.step();
      (step == 0 ? first : last) = o.lm_loss.item<double>();
    }
    INFO(recipe << ": " << first << " -> " << last);
    CHECK(last < first - 0.5);
  }
}

// The forward's one launch for every weight's operands (models/weight_operands.h) against each linear
// quantizing its own: the loss and every gradient bit for bit, dense and MoE (the expert linears' grouped
// GEMMs then read the batch's [E, K, N] DGRAD operand), with the recipes that quantize W.
TEST_CASE("one launch for every weight's operands gives the bits of each linear's own (tiny, tiny-moe)", "[model][cuda]") {
  UFP4_NEED_GPU();
  for (const char* model : {"tiny", "tiny-moe"})
    for (const char* recipe : {"ufp4", "e2m1_ref", "bf16"}) {
      INFO(model << ", " << recipe);
      torch::Tensor tokens;
      double loss[2];
      std::vector<torch::Tensor> grads[2];
      for (int batch = 0; batch < 2; ++batch) {
        auto ctx = context(recipe);
        ctx->batch_weight_operands = batch == 1;
        ctx->step = 5;
        torch::manual_seed(4);
        Transformer m(model_config(model), ctx);
        m->to(torch::kCUDA);
        m->set_compute_dtype(torch::kBFloat16);
        if (!tokens.defined()) tokens = torch::randint(0, m->config.vocab, {4, 65}, torch::kInt64).to(torch::kCUDA);
        TransformerOutput o = m->loss(tokens.slice(1, 0, 64), tokens.slice(1, 1, 65));
        o.loss.backward();
        loss[batch] = o.loss.item<double>();
        for (const auto& p : m->parameters()) grads[batch].push_back(p.grad().detach().cpu());
        CHECK(ctx->weight_operands.empty());  // held for the forward only
        // Which weights the batch covers: every quantized linear's, the experts' included (the lm_head
        // stays BF16 by the layer policy); none under bf16.
        const std::vector<WeightUse> uses = m->weight_uses();
        {
          torch::NoGradGuard ng;
          const WeightOperandScope scope(*ctx, uses);
          size_t quantized = 0;
          for (const WeightUse& u : uses) quantized += !u.layers.front()->bf16;
          CHECK(ctx->weight_operands.size() == (batch && std::string(recipe) != "bf16" ? quantized : 0));
          if (batch && std::string(recipe) != "bf16" && !m->moe.empty())
            for (const auto& layer : m->moe)
              if (layer) CHECK(prepared_weight_operands(*ctx, layer->fc1->weight) != nullptr);
        }
      }
      CHECK(loss[0] == loss[1]);
      REQUIRE(grads[0].size() == grads[1].size());
      for (size_t i = 0; i < grads[0].size(); ++i) {
        INFO("parameter " << i);
        CHECK(test::first_bit_mismatch(grads[0][i], grads[1][i]) == -1);
      }
    }
}
