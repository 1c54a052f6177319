// The CLI as a user meets it: help, exit codes, one-line errors, quantize round trips, check, bench.
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/toml_util.h"
#include "harness/io/array_io.h"
#include "harness/io/bench_files.h"
#include "harness/io/run_results.h"
#include "harness/plan/device_peaks.h"
#include "harness/plan/moe_layer_speed.h"
#include "harness/report/report.h"
#include <hdf5.h>
#include "models/quant_ops.h"
#include "harness/report/report_registry.h"
#include "tests/catch.h"
#include "tests/tensor_helpers.h"
#include "tests/helpers.h"

using namespace ufp4;

namespace {

using Result = test::CliResult;
using test::run_cli;
using test::temp_dir;

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

bool exists(const std::string& p) { return access(p.c_str(), F_OK) == 0; }

}  // namespace

TEST_CASE("ufp4 --help lists the subcommands; --version names the commit", "[cli]") {
  // The binary itself for these two (main() wiring); in-process for the rest, as everywhere.
  Result r = test::run_binary("--help");
  CHECK(r.code == 0);
  for (const char* c : {"run", "plan", "report", "check", "bench", "analyze", "quantize", "recipes", "fit", "data"})
    CHECK(r.out.find(std::string("  ") + c + " ") != std::string::npos);
  Result v = test::run_binary("--version");
  CHECK(v.code == 0);
  CHECK(v.out.find("commit") != std::string::npos);
  for (const char* c : {"run", "plan", "report", "check", "bench", "analyze", "quantize", "recipes", "fit", "data"}) {
    Result h = run_cli(std::string(c) + " --help");
    INFO(c << ": " << h.out);
    CHECK(h.code == 0);
    CHECK(h.out.find("usage: ufp4") != std::string::npos);
  }
}

TEST_CASE("bad usage exits 2 with one line naming what is wrong", "[cli]") {
  Result r = test::run_binary("frobnicate");  // through main(), as a user meets it
  CHECK(r.code == 2);
  CHECK(lines(r.out) == 1);
  CHECK(r.out.find("unknown command 'frobnicate'") != std::string::npos);
  CHECK(r.out.find("allowed:") != std::string::npos);

  Result g = run_cli("quantize --in x.npy --out y.npy --grid fp5");
  CHECK(g.code == 2);
  CHECK(lines(g.out) == 1);
  CHECK(g.out.find("allowed: e2m1, e1m2, int4, int4_tc") != std::string::npos);

  Result b = run_cli("quantize --in x.npy --out y.npy --block 24");
  CHECK(b.code == 2);
  CHECK(b.out.find("block: 24") != std::string::npos);

  Result m = run_cli("quantize --in /nonexistent/x.npy --out y.npy");
  CHECK(m.code == 2);
  CHECK(lines(m.out) == 1);
  CHECK(m.out.find("/nonexistent/x.npy") != std::string::npos);

  Result p = run_cli("bench sideways");
  CHECK(p.code == 2);
  CHECK(lines(p.out) == 1);
  CHECK(p.out.find("allowed: kernels, step, all") != std::string::npos);

  // A peer that does not exist: refused before anything is timed.
  Result q = run_cli("bench step --models tiny --device cpu --reference eager,sideways --out-dir /nonexistent");
  CHECK(q.code == 2);
  CHECK(lines(q.out) == 1);
  CHECK(q.out.find("allowed: a comma list of fakequant, eager, compiled, deterministic; or none") != std::string::npos);

  Result n = run_cli("run /nonexistent/m.toml");
  CHECK(n.code == 2);
  CHECK(lines(n.out) == 1);
  CHECK(n.out.find("/nonexistent/m.toml") != std::string::npos);

  Result pl = run_cli("plan --model gpt5");
  CHECK(pl.code == 2);
  CHECK(pl.out.find("allowed: dense-1.5b, moe-7.9b, moe-124b") != std::string::npos);
}

