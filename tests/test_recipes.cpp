#include <unistd.h>

#include <fstream>

#include "common/error.h"
#include "models/recipe.h"
#include "tests/catch.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  static const std::string dir = test::temp_dir();
  std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}

std::string load_error(const std::string& path) {
  try {
    Recipe::load(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Which operands of which GEMM get which grid, RHT and rounding.
void check_ops(const Recipe& r, const char* grid, int block, ScaleKind scale, std::array<int, 3> rht,
               std::array<std::array<Rounding, 2>, 3> rounding) {
  for (Gemm g : kGemms) {
    const GemmRecipe& gr = r.at(g);
    INFO(r.name << " " << gemm_key(g));
    CHECK(gr.rht == rht[static_cast<int>(g)]);
    for (int s = 0; s < 2; ++s) {
      INFO("operand " << operand_key(g, s));
      CHECK(gr.op[s].quantize);
      CHECK(gr.op[s].spec.grid.name() == grid);
      CHECK(gr.op[s].spec.block == block);
      CHECK(gr.op[s].spec.scale == scale);
      CHECK(gr.op[s].spec.rounding == rounding[static_cast<int>(g)][s]);
      CHECK(gr.op[s].spec.rht == gr.rht);
    }
  }
}

constexpr Rounding N = Rounding::kRtne, S = Rounding::kSr;

}  // namespace

TEST_CASE("preset bf16 quantizes nothing", "[recipes]") {
  Recipe r = Recipe::load("bf16");
  CHECK(!r.quantizes_anything());
  for (Gemm g : kGemms) CHECK(r.at(g).rht == 0);
}

TEST_CASE("preset e2m1_ref: E2M1 1x16 FP32, RHT on WGRAD, SR on dY", "[recipes]") {
  Recipe r = Recipe::load("e2m1_ref");
  check_ops(r, "e2m1", 16, ScaleKind::kFp32, {0, 0, 16}, {{{N, N}, {S, N}, {S, N}}});
  for (Gemm g : kGemms)
    for (int s = 0; s < 2; ++s) CHECK(!r.at(g).op[s].spec.block_2d);
  CHECK(r.layer_is_bf16("embedding", -1, 0));
  CHECK(r.layer_is_bf16("lm_head", -1, 0));
  CHECK(r.layer_is_bf16("layers.3.mlp.router", 3, 12));
  CHECK(!r.layer_is_bf16("layers.3.mlp.linear_fc1", 3, 12));
}

TEST_CASE("preset ufp4: E1M2, RHT on all three GEMMs, SR on dY", "[recipes]") {
  check_ops(Recipe::load("ufp4"), "e1m2", 16, ScaleKind::kFp32, {16, 16, 16}, {{{N, N}, {S, N}, {S, N}}});
  check_ops(Recipe::load("ufp4_int4"), "int4", 16, ScaleKind::kFp32, {16, 16, 16}, {{{N, N}, {S, N}, {S, N}}});
}

TEST_CASE("preset nvfp4_nvidia: two-level scales, 2D weights, RHT on WGRAD, SR on gradients, BF16 ends", "[recipes]") {
  Recipe r = Recipe::load("nvfp4_nvidia");
  check_ops(r, "e2m1", 16, ScaleKind::kNvfp4, {0, 0, 16}, {{{N, N}, {S, N}, {S, N}}});
  CHECK(r.at(Gemm::kFprop).op[1].spec.block_2d);   // W in FPROP
  CHECK(r.at(Gemm::kDgrad).op[1].spec.block_2d);   // W in DGRAD
  CHECK(!r.at(Gemm::kFprop).op[0].spec.block_2d);  // X
  CHECK(!r.at(Gemm::kWgrad).op[1].spec.block_2d);  // X in WGRAD
  CHECK(r.layer_is_bf16("layers.1.mlp.linear_fc1", 1, 62));
  CHECK(!r.layer_is_bf16("layers.2.mlp.linear_fc1", 2, 62));
  CHECK(!r.layer_is_bf16("layers.53.mlp.linear_fc1", 53, 62));
  CHECK(r.layer_is_bf16("layers.54.mlp.linear_fc1", 54, 62));
}

TEST_CASE("preset mxfp4: 1x32 E8M0, RTNE, no RHT", "[recipes]") {
  check_ops(Recipe::load("mxfp4"), "e2m1", 32, ScaleKind::kMx, {0, 0, 0}, {{{N, N}, {N, N}, {N, N}}});
}

TEST_CASE("Table 1 from the e2m1_ref and ufp4 presets", "[recipes]") {
  std::string t = Recipe::table1({Recipe::load("e2m1_ref"), Recipe::load("ufp4")});
  CHECK(t.find("| grid | E2M1 (max 6) | E1M2 (uniform) |") != std::string::npos);
  CHECK(t.find("| quant block | 1x16 | 1x16 |") != std::string::npos);
  CHECK(t.find("| scales | FP32 single-level | FP32 single-level |") != std::string::npos);
  CHECK(t.find("| RHT scope | bwd_dw | fwd_y, bwd_dx, bwd_dw |") != std::string::npos);
  CHECK(t.find("| RHT size | 16 | 16 |") != std::string::npos);
  CHECK(t.find("| SR scope | dY | dY |") != std::string::npos);
  CHECK(t.find("| 2D weight scaling | no | no |") != std::string::npos);
}

TEST_CASE("extends with field-level overrides expresses the paper's ablations", "[recipes]") {
  // RHT scope subset, RHT size, SR scope over X_fprop / W_dgrad, 2D weights, max_fpx.
  std::string p = write_temp("abl.toml", R"(
name = "abl"
extends = "e2m1_ref"
[defaults]
max_fpx = 4
[fprop]
x = { rounding = "sr" }
w = { block_2d = true }
[dgrad]
w = { rounding = "sr" }
[wgrad]
rht = 32
)");
  Recipe r = Recipe::load(p);
  CHECK(r.name == "abl");
  CHECK(r.at(Gemm::kWgrad).rht == 32);
  CHECK(r.at(Gemm::kFprop).rht == 0);  // inherited
  CHECK(r.at(Gemm::kFprop).op[1].spec.block_2d);
  CHECK(r.at(Gemm::kFprop).op[0].spec.rounding == Rounding::kSr);
  CHECK(r.at(Gemm::kFprop).op[0].spec.grid.name() == "e2m1_max4");
  CHECK(r.at(Gemm::kDgrad).op[1].spec.rounding == Rounding::kSr);
  CHECK(r.at(Gemm::kDgrad).op[0].spec.rounding == Rounding::kSr);  // dY keeps the parent's SR
  CHECK(r.at(Gemm::kWgrad).op[1].spec.rounding == Rounding::kRtne);
  CHECK(Recipe::table1({r}).find("| SR scope | dY, X_fprop, W_dgrad |") != std::string::npos);
}

TEST_CASE("bad recipes: one line with file:line, key and the allowed values", "[recipes]") {
  std::string e = load_error(write_temp("k.toml", "name = \"k\"\n[fprop]\nrht = 16\nz = {}\n"));
  CHECK(e.find("k.toml:4: fprop.z: unknown key (allowed: rht, w, x)") != std::string::npos);
  e = load_error(write_temp("r.toml", "name = \"r\"\n[wgrad]\nrht = 24\n"));
  CHECK(e.find("r.toml:3: wgrad.rht: 24 (allowed: 0, 16, 32, 64, 128)") != std::string::npos);
  e = load_error(write_temp("t.toml", "[defaults]\nblock = \"16\"\n"));
  CHECK(e.find("t.toml:2: defaults.block: expected an integer") != std::string::npos);
  e = load_error(write_temp("g.toml", "[defaults]\nquantize = true\ngrid = \"fp5\"\n"));
  CHECK(e.find("g.toml:3: defaults.grid: unknown name 'fp5' (allowed: e2m1, e1m2, int4, int4_tc") != std::string::npos);
  e = load_error(write_temp("s.toml", "rht_signs = \"sometimes\"\n"));
  CHECK(e.find("s.toml:1: rht_signs: 'sometimes' (allowed: shared, per_layer, per_step)") != std::string::npos);
  e = load_error(write_temp("c1.toml", "extends = \"c2.toml\"\n"));
  write_temp("c2.toml", "extends = \"c1.toml\"\n");
  e = load_error(write_temp("c1.toml", "extends = \"c2.toml\"\n"));
  CHECK(e.find("cycle") != std::string::npos);
  e = load_error(write_temp("x.toml", "extends = \"ufp4\"\n[fprop]\nw = { block_2d = true }\n"));
  CHECK(e.find("x.toml:3: fprop.w.block_2d: 2D weight tiles cannot be combined with rht") != std::string::npos);
  e = load_error("no_such_recipe");
  CHECK(e.find("unknown recipe 'no_such_recipe' (allowed: bf16, e2m1_ref, ufp4") != std::string::npos);
  e = load_error(write_temp("p.toml", "name = \n"));
  CHECK(e.find("p.toml:1:") != std::string::npos);
}