TEST_CASE("ufp4 plan --model MOE --gpus N: every expert-parallel layout of the ranks and experts, EP 1 as data parallelism, the smallest EP that fits", "[cli]") {
  Result r = run_cli("plan --model moe-7.9b --gpus 4");
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::istringstream in(r.out);
  std::map<int, double> gb;  // EP -> GB a GPU
  double zero1 = 0;
  for (std::string line; std::getline(in, line);) {
    if (const size_t at = line.find(" GB with ZeRO-1"); at != std::string::npos) zero1 = std::stod(line.substr(line.rfind(' ', at - 1) + 1));
    std::istringstream row(line);
    int ep = 0, dp = 0;
    long long experts = 0;
    double g = 0;
    if (row >> ep >> dp >> experts >> g && ep * dp == 4) gb[ep] = g;
  }
  CHECK(gb.size() == 3);  // EP 1, 2, 4: the divisors of 4 that divide 64 experts
  CHECK(gb[1] == Approx(zero1).margin(0.005));  // EP 1 is data parallelism with ZeRO-1
  CHECK(gb[4] < gb[2]);
  CHECK(gb[2] < gb[1]);
  const std::string pick = gb[2] <= 80 && gb[1] > 80 ? "layout: EP 2 x DP 2 (the least all-to-all that fits 80 GB)" : "?";
  CHECK(r.out.find(pick) != std::string::npos);
  Result big = run_cli("plan --model moe-124b --gpus 8");
  CHECK(big.out.find("layout: none fits 141 GB on 8 GPUs") != std::string::npos);
}

TEST_CASE("ufp4 plan --model MOE --gpus N: a 4-bit recipe's weight operands, 2 B a quantized weight of the rank, and its own layout", "[cli]") {
  Result r = run_cli("plan --model moe-7.9b --gpus 4 --seq 4096");
  INFO(r.out);
  REQUIRE(r.code == 0);
  std::istringstream in(r.out);
  std::map<int, double> extra;  // EP -> 4-bit GB a GPU - GB a GPU
  double quantized_b = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    std::string name, unit;
    double total = 0, active = 0;
    if (line.rfind("moe-7.9b ", 0) == 0 && row >> name >> total >> unit >> active >> unit >> quantized_b) continue;
    int ep = 0, dp = 0;
    long long experts = 0;
    double g = 0, a2a = 0, four_bit = 0;
    std::string gb, fits80, slash, fits141;
    if (row.clear(), row.seekg(0), row >> ep >> dp >> experts >> g >> a2a >> gb >> fits80 >> slash >> fits141 >> four_bit && ep * dp == 4)
      extra[ep] = four_bit - g;
  }
  REQUIRE(extra.size() == 3);
  // EP 1: every quantized weight on each rank (the table's "quantized" column, in billions), 2 B each.
  CHECK(extra[1] == Approx(2.0 * quantized_b).margin(0.02));
  // The routed experts split EP ways: 17 MoE layers x 64 experts x 3 x 2048 x 1024 weights, 2 B each.
  const double experts_gb = 2.0 * 17 * 64 * 3 * 2048.0 * 1024 / 1e9;
  CHECK(extra[1] - extra[2] == Approx(experts_gb / 2).margin(0.02));
  CHECK(extra[1] - extra[4] == Approx(experts_gb * 3 / 4).margin(0.02));
  // moe-124b at 4096 tokens on 256 GPUs: EP 64 fits 141 GB in BF16, not with the 4-bit operands.
  Result big = run_cli("plan --model moe-124b --gpus 256 --seq 4096");
  CHECK(big.out.find("layout: EP 64 x DP 4 (fits 141 GB, not 80 GB)") != std::string::npos);
  CHECK(big.out.find("layout with a 4-bit recipe: EP 128 x DP 2 (fits 141 GB, not 80 GB)") != std::string::npos);
}

TEST_CASE("ufp4 plan --model DENSE --gpus N: a 4-bit recipe's weight operands whole on every rank, beside both data-parallel layouts", "[cli]") {
  Result r = run_cli("plan --model dense-1.5b --gpus 4");
  INFO(r.out);
  REQUIRE(r.code == 0);
  double quantized_b = 0, replicated = 0, zero1 = 0, extra = 0, with_replicated = 0, with_zero1 = 0;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    std::istringstream row(line);
    std::string name, unit;
    double total = 0, active = 0;
    if (line.rfind("dense-1.5b ", 0) == 0 && row >> name >> total >> unit >> active >> unit >> quantized_b >> unit)
      quantized_b /= unit == "M" ? 1000.0 : 1.0;  // the table prints millions ("M") or billions ("B")
    std::sscanf(line.c_str(), "  4 GPUs, data parallel (micro-batch 1 a GPU): %lf GB a GPU with replicated AdamW state, %lf GB with ZeRO-1", &replicated, &zero1);
    std::sscanf(line.c_str(), "    with a 4-bit recipe: +%lf GB of columnwise weight operands kept for DGRAD (2 B a quantized weight): %lf GB replicated, %lf GB",
                &extra, &with_replicated, &with_zero1);
  }
  REQUIRE(quantized_b > 0);
  CHECK(extra == Approx(2.0 * quantized_b).margin(0.01));  // the table's quantized weights (billions), 2 B each
  CHECK(with_replicated == Approx(replicated + extra).margin(0.011));
  CHECK(with_zero1 == Approx(zero1 + extra).margin(0.011));
}

TEST_CASE("ufp4 plan --model M --seq S: the memory line, the table and the layouts all at S", "[cli]") {
  Result r = run_cli("plan --model moe-7.9b --seq 4096 --micro-batch 2 --gpus 4");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const size_t at = r.out.find("activations ");
  REQUIRE(at != std::string::npos);
  const double memory_line = std::stod(r.out.substr(at + 12));
  const size_t ep = r.out.find("no recompute):", r.out.find("expert parallel on 4 GPUs"));
  const size_t layout_at = r.out.rfind("activations ", ep);
  REQUIRE(layout_at != std::string::npos);
  CHECK(memory_line == Approx(std::stod(r.out.substr(layout_at + 12))).margin(0.005));
  CHECK(r.out.find(", seq 4096") != std::string::npos);
}

namespace {

ScalingBenchRow bench_row(const std::string& model, const std::string& recipe, const std::string& unit, int64_t gpus, double step_ms, double mfu) {
  ScalingBenchRow r;
  r.model = model;
  r.recipe = recipe;
  r.unit = unit;
  r.layout = gpus == 1 ? "1 GPU" : "EP " + std::to_string(gpus) + " x DP 1";
  r.gpus = gpus;
  r.batch = 1;
  r.micro_batch = 1;
  r.seq_len = 4096;
  r.step_ms = step_ms;
  r.tokens_per_s = static_cast<double>(gpus * r.batch * r.seq_len) / (step_ms * 1e-3);
  r.mfu = mfu;
  return r;
}

void write_bench_rows(const std::string& path, const std::string& device, const std::vector<ScalingBenchRow>& rows) {
  H5Writer w(path);
  w.attr("device", device);
  write_scaling_rows(w, rows);
  w.commit();
}

}  // namespace

TEST_CASE("a MoE model's time from its measured MoE layer: the layers at the measured time a token, the rest of its FLOPs at the dense MFU", "[cli]") {
  const std::string dir = temp_dir();
  const ModelConfig& c = model_config("moe-124b");
  const std::string h200 = "NVIDIA H200";
  // The layer file: bf16 and ufp4 on 1 GPU and at EP 4; the estimate takes ufp4 at the most ranks.
  write_bench_rows(dir + "/expert_parallel_layer.h5", h200,
                   {bench_row("moe-124b", "bf16", "MoE layer", 4, 20.0, 0.3), bench_row("moe-124b", "ufp4", "MoE layer", 1, 30.0, 0.2),
                    bench_row("moe-124b", "ufp4", "MoE layer", 4, 40.0, 0.15)});
  // Without scaling.h5 the rest of the model goes at the layer's own MFU.
  const double tokens = 1e11, peak = peak_flops(h200);
  const int64_t moe_layers = c.n_layers - c.dense_layers;
  const double rest = train_flops_per_token(c) - moe_layers * moe_layer_flops_per_token(c);
  auto expect = [&](double mfu, int gpus) { return tokens / gpus * (moe_layers * 40e-3 / 4096 + rest / (mfu * peak)); };
  MoeLayerEstimate e = estimate_from_moe_layer(c, 64, tokens, "cpu", dir);
  CHECK(e.device == h200);
  CHECK(e.recipe == "ufp4");
  CHECK(e.layout == "EP 4 x DP 1");
  CHECK(e.layer_tokens == 4096);
  CHECK(e.rest_mfu == Approx(0.15));
  CHECK(e.seconds == Approx(expect(0.15, 64)).epsilon(1e-6));  // the file keeps its rows in FP32
  // With the dense steps of scaling.h5 on the same device: their median MFU (MoE rows and several ranks left out).
  write_bench_rows(dir + "/scaling.h5", h200,
                   {bench_row("dense-1.5b", "bf16", "step", 1, 100, 0.5), bench_row("dense-113m", "bf16", "step", 1, 10, 0.4),
                    bench_row("dense-20m", "ufp4", "step", 1, 5, 0.3), bench_row("dense-1.5b", "bf16", "step", 4, 100, 0.9),
                    bench_row("moe-81m", "bf16", "step", 1, 10, 0.05)});
  e = estimate_from_moe_layer(c, 512, tokens, h200, dir);
  CHECK(e.rest_mfu == Approx(0.4));
  CHECK(e.seconds == Approx(expect(0.4, 512)).epsilon(1e-6));
  // Another GPU than the one measured: no estimate (an H200's layer is not an H100's); a dense model: none.
  CHECK(estimate_from_moe_layer(c, 64, tokens, "NVIDIA H100 80GB HBM3", dir).seconds < 0);
  CHECK(estimate_from_moe_layer(model_config("dense-1.5b"), 64, tokens, h200, dir).seconds < 0);
  CHECK(estimate_from_moe_layer(model_config("moe-7.9b"), 64, tokens, h200, dir).seconds < 0);  // no row of its own
  // The bench report's projection: a model with a measured step from its step, moe-124b from its layer.
  std::ofstream(dir + "/paper.toml") << "[[targets]]\nname = \"Dense 1.5B\"\nmodel = \"dense-1.5b\"\ntokens = 1.0e11\n"
                                     << "[[targets]]\nname = \"MoE 124B\"\nmodel = \"moe-124b\"\ntokens = 1.0e12\n";
  const std::string md = projection_section(dir, dir + "/paper.toml");
  INFO(md);
  // dense-1.5b's 4-rank step: 4096 tokens a GPU in 100 ms, 40,960 tokens/s a GPU: 1e11 tokens in 678 GPU-hours.
  CHECK(md.find("| Dense 1.5B (`dense-1.5b`) | 1e+11 | bf16 | the step, 4 x NVIDIA H200, EP 4 x DP 1 (`scaling.h5`) | 40960 | 678 |") != std::string::npos);
  CHECK(md.find("| MoE 124B (`moe-124b`) | 1e+12 | ufp4 | one MoE layer, EP 4 x DP 1, NVIDIA H200") != std::string::npos);
  CHECK(md.find(fmt("%.3g", estimate_from_moe_layer(c, 1, 1e12, "", dir).seconds / 3600)) != std::string::npos);
}

TEST_CASE("ufp4 quantize: .npy and .h5 outputs equal the library call", "[cli]") {
  std::string dir = temp_dir();
  torch::Tensor x = test::make_input("outliers", 32, 64, 31);
  ArrayF32 a;
  a.shape = {32, 64};
  a.data.assign(x.data_ptr<float>(), x.data_ptr<float>() + x.numel());
  write_npy(dir + "/x.npy", a);
  Result r = run_cli("-q quantize --device cpu --grid e1m2 --rht 16 --rht-seed 4 --rounding sr --seed 3 --columnwise --in " + dir +
                     "/x.npy --out " + dir + "/y.npy");
  REQUIRE(r.code == 0);
  QuantSpec s;
  s.grid = Grid::from_name("e1m2");
  s.rht = 16;
  s.rht_seed = 4;
  s.rounding = Rounding::kSr;
  s.seed = 3;
  QuantizeOptions o;
  o.columnwise = true;
  torch::Tensor expected = quantize(x, s, o).dequant.t().contiguous();
  ArrayF32 y = read_npy(dir + "/y.npy");
  CHECK(y.shape == a.shape);
  torch::Tensor got = torch::from_blob(y.data.data(), {32, 64}, torch::kFloat32);
  CHECK(test::first_bit_mismatch(got, expected) == -1);

  Result h = run_cli("-q quantize --device cpu --grid e2m1 --scale nvfp4 --in " + dir + "/x.npy --out " + dir + "/y.h5");
  REQUIRE(h.code == 0);
  QuantizedTensor q = quantize(x, [] { QuantSpec t; t.scale = ScaleKind::kNvfp4; return t; }());
  std::vector<int64_t> shape;
  std::vector<uint8_t> codes = read_h5_u8(dir + "/y.h5", "codes", &shape);
  CHECK(shape == std::vector<int64_t>{32, 32});
  CHECK(std::equal(codes.begin(), codes.end(), q.codes.data_ptr<uint8_t>()));
  auto attrs = read_h5_string_attrs(dir + "/y.h5");
  CHECK(attrs["grid"] == "e2m1");
  CHECK(attrs["scale"] == "nvfp4");
  CHECK(!attrs["git_commit"].empty());
  CHECK(!attrs["device"].empty());
}

TEST_CASE("an unwritable output folder fails with exit 1 and leaves no file", "[cli]") {
  std::string dir = temp_dir();
  ArrayF32 a;
  a.shape = {1, 16};
  a.data.assign(16, 1.0f);
  write_npy(dir + "/x.npy", a);
  mkdir((dir + "/ro").c_str(), 0555);
  if (geteuid() == 0) {
    // root ignores permissions; a missing folder exercises the same path.
    Result r = run_cli("-q quantize --in " + dir + "/x.npy --out " + dir + "/missing/y.h5");
    CHECK(r.code == 1);
    CHECK(lines(r.out) == 1);
    CHECK(!exists(dir + "/missing/y.h5"));
  } else {
    Result r = run_cli("-q quantize --in " + dir + "/x.npy --out " + dir + "/ro/y.h5");
    CHECK(r.code == 1);
    CHECK(!exists(dir + "/ro/y.h5"));
  }
}

TEST_CASE("a write that fails part-way (a full disk) exits 1 and leaves no file", "[cli]") {
  std::string dir = temp_dir();
  ArrayF32 a;
  a.shape = {512, 512};
  a.data.assign(512 * 512, 1.5f);
  write_npy(dir + "/x.npy", a);
  // RLIMIT_FSIZE makes writes past 64 KiB fail with EFBIG, as ENOSPC would on a full disk.
  std::string cmd = "bash -c \"trap '' XFSZ; ulimit -f 64; " + std::string(UFP4_BINARY) + " -q quantize --device cpu --in " + dir +
                    "/x.npy --out " + dir + "/y.npy\" 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, p)) out += buf;
  int code = WEXITSTATUS(pclose(p));
  CHECK(code == 1);
  CHECK(lines(out) == 1);
  CHECK(out.find("y.npy") != std::string::npos);
  CHECK(!exists(dir + "/y.npy"));
  std::string left = dir + "/y.npy.tmp";
  CHECK(std::system(("ls " + dir + " | grep -q tmp").c_str()) != 0);  // no temporary left behind
}

TEST_CASE("ufp4 check passes on an equal curve and names run, step and values when a reference moves", "[cli]") {
  std::vector<std::string> refs;
  walk_files(std::string(UFP4_SOURCE_DIR) + "/results/reference/ci", ".h5", refs);
  REQUIRE(!refs.empty());
  const std::string ref = refs.front();
  std::string same = temp_dir(), moved = temp_dir();
  REQUIRE(std::system(("cp '" + ref + "' " + same + "/ && cp '" + ref + "' " + moved + "/").c_str()) == 0);
  Result ok = run_cli("check '" + ref + "' --reference " + same);
  CHECK(ok.code == 0);
  CHECK(ok.out.find("ok   ") != std::string::npos);
  // Perturb step 40 of the copied reference's loss by 1%.
  std::string copy = moved + "/" + ref.substr(ref.find_last_of('/') + 1);
  hid_t f = H5Fopen(copy.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t ds = H5Dopen2(f, "train/loss", H5P_DEFAULT);
  std::vector<float> loss(static_cast<size_t>(H5Sget_simple_extent_npoints(H5Dget_space(ds))));
  H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, loss.data());
  const float before = loss[40];
  loss[40] *= 1.01f;
  H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, loss.data());
  H5Dclose(ds);
  H5Fclose(f);
  Result bad = run_cli("check '" + ref + "' --reference " + moved);
  CHECK(bad.code == 1);
  CHECK(bad.out.find("FAIL") != std::string::npos);
  CHECK(bad.out.find("train/loss at step 40") != std::string::npos);
  char want[64];
  std::snprintf(want, sizeof want, "%.6f vs reference %.6f", before, loss[40]);
  CHECK(bad.out.find(want) != std::string::npos);
}

TEST_CASE("ufp4 check --exact takes the reference made on the result's GPU model when a run has several", "[cli]") {
  std::vector<std::string> refs;
  const std::string dir = std::string(UFP4_SOURCE_DIR) + "/results/reference/gpu";
  walk_files(dir, ".h5", refs);
  REQUIRE(refs.size() >= 2);  // one NVIDIA H200, one NVIDIA H100 (results/reference/gpu/README.md)
  for (const auto& r : refs) {
    INFO(r);
    Result res = run_cli("check '" + r + "' --exact --reference " + dir);
    CHECK(res.code == 0);
    CHECK(res.out.find("final weights bit-identical") != std::string::npos);
    CHECK(res.out.find("within the tolerance") == std::string::npos);
  }
}

TEST_CASE("reproduce Table 1: the presets match the paper's Table 1 field for field", "[cli]") {
  Result r = run_cli("report table1 --out -");
  CHECK(r.code == 0);
  CHECK(r.out.find("every field of the presets matches the paper's Table 1") != std::string::npos);
  CHECK(r.out.find("| RHT scope | bwd_dw | bwd_dw only | fwd_y, bwd_dx, bwd_dw | fwd_y, bwd_dx, bwd_dw | yes |") != std::string::npos);
  Result bad = run_cli("report table9");
  CHECK(bad.code == 2);
  CHECK(bad.out.find("allowed: table1, table2, table3, figure8, figure10, factorial, emulation, analysis, mechanism, figure9") != std::string::npos);
}

TEST_CASE("the report registry: every report `make report` renders is registered, and the help names them all", "[cli]") {
  const std::string makefile = read_text_file(std::string(UFP4_SOURCE_DIR) + "/Makefile");
  const std::string loop = "@for r in ";
  const size_t at = makefile.find(loop, makefile.find("\nreport: build"));
  REQUIRE(at != std::string::npos);
  std::istringstream names(makefile.substr(at + loop.size(), makefile.find(';', at) - at - loop.size()));
  int listed = 0;
  for (std::string n; names >> n; ++listed) CHECK_NOTHROW(report_entry(n));
  CHECK(listed >= 7);
  Result help = run_cli("report --help");
  for (const auto& e : report_registry()) {
    INFO(e.name);
    CHECK(help.out.find(e.name) != std::string::npos);
    CHECK((e.render || !e.campaign.empty()));                         // something renders it
    CHECK((e.campaign.empty() || file_exists(std::string(UFP4_SOURCE_DIR) + "/" + e.campaign)));
    for (const auto& d : e.archived_dirs) CHECK(is_dir(std::string(UFP4_SOURCE_DIR) + "/" + d));
  }
  Result campaign_only = run_cli("report factorial --results " + temp_dir());
  CHECK(campaign_only.code == 2);
  CHECK(campaign_only.out.find("renders from a campaign only") != std::string::npos);
}

TEST_CASE("ufp4 bench step on CPU writes step.h5 with provenance and report bench renders it", "[cli]") {
  const std::string dir = temp_dir();
  // The CPU test model: the benchmark's plumbing, rows and report, not its numbers.
  Result b = run_cli("bench step --models tiny --recipes bf16,ufp4 --batch 1 --seq 32 --warmup 0 --steps 2 --device cpu "
                        "--reference none --moe-layers tiny-moe --moe-layer-tokens 64 --out-dir " + dir);
  INFO(b.out);
  REQUIRE(b.code == 0);
  const auto attrs = read_h5_string_attrs(dir + "/step.h5");
  CHECK(attrs.count("git_commit") == 1);
  CHECK(attrs.count("device") == 1);
  const ArrayF32 ms = read_h5_f32(dir + "/step.h5", "step/step_ms");
  REQUIRE(ms.data.size() == 4);
  for (float v : ms.data) CHECK(v > 0);
  const auto rows = read_h5_string_attrs(dir + "/step.h5", "step/step_ms").at("rows");
  CHECK(rows.find("tiny|ufp4|bf16|") != std::string::npos);
  CHECK(rows.find("tiny|ufp4|ufp4|") != std::string::npos);
  CHECK(rows.find("tiny-moe|ufp4-moe-layer|ufp4|") != std::string::npos);
  Result r = run_cli("report bench --results " + dir + " --out " + dir + "/bench.md");
  INFO(r.out);
  REQUIRE(r.code == 0);
  const std::string md = read_text_file(dir + "/bench.md");
  // The bar as reports/targets.toml sets it.
  const toml::table targets = toml::parse_file(std::string(UFP4_SOURCE_DIR) + "/reports/targets.toml");
  char bar[32];
  std::snprintf(bar, sizeof bar, "%.2f", targets["step"]["ufp4_over_bf16_max"].value_or(0.0));
  const std::string bar_row = "| ufp4 step / bf16 step, tiny | <= " + std::string(bar) + " | ";
  REQUIRE(md.find(bar_row) != std::string::npos);
  CHECK(md.find("| tiny | ufp4 | ufp4 | 1 x 32 |") != std::string::npos);
  CHECK(md.find("### One MoE layer at paper scale") != std::string::npos);
  CHECK(md.find("| tiny-moe | ufp4 | 64 | ") != std::string::npos);
  // A bar not met gets its facts and what would close it; a met one does not.
  const size_t at = md.find(bar_row);
  const bool unmet = md.substr(at, md.find('\n', at) - at).find("not met") != std::string::npos;
  CHECK((md.find("### ufp4 step / bf16 step, tiny") != std::string::npos) == unmet);
  if (unmet) CHECK(md.find("What would close it", md.find("### ufp4 step / bf16 step, tiny")) != std::string::npos);
  // The fake-quant peer's bar (a peer row of another file of the folder, as a GPU command writes it; its time
  // made up here: the plumbing, not a measurement): our ufp4 step over the compiled fake-quant ufp4 step.
  {
    const double ours = read_h5_f32(dir + "/step.h5", "step/step_ms").data[1];
    StepBenchRow peer{"pytorch-fakequant-compiled-fused", "tiny", "ufp4", 1, 32, 2};
    peer.step_ms = 4 * ours;
    H5Writer w(dir + "/step-fakequant.h5");
    write_bench_header(w, "test");
    write_step_rows(w, {peer});
    w.commit();
  }
  REQUIRE(run_cli("report bench --results " + dir + " --out " + dir + "/bench.md").code == 0);
  const std::string fq = read_text_file(dir + "/bench.md");
  std::snprintf(bar, sizeof bar, "%.2f", targets["step"]["ufp4_over_pytorch_fakequant_compiled_max"].value_or(0.0));
  CHECK(fq.find("| ufp4 step / PyTorch fake-quant ufp4 step, compiled, tiny | <= " + std::string(bar) + " | 0.250 (sd ") != std::string::npos);
  // A fake-quant command of its own (fakequant/, made up here: the plumbing): its peer rows against our rows
  // of the same file, not the step files' (ours there ran at another time); the fastest eager variant; and
  // `tiny`'s fake-quant bar now judged from this file alone (one row), its other bars left to the step files.
  const size_t bf16_bar_at = fq.find(bar_row);
  const std::string bf16_bar = fq.substr(bf16_bar_at, fq.find('\n', bf16_bar_at) - bf16_bar_at);
  {
    auto row = [](const std::string& impl, const std::string& model, const std::string& recipe, double ms) {
      StepBenchRow r{impl, model, recipe, 1, 32, 2};
      r.step_ms = ms, r.step_ms_sd = 0;
      return r;
    };
    make_dirs(dir + "/fakequant");
    H5Writer w(dir + "/fakequant/step-tiny-fq.h5");
    write_bench_header(w, "test");
    write_step_rows(w, {row("ufp4", "tiny-fq", "bf16", 8), row("ufp4", "tiny-fq", "ufp4", 10),
                        row("pytorch-fakequant-eager-fused", "tiny-fq", "ufp4", 50), row("pytorch-fakequant-eager-foreach", "tiny-fq", "ufp4", 40),
                        row("pytorch-fakequant-compiled-fused", "tiny-fq", "ufp4", 20), row("ufp4", "tiny", "ufp4", 6),
                        row("pytorch-fakequant-compiled-fused", "tiny", "ufp4", 30)});
    w.commit();
  }
  REQUIRE(run_cli("report bench --results " + dir + " --out " + dir + "/bench.md").code == 0);
  const std::string own = read_text_file(dir + "/bench.md");
  CHECK(own.find("## Against a fake-quant PyTorch peer") != std::string::npos);
  CHECK(own.find("| tiny-fq | ufp4 | 10.00 | 40.00 | 20.00 | 0.500 | 1.250 | `") != std::string::npos);
  CHECK(own.find("| tiny | ufp4 | 6.00 | - | 30.00 | 0.200 | - | `") != std::string::npos);
  CHECK(own.find("| ufp4 step / PyTorch fake-quant ufp4 step, compiled, tiny-fq | <= " + std::string(bar) + " | 0.500 (sd ") != std::string::npos);
  const std::string tiny_fq_bar = "| ufp4 step / PyTorch fake-quant ufp4 step, compiled, tiny | <= " + std::string(bar) + " | ";
  const size_t tiny_at = own.find(tiny_fq_bar);
  REQUIRE(tiny_at != std::string::npos);
  CHECK(own.find(tiny_fq_bar, tiny_at + 1) == std::string::npos);  // one row: the fakequant/ file's
  CHECK(own.substr(tiny_at + tiny_fq_bar.size(), 5) == "0.200");
  CHECK(own.find(bf16_bar) != std::string::npos);  // the step files' bars unchanged
  // The packing table and its bit check beside the step files (made up here: the plumbing, not a
  // measurement): each row against one run a GPU of its model and device, a bar on the fastest setting.
  write_text_atomically(dir + "/packing.csv", "device,model,per_gpu,runs,steps_each,tokens_per_s_sum,tokens_per_s_each_mean,wall_s,mps\n"
                                              "G,dense-ne6.6m,1,1,800,100,100,9,0\nG,dense-ne6.6m,8,8,100,180,22,9,1\n"
                                              "G,moe-ne5.8m,1,1,800,100,100,9,0\nG,moe-ne5.8m,4,4,200,140,35,9,1\n");
  make_dirs(dir + "/logs/packing");
  write_text_atomically(dir + "/logs/packing/exact.log", "dense-ne6.6m: packing-1 alone against its run among 8 under MPS: check exit 0: 4 ok, 0 FAIL\n");
  REQUIRE(run_cli("report bench --results " + dir + " --out " + dir + "/bench.md").code == 0);
  const std::string pk = read_text_file(dir + "/bench.md");
  CHECK(pk.find("## Packing: independent runs a GPU") != std::string::npos);
  CHECK(pk.find("| dense-ne6.6m | G | 8 | on | 180 | 1.80x |") != std::string::npos);
  CHECK(pk.find("- dense-ne6.6m: packing-1 alone against its run among 8 under MPS: check exit 0: 4 ok, 0 FAIL") != std::string::npos);
  CHECK(pk.find("the fastest packing over one run a GPU | >= 1.50x | 1.80x (K = 8, MPS) | **met** |") != std::string::npos);
  CHECK(pk.find("moe-ne5.8m: the fastest packing over one run a GPU | >= 1.50x | 1.40x (K = 4, MPS) | **not met** |") != std::string::npos);
  // The kernel suite needs a CUDA build and a GPU: a one-line error otherwise.
  if (!torch::cuda::is_available()) {
    Result k = run_cli("bench kernels --out-dir " + dir);
    CHECK(k.code == 2);
    CHECK(lines(k.out) == 1);
  }
}
