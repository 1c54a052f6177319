// Benchmark report (Figure 11 and the training-step targets) from `ufp4 bench` output.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "common/text.h"
#include "harness/io/array_io.h"
#include "harness/io/bench_files.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"
#include "models/model_config.h"

namespace ufp4 {

namespace {

// MFU as a percentage; n/a where the device had no known peak (device_peaks.h) or the row is CPU.
std::string mfu_text(double mfu) { return mfu > 0 ? fmt("%.1f%%", 100 * mfu) : "n/a"; }

// A section: its heading, its prose, then a table of `rows` (Markdown lines) under `columns`; nothing
// when there are no rows.
std::string table_section(const std::string& heading, const std::string& prose, const std::vector<std::string>& columns,
                          const std::string& rows) {
  if (rows.empty()) return "";
  std::string header = "|", rule = "|";
  for (const auto& c : columns) header += " " + c + " |", rule += "---|";
  return heading + "\n\n" + prose + "\n\n" + header + "\n" + rule + "\n" + rows + "\n";
}

struct KRow {
  std::string kind, grid, rounding, layout, shape;
  int64_t rows = 0, cols = 0;
  double us = NAN, sd = NAN, bytes = 0;
};

std::vector<KRow> load_kernels(const std::string& path) {
  std::vector<KRow> v;
  for (const KernelBenchRow& k : read_kernel_rows(path)) {
    const auto f = split(k.name, '/');
    KRow r;
    if (f.size() == 2 && f[0] == "copy") r.kind = "copy";
    else if (f.size() == 6 && f[0] == "quantize") { r.kind = f[1]; r.grid = f[2]; r.rounding = f[3]; r.layout = f[4]; }
    else if (f.size() == 5 && f[0] == "quantize" && f[1] == "pair") { r.kind = "pair"; r.grid = f[2]; r.rounding = f[3]; r.layout = "pair"; }
    else continue;
    r.shape = f.back();
    const auto d = split(r.shape, 'x');
    if (d.size() != 2) continue;
    r.rows = std::stoll(d[0]);
    r.cols = std::stoll(d[1]);
    r.us = k.time_us;
    r.sd = k.time_us_sd;
    r.bytes = k.bytes;
    v.push_back(r);
  }
  if (v.empty()) throw Error(path + ": no kernel benchmarks in kernels/time_us");
  return v;
}

// A step row with the device and file it came from (one command a file).
struct SRow : StepBenchRow {
  std::string device, source;
};

std::vector<SRow> load_steps(const std::string& path) {
  const std::string device = read_h5_string_attrs(path)["device"], source = path.substr(path.find_last_of('/') + 1);
  std::vector<SRow> v;
  for (const StepBenchRow& b : read_step_rows(path)) {
    SRow r;
    static_cast<StepBenchRow&>(r) = b;
    r.device = device;
    r.source = source;
    v.push_back(r);
  }
  return v;
}

std::string verdict(bool ok) { return ok ? "**met**" : "**not met**"; }

// The sd of the ratio a / b of two step timings from theirs (the rows independent).
double ratio_sd(double a, double sa, double b, double sb) { return a / b * std::hypot(sa / a, sb / b); }

// A target row's measured ratio and verdict cells: the ratio with its sd, and whether the bar lies within it.
std::string ratio_cells(double ratio, double sd, double bar) {
  return fmt("%.3f", ratio) + " (sd " + fmt("%.3f", sd) + ") | " + verdict(ratio <= bar) +
         (std::fabs(ratio - bar) <= sd ? ", within one sd of the bar" : "");
}

// The figures the report takes from one Nsight Compute log (ncu-<kernel name>_<R>x<C>.log).
struct NcuStats {
  double us = NAN, dram = NAN, sm = NAN, regs = NAN, occupancy = NAN, cycles_per_issue = NAN, instr_per_elem = NAN;
  double issue_use = NAN;  // warp instructions per scheduler per active cycle
  double active = NAN;     // SM active cycles / elapsed cycles (1 - the tail's idle share)
};

NcuStats load_ncu(const std::string& path, const std::string& name) {
  const std::string text = read_text_file(path);
  auto metric = [&](const std::string& key) {
    const auto at = text.find(key);
    if (at == std::string::npos) return static_cast<double>(NAN);
    std::string line = text.substr(at, text.find('\n', at) - at);
    std::string num = line.substr(line.find_last_of(' ') + 1);
    num.erase(std::remove(num.begin(), num.end(), ','), num.end());
    try { return std::stod(num); } catch (...) { return static_cast<double>(NAN); }
  };
  const auto d = split(name.substr(name.rfind('_') + 1), 'x');
  const double elems = d.size() == 2 ? std::stod(d[0]) * std::stod(d[1]) : NAN;
  NcuStats s;
  s.us = metric("Duration");
  s.dram = metric("DRAM Throughput");
  s.sm = metric("Compute (SM) Throughput");
  s.regs = metric("Registers Per Thread");
  s.occupancy = metric("Achieved Occupancy");
  s.cycles_per_issue = metric("Warp Cycles Per Issued Instruction");
  const double instr = metric("  Executed Instructions "), active = metric("SM Active Cycles"), sms = metric("# SMs");
  s.instr_per_elem = instr * 32 / elems;  // warp instructions x 32 lanes
  s.issue_use = instr / (4 * sms) / active;  // four schedulers an SM
  s.active = active / metric("Elapsed Cycles");
  return s;
}

// The bars the benchmarks are held to (reports/targets.toml).
struct BenchTargets {
  double bw_min, fs_max, uf_min, sr_min, step_ufp4_max, det_max, eager_max, compiled_max;
  double moe_ufp4_max, moe_eager_max, moe_compiled_max, fakequant_max;
  DataParallelTargets data_parallel;
  PackingTargets packing;
};

// A list of strings at section.key ([] when absent); Error naming the file when it holds anything else.
std::vector<std::string> string_list(const toml::table& t, const char* section, const char* key, const std::string& path) {
  std::vector<std::string> out;
  const toml::node* n = t[section][key].node();
  if (!n) return out;
  const toml::array* a = n->as_array();
  if (a)
    for (const auto& e : *a)
      if (const auto v = e.value<std::string>()) out.push_back(*v);
  if (!a || out.size() != a->size()) throw Error(path + ": " + section + "." + key + ": expected a list of strings");
  return out;
}

BenchTargets load_targets(const std::string& root) {
  const std::string path = root + "/reports/targets.toml";
  const toml::table t = load_paper(path);
  auto get = [&](const char* section, const char* key) {
    const auto v = t[section][key].value<double>();
    if (!v) throw Error(path + ": " + section + "." + key + ": missing (expected a number)");
    return *v;
  };
  return {get("kernels", "fused_over_copy_bandwidth_min"), get("kernels", "fused_over_standalone_max"), get("kernels", "unfused_over_fused_min"),
          get("kernels", "sr_over_rtne_throughput_min"),   get("step", "ufp4_over_bf16_max"),
          get("step", "deterministic_over_nondeterministic_max"), get("step", "bf16_over_pytorch_eager_max"),
          get("step", "bf16_over_pytorch_compiled_max"), get("step", "moe_ufp4_over_bf16_max"), get("step", "moe_bf16_over_pytorch_eager_max"),
          get("step", "moe_bf16_over_pytorch_compiled_max"), get("step", "ufp4_over_pytorch_fakequant_compiled_max"),
          DataParallelTargets{get("data_parallel", "efficiency_min"), static_cast<int>(get("data_parallel", "efficiency_gpus")),
                              t["data_parallel"]["efficiency_model"].value_or(std::string("dense-1.5b")), std::string(),
                              t["expert_parallel"]["checks"].value_or(std::string()), string_list(t, "expert_parallel", "within_tolerance", path),
                              string_list(t, "expert_parallel", "bit_for_bit", path)},
          PackingTargets{get("packing", "fastest_over_one_run_min"), string_list(t, "packing", "models", path)}};
}

// Deterministic attention's backward, where deterministic mode's cost and the dense steps' gap to the
// compiled peer come from: what it is, what it costs, what was tried, what would close the rest.
// flash_ms: the step with flash's deterministic backward (0 if not timed); need_ms: step time a bar needs.
std::string deterministic_attention_account(const std::string& model, double ours_ms, double flash_ms, double need_ms) {
  std::string text =
      "Deterministic mode's cost is attention's backward (the attention rows of the table above). cuDNN's fused backward, the fastest, "
      "adds dQ with atomics and LibTorch 2.11 offers no deterministic switch for it (logs/attention-backends.log); cuDNN's deterministic "
      "form (cudnn-frontend's set_deterministic_algorithm, which LibTorch does not call) writes dP to a batch x heads x S x S workspace, "
      "1.6 GB a layer at dense-113m. Ours (`kernels/attention/attention_backward.h`, 695e6c5): one warpgroup a (batch, KV head, 64 keys), the five "
      "products as 64 x 64 x 64 warpgroup MMAs, dV and dK in registers, dQ's terms staged in shared memory and added by bulk asynchronous "
      "reductions in a fixed order behind a counter a query block, three blocks an SM; reruns and resumed runs bit-identical "
      "(results/determinism/). Its whole backward at dense-113m's shape on contiguous inputs takes 1.15 ms on the H200 and 1.30 on the "
      "H100 (CUDA events, logs/attention-backward-check.log sections 14, 15, 17), where our warp-MMA version took 1.59 and 1.77 and "
      "flash's deterministic kernel 1.87 (H200, logs/ncu-flash-det.txt; 1.42 in the model's layout); with dQ's terms added unordered "
      "it takes 1.09, without dQ 0.65 (H200).";
  if (flash_ms > 0)
    text += " In this step: " + fmt("%.2f", ours_ms) + " ms with ours, " + fmt("%.2f", flash_ms) + " ms with flash's (`ufp4-flash-attention-backward`).";
  text += " Tried and not kept (same log): 128 keys a block in two warpgroups (half the reductions; slower, its MMAs serialized), dQ's "
          "product overlapped with the next scores (serialized by the compiler), key block 0 first, key block 0 writing dQ "
          "itself, an earlier count-in; and around flash's backward: batch halves in two streams, causal pieces in streams, the weight "
          "gradients beside it, cuDNN's backward per chunk of keys (logs/attention-chunked.log, logs/attention-causal-split.log, "
          "logs/wgrad-overlap.log, logs/attention-kv-chunks.log, logs/attention-backward-split.log).";
  const double layers = static_cast<double>(model_config(model).n_layers);
  if (need_ms > 0)
    text += " The bar needs " + fmt("%.2f", need_ms) + " ms of the step, " + fmt("%.3f", need_ms / layers) + " ms a layer.";
  text += " What would close it: the dQ sum's cost (at dense-113m on the H200 0.06 ms a layer for its order, 0.2 for adding the terms in "
          "L2) and each block's serial chain (scores, softmax, products and dQ each wait for the last, one warpgroup a block): a producer "
          "warp loading by TMA and two consumer warpgroups taking turns, so that one's softmax runs under the other's MMAs, as "
          "FlashAttention-3 does.\n\n";
  return text;
}

// What the "not met" section needs: which bars failed and the facts behind them.
struct UnmetFacts {
  bool bw = false, fs = false, uf = false, sr = false;
  std::map<std::string, std::pair<double, std::string>> sr_worst = {{"row", {1e9, ""}}, {"col", {1e9, ""}}};
  std::vector<std::string> step;   // dense models over the ufp4 / bf16 bar
  std::vector<std::string> other;  // paragraphs of the MoE step bars not met
};

// The step rows' times by model, as the step tables and bars look them up.
struct StepTimes {
  std::map<std::string, double> bf16_ms, bf16_sd, ref_ms, compiled_ms, compiled_sd, compiled_plain_ms, det_compiled_ms, libtorch_ops_ms;
  std::map<std::string, std::string> device_note;
  std::map<std::string, std::map<std::string, double>> nondet_ms;  // model -> recipe -> ms without deterministic mode
  std::map<std::string, std::map<std::string, double>> nondet_sd, recipe_sd;  // their rows' sd, and our rows'
  std::map<std::string, std::map<std::string, double>> uncaptured_ms;  // model -> recipe -> ms launched kernel by kernel
  std::map<std::string, std::map<std::string, double>> recipe_ms;  // model -> recipe -> ms (our rows)
  std::map<std::string, std::map<std::string, double>> fakequant_ms, fakequant_sd;  // model -> recipe -> the compiled fake-quant peer
};

// The report as it is put together: its Markdown, the rows of its Targets table (spliced in at @@TARGETS@@)
// and the sources of its footer.
struct BenchOutput {
  std::ostringstream md, targets;
  std::vector<std::string> sources;
};

// "### SR throughput / RTNE throughput": the worst shapes and, where Nsight Compute saw the four fused
// E2M1 kernels of one shape, the factors of SR's cost and what would close the gap.
std::string sr_throughput_account(const BenchTargets& t, const std::map<std::string, std::pair<double, std::string>>& sr_worst,
                                  const std::map<std::string, NcuStats>& ncu, const std::string& tune_log,
                                  const std::string& experiments_log) {
  std::ostringstream md;
  // The four fused E2M1 kernels of the profiled shape, when Nsight Compute saw them all.
  std::string shape;
  for (const auto& kv : ncu)
    if (kv.first.rfind("quantize_fused_e2m1_sr_col_", 0) == 0) shape = kv.first.substr(std::string("quantize_fused_e2m1_sr_col_").size());
  auto stats = [&](const char* rounding, const char* layout) -> const NcuStats* {
    auto it = ncu.find(std::string("quantize_fused_e2m1_") + rounding + "_" + layout + "_" + shape);
    return it == ncu.end() ? nullptr : &it->second;
  };
  const NcuStats *rr = stats("rtne", "row"), *sr_r = stats("sr", "row"), *rc = stats("rtne", "col"), *sc = stats("sr", "col");
  md << "### SR throughput / RTNE throughput\n\nRowwise worst " << fmt("%.1f%%", 100 * sr_worst.at("row").first) << " ("
     << sr_worst.at("row").second << "), columnwise worst " << fmt("%.1f%%", 100 * sr_worst.at("col").first) << " ("
     << sr_worst.at("col").second << ").";
  if (rr && sr_r && rc && sc) {
    md << "\n\n| E2M1, " << shape << " | µs | instructions per element | issue slots used | SM active share | warp cycles per issue "
       << "| achieved occupancy | registers | SM throughput | DRAM throughput |\n|---|---|---|---|---|---|---|---|---|---|\n";
    for (auto k : {std::make_pair("RTNE rowwise", rr), std::make_pair("SR rowwise", sr_r), std::make_pair("RTNE columnwise", rc),
                   std::make_pair("SR columnwise", sc)})
      md << "| " << k.first << " | " << fmt("%.1f", k.second->us) << " | " << fmt("%.1f", k.second->instr_per_elem) << " | "
         << fmt("%.0f%%", 100 * k.second->issue_use) << " | " << fmt("%.1f%%", 100 * k.second->active) << " | "
         << fmt("%.2f", k.second->cycles_per_issue) << " | " << fmt("%.1f%%", k.second->occupancy) << " | " << fmt("%.0f", k.second->regs)
         << " | " << fmt("%.1f%%", k.second->sm) << " | " << fmt("%.1f%%", k.second->dram) << " |\n";
    // time ~ instructions / (issue use x active share): the three factors of SR columnwise against RTNE columnwise.
    const double f_instr = rc->instr_per_elem / sc->instr_per_elem, f_issue = sc->issue_use / rc->issue_use,
                 f_active = sc->active / rc->active;
    md << "\nWhile SM throughput exceeds DRAM throughput the kernels are issue-bound: time follows instructions executed "
       << "over the share of issue slots used while active and the share of the run the SMs are active (the last wave's "
       << "idle tail). SR adds one Philox4x32-10 call per 16 elements (10 rounds of two wide 32-bit multiplies and two "
       << "three-input XORs: about 2.5 instructions an element) and the rounding in the float's low bits: rowwise SR "
       << "executes " << fmt("%+.1f", sr_r->instr_per_elem - rr->instr_per_elem) << " instructions an element over rowwise "
       << "RTNE, columnwise SR " << fmt("%+.1f", sc->instr_per_elem - rc->instr_per_elem) << " over columnwise RTNE. Columnwise "
       << "SR against columnwise RTNE, as throughput factors: instructions " << fmt("%.3f", f_instr) << ", issue use "
       << fmt("%.3f", f_issue) << ", active share " << fmt("%.3f", f_active) << "; product " << fmt("%.3f", f_instr * f_issue * f_active)
       << " (Nsight Compute's clocks; the table above times the kernels without a profiler).\n\nWhat would close it: ";
    const double need = t.sr_min / (f_issue * f_active);  // the instruction factor that would reach the target at these rates
    if (f_instr < need)
      md << "the columnwise SR kernel at " << fmt("%.1f", rc->instr_per_elem / need) << " instructions an element or fewer at "
         << "these rates (" << fmt("%.1f", sc->instr_per_elem) << " now). Gathering a column pair (a 4-byte load and its "
         << "address a row) costs " << fmt("%+.1f", sc->instr_per_elem - sr_r->instr_per_elem) << " instructions an "
         << "element over rowwise SR, which loads 16-byte pieces of its chunks. ";
    if (f_active < 0.995)
      md << "A shorter tail: its blocks walk two row tiles each, so the last wave idles longer than RTNE's (a grid "
         << "whose blocks walked tiles until the work ran out lost more to DRAM locality: logs/col-sr-experiments.log). ";
    if (f_issue < 0.995)
      md << "A higher issue rate: more resident warps (" << fmt("%.0f", sc->regs) << " registers a thread now) without "
         << "spilling, or more independent work per warp to cover its loads (only the Philox draws run while they are in "
         << "flight). ";
    md << "\n\n";
    if (!tune_log.empty())
      md << "The columnwise SR kernel's compile-time knobs as they were swept, one rebuild per setting (blocks an SM, "
         << "which caps registers: 80 at 6, 72 at 7, 64 at 8, 48 at 10; the other fields as each sweep's header says); "
         << "the variants now live in `dev/cuda/hot_col_sr_variants.cu`, timed against the kernel in one run. SR / RTNE per shape:\n\n```\n"
         << tune_log << (tune_log.back() == '\n' ? "" : "\n") << "```\n\n";
    if (!experiments_log.empty())
      md << "Designs of the columnwise SR kernel tried on other leases, each measured against the others in the same run "
         << "(`logs/col-sr-experiments.log`; its second round found the kernel above):\n\n```\n"
         << experiments_log << (experiments_log.back() == '\n' ? "" : "\n") << "```\n\n";
  } else {
    md << " Nsight Compute logs of the four fused E2M1 kernels of one shape (tools/gpu-bench.sh) show where the time goes.\n\n";
  }
  return md.str();
}

// "### Fused kernel bandwidth and latency": one item for each of the three bars that failed.
std::string fused_kernel_account(const BenchTargets& t, bool bw, bool fs, bool uf) {
  std::ostringstream md;
  md << "### Fused kernel bandwidth and latency\n\n";
  if (bw) md << "- Fused / copy bandwidth under " << fmt("%.0f%%", 100 * t.bw_min) << ": the per-shape table shows which shapes; Nsight Compute's DRAM throughput "
             << "of the fused kernels says how far from the memory ceiling they run. More bytes in flight per SM (wider or "
             << "deeper loads) would close it where DRAM throughput is low, fewer instructions where SM throughput is high.\n";
  if (fs) md << "- Fused / standalone over " << fmt("%.2f", t.fs_max) << ": the RHT's 64 additions per 16 elements are hidden only while the kernel "
             << "waits on memory; an issue-bound fused kernel pays them. Fewer instructions an element (signs and scale folded "
             << "into the butterflies, as now) or more memory parallelism would close it.\n";
  if (uf) md << "- Unfused / fused under " << fmt("%.1f", t.uf_min) << ": the unfused path's extra traffic (a BF16 temporary written and read) is what "
             << "the fusion saves; a ratio under " << fmt("%.1f", t.uf_min) << " means the fused kernel is far from the bandwidth the unfused pair reaches.\n";
  md << "\n";
  return md.str();
}

// "### ufp4 step / bf16 step" of a dense model over the bar: its step times (r: recipe -> ms) and where the
// difference goes.
std::string dense_ufp4_account(const std::string& m, const std::map<std::string, double>& r, const BenchTargets& t) {
  std::ostringstream md;
  auto ms = [&](const char* k) { return r.count(k) ? r.at(k) : NAN; };
  md << "### ufp4 step / bf16 step, " << m << "\n\nufp4 " << fmt("%.2f", ms("ufp4")) << " ms, bf16 " << fmt("%.2f", ms("bf16")) << " ms";
  if (r.count("ufp4_rht_none")) md << "; without the RHT " << fmt("%.2f", ms("ufp4_rht_none")) << " ms";
  if (r.count("ufp4_no_sr")) md << "; without SR " << fmt("%.2f", ms("ufp4_no_sr")) << " ms";
  md << ". The quantization kernels of the GEMM operands are the difference (Nsight Compute, one step of dense-113m on the "
     << "H200, with the experiment below's forward source on: 8.5 ms more than bf16, all of it the pair kernels of dY, X "
     << "and W, the GEMMs equal; "
     << "`results/bench/logs/swiglu-pair-source-experiment.log`). X, dY and W are already read once for both of their "
     << "layouts (the pair kernel; `results/bench/logs/pair-kernel-experiment.log`), and that kernel is bound by its "
     << "instructions, not its bytes: under SR with the RHT it executes 28.3 instructions an element a layout with 71% of "
     << "its issue slots busy (Nsight Compute's per-instruction counts on a 16384 x 2048 operand), about 19 of them the "
     << "arithmetic each needed for the reference's bits (widening, four butterfly additions, the amax, the exact division, "
     << "the SR carry and sign, Philox's 40 a 16-element call), the rest addressing, parameters and control "
     << "(`results/bench/logs/pair-kernel-instruction-mix.log`); dY's pairs move 2.5 TB/s, X's 3.0. Were dense-113m's dY pairs to "
     << "execute their arithmetic alone at that issue rate, they would save 1.8 ms (that log), where 1.10 needs "
     << fmt("%.2f", ms("ufp4") - t.step_ufp4_max * ms("bf16")) << " ms here. Quantizing "
     << "in the producer does not help such a kernel: "
     << "the SwiGLU as the pair kernel's source (no BF16 tensor written or read) was slower, 67.37 against 65.52 ms "
     << "(forward alone 65.86 against 65.46), since the SwiGLU's exact exp and division joined the pair kernel's critical "
     << "path where the separate kernel ran them at memory speed (same log). What would close it: 4-bit GEMM operands "
     << "(no BF16 dequantized copies; Hopper's tensor cores take none), or a cheaper exact rounding arithmetic.\n\n";
  return md.str();
}

// "### bf16 step / PyTorch eager step" of a dense model over the eager bar.
std::string eager_account(const std::string& m, const StepTimes& s) {
  std::ostringstream md;
  md << "### bf16 step / PyTorch eager step, " << m << "\n\nOurs " << fmt("%.2f", s.bf16_ms.at(m)) << " ms, eager "
     << fmt("%.2f", s.ref_ms.at(m)) << " ms.";
  if (s.libtorch_ops_ms.count(m))
    md << " Without the fused RMSNorm, SwiGLU and loss kernels ours takes " << fmt("%.2f", s.libtorch_ops_ms.at(m)) << " ms.";
  md << " Both launch the same cuBLAS GEMMs, flash attention and fused AdamW; the rest of a step is memory-bound "
     << "elementwise work that LibTorch composes from many passes over the activations (an RMSNorm is a chain of eight "
     << "operations forward, each a pass over FP32 or BF16 activations, and their gradients backward; the loss "
     << "materializes FP32 copies of the logits over the whole vocabulary). What would close it: single-pass kernels for "
     << "those chains — "
     << (s.libtorch_ops_ms.count(m) ? "beyond RMSNorm, SwiGLU and the loss, RoPE and the residual adds.\n\n"
                                    : "RMSNorm and the loss first, then SwiGLU's gate and RoPE.\n\n");
  return md.str();
}

// "## Targets not met": for each failed bar, the measured facts behind it and what would close it.
std::string unmet_section(const BenchTargets& t, const UnmetFacts& unmet, const StepTimes& s, const std::map<std::string, NcuStats>& ncu,
                          const std::string& tune_log, const std::string& experiments_log) {
  std::vector<std::string> ref_unmet;
  for (const auto& kv : s.bf16_ms)
    if (kv.first.rfind("moe", 0) != 0 && s.ref_ms.count(kv.first) && kv.second > t.eager_max * s.ref_ms.at(kv.first)) ref_unmet.push_back(kv.first);
  if (!unmet.bw && !unmet.fs && !unmet.uf && !unmet.sr && unmet.step.empty() && ref_unmet.empty() && unmet.other.empty()) return "";
  std::ostringstream md;
  md << "## Targets not met: where the time goes and what would close it\n\n";
  if (unmet.sr) md << sr_throughput_account(t, unmet.sr_worst, ncu, tune_log, experiments_log);
  if (unmet.bw || unmet.fs || unmet.uf) md << fused_kernel_account(t, unmet.bw, unmet.fs, unmet.uf);
  for (const auto& m : unmet.step) md << dense_ufp4_account(m, s.recipe_ms.at(m), t);
  for (const auto& line : unmet.other) md << line;
  for (const auto& m : ref_unmet) md << eager_account(m, s);
  return md.str();
}

// Kernel rows by kind/grid/rounding/layout/shape, the copy's time by shape, and the shapes in file order.
struct KernelIndex {
  std::map<std::string, double> copy_us;
  std::map<std::string, const KRow*> by;
  std::vector<std::string> shapes;
};

KernelIndex index_kernels(const std::vector<KRow>& rows) {
  KernelIndex k;
  for (const auto& r : rows) {
    if (r.kind == "copy") k.copy_us[r.shape] = r.us;
    else k.by[r.kind + "/" + r.grid + "/" + r.rounding + "/" + r.layout + "/" + r.shape] = &r;
  }
  for (const auto& r : rows)
    if (r.kind == "copy") k.shapes.push_back(r.shape);
  return k;
}

// Worst cases over the large shapes.
struct KernelWorst {
  double bw = 1e9, fs = 0, uf = 1e9, sr = 1e9;
  std::string at_bw, at_fs, at_uf, at_sr;
};

// "## Figure 11: per shape": each grid, rounding and layout's standalone, fused and unfused times; fills the
// figure's bars (E2M1, RTNE), the worst cases the kernel bars judge and SR / RTNE's worst by layout.
std::string per_shape_table(const KernelIndex& k, double big, Figure& fig, KernelWorst& worst,
                            std::map<std::string, std::pair<double, std::string>>& sr_worst) {
  std::ostringstream table;
  table << "## Figure 11: per shape\n\n| shape | grid | rounding | layout | standalone µs | fused µs | unfused µs | fused TB/s | "
           "fused / copy BW | fused / standalone | unfused / fused |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
  fig.kind = Figure::Kind::kBars;
  fig.title = "Fused RHT-16 + quantize + dequantize, bandwidth as a fraction of the copy (E2M1, RTNE)";
  fig.ylabel = "fraction of copy bandwidth";
  Series frow{"rowwise", {}, {}, "histograms"}, fcol{"columnwise", {}, {}, "histograms"};
  for (const auto& sh : k.shapes) {
    const double cu = k.copy_us.at(sh);
    for (const char* grid : {"e2m1", "e1m2"})
      for (const char* rounding : {"rtne", "sr"})
        for (const char* layout : {"row", "col"}) {
          const std::string key = std::string(grid) + "/" + rounding + "/" + layout + "/" + sh;
          auto s = k.by.find("standalone/" + key), f = k.by.find("fused/" + key), u = k.by.find("unfused/" + key);
          if (s == k.by.end() || f == k.by.end() || u == k.by.end()) continue;
          const KRow &S = *s->second, &F = *f->second, &U = *u->second;
          const double bw = F.bytes / (F.us * 1e-6), frac = cu / F.us, fs = F.us / S.us, uf = U.us / F.us;
          table << "| " << sh << " | " << grid << " | " << rounding << " | " << layout << " | " << fmt("%.1f", S.us) << " | "
                << fmt("%.1f", F.us) << " | " << fmt("%.1f", U.us) << " | " << fmt("%.2f", bw * 1e-12) << " | "
                << fmt("%.0f%%", 100 * frac) << " | " << fmt("%.3f", fs) << " | " << fmt("%.2f", uf) << " |\n";
          if (std::string(grid) == "e2m1" && std::string(rounding) == "rtne") {
            if (std::string(layout) == "row") { fig.categories.push_back(sh); frow.y.push_back(frac); }
            else fcol.y.push_back(frac);
          }
          const std::string where = sh + " " + grid + " " + rounding + " " + layout;
          if (F.bytes / 2 < big) continue;  // the bars apply to inputs of >= 64 MiB (BF16 in + out: input bytes = bytes / 2)
          if (std::string(rounding) == "rtne" && frac < worst.bw) { worst.bw = frac; worst.at_bw = where; }
          if (fs > worst.fs) { worst.fs = fs; worst.at_fs = where; }
          if (uf < worst.uf) { worst.uf = uf; worst.at_uf = where; }
          if (std::string(rounding) == "sr") {
            auto rt = k.by.find("fused/" + std::string(grid) + "/rtne/" + layout + "/" + sh);
            if (rt != k.by.end()) {
              const double ratio = rt->second->us / F.us;  // throughput SR / RTNE
              if (ratio < worst.sr) { worst.sr = ratio; worst.at_sr = sh + " " + grid + " " + layout; }
              auto& w = sr_worst[layout];
              if (ratio < w.first) w = {ratio, sh + " " + grid};
            }
          }
        }
  }
  fig.series = {frow, fcol};
  return table.str();
}

// The kernel bars' rows of the Targets table (p_fs, p_uf: the paper's SM90 values); sets which failed.
void kernel_targets(const KernelWorst& worst, const BenchTargets& t, double p_fs, double p_uf, UnmetFacts& unmet,
                    std::ostringstream& targets) {
  if (worst.bw < 1e9) {
    unmet.bw = worst.bw < t.bw_min;
    unmet.fs = worst.fs > t.fs_max;
    unmet.uf = worst.uf < t.uf_min;
    unmet.sr = worst.sr < t.sr_min;
    targets << "| fused RHT-16 + quantize + dequantize, RTNE, rowwise and columnwise, >= 64 MiB | >= " << fmt("%.0f%%", 100 * t.bw_min)
            << " of copy bandwidth | worst " << fmt("%.0f%%", 100 * worst.bw) << " (" << worst.at_bw << ") | " << verdict(!unmet.bw) << " |\n";
    targets << "| fused / standalone latency, >= 64 MiB | <= " << fmt("%.2f", t.fs_max) << " (paper SM90: " << fmt("%.2f", p_fs) << ") | worst "
            << fmt("%.3f", worst.fs) << " (" << worst.at_fs << ") | " << verdict(!unmet.fs) << " |\n";
    targets << "| unfused / fused latency, >= 64 MiB | >= " << fmt("%.1f", t.uf_min) << " (paper SM90: " << fmt("%.2f", p_uf) << ") | worst "
            << fmt("%.2f", worst.uf) << " (" << worst.at_uf << ") | " << verdict(!unmet.uf) << " |\n";
    targets << "| SR throughput / RTNE throughput (fused), >= 64 MiB | >= " << fmt("%.0f%%", 100 * t.sr_min) << " | worst "
            << fmt("%.1f%%", 100 * worst.sr) << " (" << worst.at_sr << ") | " << verdict(!unmet.sr) << " |\n";
  }
}

// The copy's bandwidth per shape, the ceiling the fused kernels are measured against.
std::string copy_bandwidth_line(const std::vector<KRow>& rows, const std::vector<std::string>& shapes) {
  std::ostringstream copies;
  copies << "\nDevice-to-device copy (the bandwidth ceiling, same bytes):";
  for (const auto& sh : shapes) {
    const auto it = std::find_if(rows.begin(), rows.end(), [&](const KRow& r) { return r.kind == "copy" && r.shape == sh; });
    copies << " " << sh << " " << fmt("%.2f", it->bytes / (it->us * 1e-6) * 1e-12) << " TB/s;";
  }
  return copies.str();
}

// The dense pair kernel (a linear's operand: both layouts from one read) against the fused rowwise and
// columnwise kernels, each reading the tensor.
std::string pair_kernel_section(const std::vector<KRow>& rows, const KernelIndex& k) {
  std::ostringstream md;
  std::ostringstream pairs;
  for (const auto& r : rows) {
    if (r.kind != "pair") continue;
    auto us_of = [&](const std::string& key) { auto f = k.by.find(key); return f == k.by.end() ? NAN : f->second->us; };
    const double two = us_of("fused/" + r.grid + "/" + r.rounding + "/row/" + r.shape) + us_of("fused/" + r.grid + "/" + r.rounding + "/col/" + r.shape);
    pairs << "| " << r.shape << " | " << r.grid << " | " << r.rounding << " | " << fmt("%.1f", r.us) << " | " << fmt("%.1f", two) << " | "
          << fmt("%.2f", r.us / two) << " | " << fmt("%.2f", r.bytes / (r.us * 1e-6) * 1e-12) << " |\n";
  }
  md << table_section("## Pair kernel (a dense linear's operand)",
                      "Both layouts of one BF16 operand from one read, the RHT on both (`kernels/quantize/quantize_pair.h`: X for FPROP "
                      "and WGRAD, dY for DGRAD and WGRAD), against the `fused` rowwise and columnwise kernels together (each reads the "
                      "tensor). TB/s counts one read and two writes.",
                      {"shape", "grid", "rounding", "pair µs", "fused row + col µs", "pair / (row + col)", "pair TB/s"}, pairs.str());
  return md.str();
}

// "## Segmented quantizer": the MoE experts' operands quantized a segment each in one launch.
std::string segmented_section(const std::vector<KRow>& rows, const KernelIndex& k) {
  std::ostringstream md;
  std::ostringstream seg;
  for (const auto& r : rows) {
    if (r.kind.rfind("segments", 0) != 0) continue;
    // A pair row (both layouts from one read) against the segmented rowwise and columnwise rows together.
    const bool pair = r.layout == "pair";
    auto us_of = [&](const std::string& key) { auto f = k.by.find(key); return f == k.by.end() ? NAN : f->second->us; };
    const std::string seg_key = r.kind + "/" + r.grid + "/" + r.rounding + "/";
    const double fused_us = pair ? us_of(seg_key + "row/" + r.shape) + us_of(seg_key + "col/" + r.shape)
                                 : us_of("fused/" + r.grid + "/" + r.rounding + "/" + r.layout + "/" + r.shape);
    const double cu = k.copy_us.count(r.shape) ? k.copy_us.at(r.shape) : NAN;
    seg << "| " << r.shape << " | " << r.kind.substr(8) << " | " << r.grid << " | " << r.rounding << " | " << r.layout << " | "
        << fmt("%.1f", r.us) << " | " << fmt("%.1f", fused_us) << " | " << fmt("%.2f", r.us / fused_us) << " | "
        << fmt("%.2f", r.bytes / (r.us * 1e-6) * 1e-12) << " | " << fmt("%.0f%%", 100 * cu / r.us) << " |\n";
  }
  const std::string pair_note = std::any_of(rows.begin(), rows.end(), [](const KRow& r) { return r.layout == "pair"; })
                                    ? " Pair: both layouts from one read (the MoE layer's X and dY), its `fused µs` the segmented rowwise and "
                                      "columnwise rows together."
                                    : "";
  md << table_section("## Segmented quantizer (the MoE experts' operands)",
                      "One launch quantizes G equal expert segments of a routed activation, each with its own SR seed and RHT signs "
                      "(`kernels/moe/quantize_segments.h`; RHT-16 fused), beside the `fused` kernel on the same whole tensor with one set "
                      "of keys. Columnwise: quantized along the tokens of each segment, written token-major (WGRAD's layout)." + pair_note,
                      {"shape", "segments", "grid", "rounding", "layout", "segmented µs", "fused µs", "segmented / fused", "segmented TB/s",
                       "/ copy BW"},
                      seg.str());
  return md.str();
}

// The kernel sections from kernels.h5: Figure 11 per shape (the Targets table goes before it), the copy's
// bandwidth, the paper's values, the pair kernel and the segmented quantizer; and the kernel bars.
void kernel_sections(const std::string& kpath, const toml::table& paper, const BenchTargets& t, const std::string& figures,
                     BenchOutput& out, UnmetFacts& unmet) {
  const double big = paper["large_bytes"].value_or(64.0 * 1024 * 1024);
  const auto rows = load_kernels(kpath);
  out.sources.push_back(provenance_line(kpath));
  const KernelIndex k = index_kernels(rows);
  KernelWorst worst;
  Figure fig;
  const std::string table = per_shape_table(k, big, fig, worst, unmet.sr_worst);
  const double p_fs = paper["fused_over_standalone_sm90"].value_or(NAN), p_uf = paper["unfused_over_fused_sm90"].value_or(NAN);
  kernel_targets(worst, t, p_fs, p_uf, unmet, out.targets);
  out.md << "@@TARGETS@@" << table << copy_bandwidth_line(rows, k.shapes) << "\n\n" << figure_markdown(figures, "figure11_bandwidth", fig);
  out.md << "Paper (Figure 11, shapes not listed): fused / standalone " << fmt("%.2f", p_fs) << " on SM90, "
         << fmt("%.2f", paper["fused_over_standalone_sm100"].value_or(NAN)) << " on SM100; unfused / fused " << fmt("%.2f", p_uf)
         << " on SM90, " << fmt("%.2f", paper["unfused_over_fused_sm100"].value_or(NAN)) << " on SM100.\n\n";
  out.md << pair_kernel_section(rows, k);
  out.md << segmented_section(rows, k);
}

// step.h5, then any step-<part>.h5 beside it (models benchmarked by another command, e.g. when one
// command would outlast a GPU lease); each model's rows, and so each ratio, come from one command.
std::vector<SRow> load_step_files(const std::string& dir, const std::string& spath, std::vector<std::string>& sources) {
  std::vector<std::string> step_files = {spath}, parts;
  walk_files(dir, ".h5", parts);
  std::sort(parts.begin(), parts.end());
  for (const auto& f : parts)
    if (f.rfind(dir + "/step-", 0) == 0 && f.find('/', dir.size() + 1) == std::string::npos) step_files.push_back(f);
  std::vector<SRow> rows;
  for (const auto& f : step_files) {
    const auto part = load_steps(f);
    rows.insert(rows.end(), part.begin(), part.end());
    sources.push_back(provenance_line(f));
  }
  return rows;
}

// Our rows' and the PyTorch peers' step times by model.
StepTimes index_steps(const std::vector<SRow>& rows) {
  StepTimes s;
  for (const auto& r : rows) {
    if (r.impl == "ufp4") s.recipe_ms[r.model][r.recipe] = r.step_ms, s.recipe_sd[r.model][r.recipe] = r.step_ms_sd;
    if (r.impl == "ufp4-libtorch-ops" && r.recipe == "bf16") s.libtorch_ops_ms[r.model] = r.step_ms;
    if (r.impl == "ufp4-nondeterministic") s.nondet_ms[r.model][r.recipe] = r.step_ms, s.nondet_sd[r.model][r.recipe] = r.step_ms_sd;
    if (r.impl == "ufp4-uncaptured") s.uncaptured_ms[r.model][r.recipe] = r.step_ms;
    if (r.impl == "ufp4" && r.recipe == "bf16") s.bf16_ms[r.model] = r.step_ms, s.bf16_sd[r.model] = r.step_ms_sd;
    // The bars name the H200: a model measured on another GPU says which in its bar rows (CPU rows test the plumbing).
    if (r.impl == "ufp4" && r.device != "cpu" && !r.device.empty() && r.device.find("H200") == std::string::npos)
      s.device_note[r.model] = " (on an " + r.device + ")";
    if (r.impl.rfind("pytorch-eager", 0) == 0) s.ref_ms[r.model] = s.ref_ms.count(r.model) ? std::min(s.ref_ms[r.model], r.step_ms) : r.step_ms;
    if (r.impl == "pytorch-compiled-fused") s.compiled_plain_ms[r.model] = r.step_ms;
    const bool det_peer = r.impl.find("-deterministic-") != std::string::npos;
    if (r.impl.rfind("pytorch-compiled", 0) == 0 && !det_peer)  // the fastest compiled mode
      if (!s.compiled_ms.count(r.model) || r.step_ms < s.compiled_ms[r.model]) s.compiled_ms[r.model] = r.step_ms, s.compiled_sd[r.model] = r.step_ms_sd;
    if (r.impl.rfind("pytorch-fakequant-compiled", 0) == 0 &&
        (!s.fakequant_ms[r.model].count(r.recipe) || r.step_ms < s.fakequant_ms[r.model][r.recipe]))
      s.fakequant_ms[r.model][r.recipe] = r.step_ms, s.fakequant_sd[r.model][r.recipe] = r.step_ms_sd;
    if (r.impl.rfind("pytorch-compiled", 0) == 0 && det_peer)  // the fastest compiled mode in deterministic mode
      if (!s.det_compiled_ms.count(r.model) || r.step_ms < s.det_compiled_ms[r.model]) s.det_compiled_ms[r.model] = r.step_ms;
  }
  return s;
}

// "## Training step": what the rows time, then a row a step (the MoE layer and attention rows have tables of their own).
std::string step_table(const std::vector<SRow>& rows, StepTimes& s, const std::string& spath) {
  std::ostringstream md;
  md << "## Training step\n\nForward + backward + gradient clipping + AdamW on FP32 master weights, BF16 activations, "
     << "fixed random tokens; median of the timed steps after warm-up (CUDA events). MFU: model FLOPs per token (ours, "
     << "attention included) x tokens/s over the " << fmt("%.1f", read_h5_double_attr(spath, "mfu_peak_flops") * 1e-12)
     << " TFLOP/s dense BF16 peak (the benchmark file's `mfu_peak_flops`). The PyTorch rows run "
     << "`harness/bench/reference_step.py`: the same BF16 model in plain PyTorch (autocast), eager (fused or foreach AdamW) or "
     << "under `torch.compile` (fused AdamW; `pytorch-compiled`: the default mode, `pytorch-compiled-cudagraphs`: reduce-overhead, "
     << "which replays CUDA graphs; `-deterministic-` in the name: in deterministic mode, as our step runs, the like-for-like peer); grouped-query attention through SDPA's `enable_gqa`; its MoE sorts the tokens by expert and runs the experts as `torch._grouped_mm`. "
     << "`pytorch-fakequant` rows: the same model with a 4-bit recipe written as a researcher would, quantize-dequantize in torch ops "
     << "(1 x 16 blocks, FP32 max scales, RHT-16 as a 16 x 16 matmul, SR with `torch.rand`, an autograd Function for the three GEMMs "
     << "of every linear; the routed experts' WGRAD expert by expert), eager or compiled. "
     << "`ufp4-libtorch-ops`: our step with RMSNorm, SwiGLU and the loss as LibTorch compositions instead of the fused kernels "
     << "(`models/fused_ops.h`), what the fusion buys. `ufp4` rows run in deterministic mode, as training does "
     << "(`harness/train/determinism.h`), and replay the step as a CUDA graph where the model allows one, as training does "
     << "(`harness/train/step_graph.h`; forward, backward and clipping captured, AdamW after the replay); `ufp4-nondeterministic` rows "
     << "time the same step without deterministic mode, `ufp4-uncaptured` rows without the graph (kernel by kernel), in the same process; "
     << "`ufp4-per-layer-weights` (the first model's ufp4 recipe) with each linear quantizing its own weight instead of one launch "
     << "for every weight's two operands at the start of the forward (`models/weight_operands.h`): what that launch buys.\n\n"
     << "| model | implementation | recipe | batch x seq | step ms (sd) | tokens/s | MFU | peak GB | vs own bf16 |\n"
     << "|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    if (r.impl == "ufp4-moe-layer" || r.impl.rfind("attention", 0) == 0) continue;  // their own tables below
    const double base = s.bf16_ms.count(r.model) ? s.bf16_ms[r.model] : NAN;
    md << "| " << r.model << " | " << r.impl << " | " << r.recipe << " | " << r.batch << " x " << r.seq_len << " | " << fmt("%.2f", r.step_ms)
       << " (" << fmt("%.2f", r.step_ms_sd) << ") | " << fmt("%.0f", r.tokens_per_s) << " | " << mfu_text(r.mfu) << " | "
       << fmt("%.1f", r.peak_memory_gb) << " | " << fmt("%.3f", r.step_ms / base) << " |\n";
  }
  for (const auto& r : rows)
    if (!r.note.empty()) { md << "\nReference: " << r.note << ".\n"; break; }
  md << "\n";
  return md.str();
}

// What the CUDA graph buys: the same step replayed and launched kernel by kernel.
std::string graph_gain_section(StepTimes& s) {
  std::ostringstream md;
  std::ostringstream graph_gain;
  for (const auto& m : s.uncaptured_ms)
    for (const auto& rc : m.second)
      if (s.recipe_ms[m.first].count(rc.first)) {
        const double replayed = s.recipe_ms[m.first][rc.first];
        graph_gain << "| " << m.first << " | " << rc.first << " | " << fmt("%.2f", replayed) << " | " << fmt("%.2f", rc.second) << " | "
                   << fmt("%.2f", rc.second - replayed) << " | " << fmt("%.3f", replayed / rc.second) << " |\n";
      }
  md << table_section("### What the CUDA graph buys",
                      "Our step replayed as a CUDA graph (the `ufp4` rows) against the same step launched kernel by kernel "
                      "(`ufp4-uncaptured`), in the same command. The replay gives the same bits (the [cuda] test \"a CUDA-graph step "
                      "equals the uncaptured step\"); what it saves is the host's launch time, which bounds the small models' steps.",
                      {"model", "recipe", "replayed ms", "uncaptured ms", "saved ms", "replayed / uncaptured"}, graph_gain.str());
  return md.str();
}

// Leave-one-out: our BF16 step with one fused kernel (or all) replaced by LibTorch's composition.
std::string leave_one_out_section(const std::vector<SRow>& rows, StepTimes& s) {
  std::ostringstream md;
  std::ostringstream loo;
  for (const auto& r : rows)
    if (r.recipe == "bf16" && s.bf16_ms.count(r.model) && (r.impl == "ufp4-libtorch-ops" || r.impl.rfind("ufp4-without-fused-", 0) == 0)) {
      const std::string what = r.impl == "ufp4-libtorch-ops" ? "all" : r.impl.substr(std::string("ufp4-without-fused-").size());
      loo << "| " << r.model << " | " << what << " | " << fmt("%.2f", r.step_ms) << " | " << fmt("%.2f", s.bf16_ms[r.model]) << " | "
          << fmt("%.2f", r.step_ms - s.bf16_ms[r.model]) << " |\n";
    }
  md << table_section("### What each fused kernel buys",
                      "Our BF16 step (deterministic) with one fused kernel of `models/fused_ops.h` replaced by LibTorch's composition "
                      "of the same maths, or all of them, against the step with all of them, in the same command: the difference is "
                      "what that kernel saves a step.",
                      {"model", "fused kernel left out", "step ms without it", "with all", "saved ms"}, loo.str());
  return md.str();
}

// "### One MoE layer at paper scale": the ufp4-moe-layer rows.
std::string moe_layer_section(const std::vector<SRow>& rows) {
  std::ostringstream md;
  // Each ratio against the bf16 row of the same command (file): the files may come from other GPUs.
  std::map<std::string, double> layer_bf16;
  std::ostringstream layers;
  for (const auto& r : rows)
    if (r.impl == "ufp4-moe-layer" && r.recipe == "bf16") layer_bf16[r.source + "|" + r.model] = r.step_ms;
  for (const auto& r : rows)
    if (r.impl == "ufp4-moe-layer") {
      const std::string key = r.source + "|" + r.model;
      layers << "| " << r.model << " | " << r.recipe << " | " << r.seq_len << " | " << fmt("%.2f", r.step_ms) << " (" << fmt("%.2f", r.step_ms_sd) << ") | "
             << fmt("%.0f", r.tokens_per_s) << " | " << mfu_text(r.mfu) << " | " << fmt("%.1f", r.peak_memory_gb) << " | "
             << fmt("%.3f", layer_bf16.count(key) ? r.step_ms / layer_bf16[key] : NAN) << " | `" << r.source << "`, " << r.device << " |\n";
    }
  md << table_section("### One MoE layer at paper scale",
                      "Forward + backward of one routed MoE layer (FP32 router, top-k routing, grouped experts, shared experts, aux "
                      "loss) on random BF16 activations, no optimizer, deterministic mode; median of the timed passes after warm-up "
                      "(CUDA events). MFU counts active parameters: 6 x (router + (top-k + shared) x 3 x d x expert hidden) FLOPs a "
                      "token, over the same peak; each file's rows from one command, against that command's bf16 row.",
                      {"model", "recipe", "tokens", "ms (sd)", "tokens/s", "MFU (active)", "peak GB", "vs bf16", "from"}, layers.str());
  return md.str();
}

// Where deterministic mode's cost goes: the attention rows beside the step rows.
std::string deterministic_cost_section(const std::vector<SRow>& rows, StepTimes& s) {
  std::ostringstream md;
  std::map<std::string, std::pair<double, double>> attention_ms;  // model -> (deterministic, not)
  for (const auto& r : rows) {
    if (r.impl == "attention") attention_ms[r.model].first = r.step_ms;
    if (r.impl == "attention-nondeterministic") attention_ms[r.model].second = r.step_ms;
  }
  std::ostringstream det_cost;
  for (const auto& kv : attention_ms) {
    if (!s.bf16_ms.count(kv.first) || !s.nondet_ms[kv.first].count("bf16")) continue;
    const double layers = static_cast<double>(model_config(kv.first).n_layers);
    const double step_delta = s.bf16_ms[kv.first] - s.nondet_ms[kv.first]["bf16"];
    const double attention_delta = layers * (kv.second.first - kv.second.second);
    det_cost << "| " << kv.first << " | " << fmt("%.2f", s.bf16_ms[kv.first]) << " | " << fmt("%.2f", s.nondet_ms[kv.first]["bf16"]) << " | "
             << fmt("%.2f", step_delta) << " | " << fmt("%.3f", kv.second.first) << " | " << fmt("%.3f", kv.second.second) << " | "
             << fmt("%.0f", layers) << " | " << fmt("%.2f", attention_delta) << " |\n";
  }
  md << table_section("### What deterministic mode costs, and where",
                      "The BF16 step with and without deterministic mode, and the model's attention alone (`grouped_causal_attention`, "
                      "`models/layers.h`: forward + backward at the step's batch and sequence), with and without it. Deterministic mode "
                      "leaves new memory unfilled (`harness/train/determinism.h`). In it attention runs cuDNN's fused forward with our "
                      "deterministic backward (`models/deterministic_attention.h`, `kernels/attention/attention_backward.h`: warpgroup "
                      "MMAs on Hopper, dQ's terms summed in a fixed order; LibTorch refuses cuDNN's fused backward, which accumulates "
                      "dQ with atomics): the attention rows show what that costs a layer, timed alone; `attention-flash-backward` and "
                      "`ufp4-flash-attention-backward` are the same with flash's deterministic backward. A step's two rows differ by "
                      "less where other work overlaps the attention, and by noise where the difference is within the steps' spread (sd "
                      "in the step table).",
                      {"model", "bf16 step ms, deterministic", "not", "difference", "attention ms, deterministic", "not", "layers", "layers x attention difference"}, det_cost.str());
  return md.str();
}

// The attention backends' probe, where its log is beside the results.
std::string attention_backends_log(const std::string& dir, std::vector<std::string>& sources) {
  std::ostringstream md;
  if (file_exists(dir + "/logs/attention-backends.log")) {
    // The probe of every SDPA backend (dev/attention_backends.py): which have a deterministic backward, at what cost.
    sources.push_back(rel(dir + "/logs/attention-backends.log"));
    md << "Every LibTorch attention backend at these shapes (`dev/attention_backends.py`; forward + backward, and how many "
       << "distinct results 20 repeated backwards gave):\n\n```\n" << read_text_file(dir + "/logs/attention-backends.log") << "```\n\n";
  }
  return md.str();
}

// The MoE ufp4 / bf16 bar's paragraph (not met, or met within one sd of the bar): how the ratio moved,
// where the difference goes and what would close it or give it margin.
std::string moe_ufp4_account(const std::string& model, double ufp4_ms, double bf16, double ratio, double sd, double bar) {
  return "### ufp4 step / bf16 step, " + model + (ratio > bar ? "" : ": met, within one sd of the bar") +
         "\n\nufp4 " + fmt("%.2f", ufp4_ms) + " ms, bf16 " + fmt("%.2f", bf16) + " ms: " + fmt("%.3f", ratio) +
         ", sd " + fmt("%.3f", sd) + " from the two rows' spread (the same command at 7f01b2c gave 1.207, at "
         "8f04c3a 1.213; the segmented pair kernel's change of 11c4863 came between; at 11c4863 it gave 1.196, "
         "ufp4 40.85 and bf16 34.16 ms, and two repeats 1.194 and 1.206, "
         "`results/bench/logs/bench-step-moe-repeats-11c4863.log`; at 1edb74d cuDNN's forward in deterministic "
         "attention made both steps faster by the same 1.1 to 1.2 ms, which raises the ratio: the difference "
         "between the two steps, the quantizers' work, is 6.8 ms as it was 6.7). The experts' operands are quantized for all experts at once "
         "(the segmented kernels, `kernels/moe/quantize_segments.h`) and their GEMMs run grouped, as the BF16 "
         "ones do; the difference is the quantizers' work. Each routed activation (X, dY) is read once for both "
         "of its operands (the segmented pair kernel: 16 x 128 tiles of WGRAD's padded layout, read "
         "through its row map, rounded rowwise and columnwise, eight tiles a block with the next tile "
         "copied in while the current one is rounded: on the H100, 45.75 ms at 295ba21 with one tile a block, 44.49 ms "
         "at 9bfb839, `results/bench/step-moe.h5`'s history). Nsight Compute finds the stochastically "
         "rounded pair bound by its instructions once its loads overlap (75% of issue slots busy), and each "
         "operand is still written as BF16 (2 bytes an element: Hopper's GEMMs take no 4-bit operands). "
         "Nsight Compute on the H200 (one step each, `results/bench/logs/ncu-step-moe-81m-h200.txt`): "
         "the segmented pairs are 3.7 ms of the 6.6 ms difference, the dense pairs (attention, the shared "
         "expert, the first layer) 2.6 ms, the experts' weights 0.3 ms. Quantizing in the producing "
         "kernel does not help a kernel bound by its instructions (the dense SwiGLU tried as the pair "
         "kernel's source was slower: `results/bench/logs/swiglu-pair-source-experiment.log`). On the H200 "
         "the pair kernel keeps 81% of its issue slots busy under SR; of the 1240 instructions a warp "
         "spends on a tile (each thread's rowwise and columnwise chunk) about 700 are the chunks' "
         "arithmetic, the rest addressing, the operands' keys, Philox's round keys and control "
         "(Nsight Compute's per-instruction counts). Four chunks a thread instead of two (two tiles at "
         "a time, two warps a tile) cut them by 6 to 7% but held more state (fewer resident blocks under "
         "SR, spills under RTNE) and was no faster; neither is a different number of tiles a block "
         "(`results/bench/logs/segments-pair-tile-pairs-experiment.log`). Reading the SR offsets once a block, "
         "storing a full tile's columnwise outputs without selects and forming Philox's products as one "
         "multiply each made it 5% faster under SR (`results/bench/logs/segments-pair-micro-ab.log`). " +
         (ratio > bar ? "What would close it" : "What would give it margin") + ": a cheaper "
         "exact rounding arithmetic, or 4-bit GEMM operands.\n\n";
}

// The ufp4 / bf16 bar of one model: a dense model over it goes to the "not met" section by name, an MoE
// model over it or within one sd of it with its paragraph.
void ufp4_bar(const std::vector<SRow>& rows, const std::string& model, double bf16, bool moe, const BenchTargets& t, StepTimes& s,
              std::ostringstream& targets, UnmetFacts& unmet) {
  for (const auto& r : rows)
    if (r.model == model && r.impl == "ufp4" && r.recipe == "ufp4") {
      const double ratio = r.step_ms / bf16, bar = moe ? t.moe_ufp4_max : t.step_ufp4_max;
      // The ratio's spread from the two rows' (sd of the timed steps, the rows independent).
      const double sd = ratio_sd(r.step_ms, r.step_ms_sd, bf16, s.bf16_sd[model]);
      const bool close = std::fabs(ratio - bar) <= sd;
      targets << "| ufp4 step / bf16 step, " << model << s.device_note[model] << " | <= " << fmt("%.2f", bar) << " | " << ratio_cells(ratio, sd, bar) << " |\n";
      if (!moe && ratio > bar) unmet.step.push_back(model);
      if (moe && (ratio > bar || close))
        unmet.other.push_back(moe_ufp4_account(model, r.step_ms, bf16, ratio, sd, bar));
    }
}

double flash_backward_ms(const std::vector<SRow>& rows, const std::string& model) {
  double flash_ms = 0;  // the BF16 step with flash's deterministic attention backward, where timed
  for (const auto& r : rows)
    if (r.model == model && r.impl == "ufp4-flash-attention-backward" && r.recipe == "bf16") flash_ms = r.step_ms;
  return flash_ms;
}

// The deterministic / non-deterministic bars of one model, a recipe each (dense models judged, MoE reported).
void deterministic_bars(const std::string& model, bool moe, double flash_ms, const BenchTargets& t, StepTimes& s,
                        std::ostringstream& targets, UnmetFacts& unmet) {
  for (const auto& nd : s.nondet_ms[model]) {
    const double det = s.recipe_ms[model][nd.first], ratio = det / nd.second;
    const double sd = ratio_sd(det, s.recipe_sd[model][nd.first], nd.second, s.nondet_sd[model][nd.first]);
    targets << "| deterministic / non-deterministic step, " << model << ", " << nd.first << s.device_note[model] << " | <= " << fmt("%.2f", t.det_max) << " | "
            << (model.rfind("dense", 0) == 0 ? ratio_cells(ratio, sd, t.det_max) : fmt("%.3f", ratio) + " (sd " + fmt("%.3f", sd) + ") | (MoE: reported)")
            << " |\n";
    if (!moe && ratio > t.det_max)
      unmet.other.push_back("### deterministic / non-deterministic step, " + model + ", " + nd.first + "\n\nOurs " + fmt("%.2f", det) +
                            " ms, " + fmt("%.2f", nd.second) + " ms without deterministic mode. " +
                            deterministic_attention_account(model, det, nd.first == "bf16" ? flash_ms : 0.0, det - t.det_max * nd.second));
  }
}

// The bf16 / PyTorch eager bar of one model (a dense model over it: the "not met" section finds it itself).
void eager_bar(const std::string& model, double bf16, bool moe, const BenchTargets& t, StepTimes& s, std::ostringstream& targets,
               UnmetFacts& unmet) {
  if (s.ref_ms.count(model)) {
    const double ratio = bf16 / s.ref_ms[model], bar = moe ? t.moe_eager_max : t.eager_max;
    targets << "| bf16 step / PyTorch eager step (faster optimizer variant), " << model << s.device_note[model] << " | <= " << fmt("%.1f", bar) << " | "
            << fmt("%.3f", ratio) << " | " << verdict(ratio <= bar) << " |\n";
    if (moe && ratio > bar)
      unmet.other.push_back("### bf16 step / PyTorch eager step, " + model + "\n\nOurs " + fmt("%.2f", bf16) + " ms, eager " +
                          fmt("%.2f", s.ref_ms[model]) + " ms.\n\n");
  }
}

// A dense model's bf16 / PyTorch compiled paragraph: the times beside the peer's, and deterministic attention's share.
std::string dense_compiled_account(const std::string& model, double bf16, double bar, double flash_ms, StepTimes& s) {
  std::string text = "### bf16 step / PyTorch compiled step, " + model + "\n\nOurs " + fmt("%.2f", bf16) + " ms";
  if (s.nondet_ms[model].count("bf16")) text += " (" + fmt("%.2f", s.nondet_ms[model]["bf16"]) + " ms without deterministic mode)";
  text += ", the fastest compiled mode " + fmt("%.2f", s.compiled_ms[model]) + " ms";
  if (s.compiled_plain_ms.count(model)) text += " (" + fmt("%.2f", s.compiled_plain_ms[model]) + " ms without CUDA graphs)";
  text += ". The step is replayed as a CUDA graph (its launches cost the host nothing: the table of what the graph buys); "
          "what remains is kernel time. ";
  const bool nondet_faster = s.nondet_ms[model].count("bf16") && s.nondet_ms[model]["bf16"] <= s.compiled_ms[model];
  text += nondet_faster ? "Without deterministic mode our step is the faster one, so the gap is " : "Part of the gap is ";
  text += "deterministic attention's backward, against a peer that runs without determinism";
  if (s.det_compiled_ms.count(model))
    text += std::string(": the same peer in deterministic mode takes ") + fmt("%.2f", s.det_compiled_ms[model]) + " ms, " +
            (bf16 <= s.det_compiled_ms[model] ? "slower" : "faster") + " than our step (the reported row above)";
  text += ". " + deterministic_attention_account(model, bf16, flash_ms, bf16 - bar * s.compiled_ms[model]);
  return text;
}

// An MoE model's bf16 / PyTorch compiled paragraph: the routing's LibTorch operations and the fused combine.
std::string moe_compiled_account(const std::vector<SRow>& rows, const std::string& model, double bf16, StepTimes& s) {
  const bool combine_timed = std::any_of(rows.begin(), rows.end(), [&](const auto& r) {
    return r.model == model && r.impl == "ufp4-without-fused-moe-combine";
  });
  return "### bf16 step / PyTorch compiled step, " + model + "\n\nOurs " + fmt("%.2f", bf16) +
           " ms, compiled " + fmt("%.2f", s.compiled_ms[model]) + " ms" +
           (s.det_compiled_ms.count(model)
                ? std::string(" (in deterministic mode, as ours runs, ") + fmt("%.2f", s.det_compiled_ms[model]) + " ms; ours " +
                      (s.nondet_ms[model].count("bf16") ? "without it " + fmt("%.2f", s.nondet_ms[model]["bf16"]) + " ms" : "") + ")"
                : std::string()) +
           ". Besides deterministic attention (the "
           "attention rows below), Nsight Compute's per-kernel times of one BF16 step (logs/ncu-step-moe-81m.txt) "
           "show the routing's LibTorch operations: the combine's and the dispatch's BF16 products, sums, gathers, "
           "zero fills and copies, and the sorts, where the compiler fuses what it can. The fused combine "
           "(`models/fused_ops.h`: one kernel a direction for the combine, one for the dispatch's backward, the "
           "composition's bits) replaces the first group; " +
           (combine_timed ? std::string("the leave-one-out row `moe-combine` times what it buys.\n\n")
                          : std::string("these rows were measured before it existed (no `moe-combine` leave-one-out row).\n\n"));
}

// The bf16 / PyTorch compiled bar of one model, with the reported rows beside it (without deterministic mode,
// and against the peer in deterministic mode).
void compiled_bars(const std::vector<SRow>& rows, const std::string& model, double bf16, bool moe, double flash_ms, const BenchTargets& t,
                   StepTimes& s, std::ostringstream& targets, UnmetFacts& unmet) {
  if (s.compiled_ms.count(model)) {
    const double ratio = bf16 / s.compiled_ms[model], bar = moe ? t.moe_compiled_max : t.compiled_max;
    const double sd = ratio_sd(bf16, s.bf16_sd[model], s.compiled_ms[model], s.compiled_sd[model]);
    targets << "| bf16 step / PyTorch compiled step (fastest mode), " << model << s.device_note[model] << " | <= " << fmt("%.1f", bar) << " | "
            << ratio_cells(ratio, sd, bar) << " |\n";
    if (s.nondet_ms[model].count("bf16"))
      targets << "| bf16 step, non-deterministic / PyTorch compiled step (fastest mode), " << model << s.device_note[model] << " | - | "
              << fmt("%.3f", s.nondet_ms[model]["bf16"] / s.compiled_ms[model]) << " | (reported) |\n";
    if (s.det_compiled_ms.count(model))  // like for like: both in deterministic mode
      targets << "| bf16 step / PyTorch compiled step in deterministic mode (fastest mode), " << model << s.device_note[model] << " | - | "
              << fmt("%.3f", bf16 / s.det_compiled_ms[model]) << " | (reported) |\n";
    if (!moe && ratio > bar) unmet.other.push_back(dense_compiled_account(model, bf16, bar, flash_ms, s));
    if (moe && ratio > t.moe_compiled_max) unmet.other.push_back(moe_compiled_account(rows, model, bf16, s));
  }
}

// Our 4-bit steps against the same recipe written as plain fake quantization under torch.compile
// (reference_step.py --recipe): the ufp4 bar for dense models, the e2m1_ref and MoE ratios reported.
void fakequant_bars(const std::string& model, bool moe, const BenchTargets& t, StepTimes& s, std::ostringstream& targets) {
  for (const auto& [recipe, peer] : s.fakequant_ms[model]) {
    if (!s.recipe_ms[model].count(recipe)) continue;
    const double ours = s.recipe_ms[model][recipe], ratio = ours / peer;
    const double sd = ratio_sd(ours, s.recipe_sd[model][recipe], peer, s.fakequant_sd[model][recipe]);
    const bool judged = recipe == "ufp4" && !moe;
    targets << "| " << recipe << " step / PyTorch fake-quant " << recipe << " step, compiled, " << model << s.device_note[model] << " | "
            << (judged ? "<= " + fmt("%.2f", t.fakequant_max) : std::string("-")) << " | "
            << (judged ? ratio_cells(ratio, sd, t.fakequant_max) : fmt("%.3f", ratio) + " (sd " + fmt("%.3f", sd) + ") | (reported)") << " |\n";
  }
}

// The step bars of the Targets table, model by model, and what the "not met" section says of those that fail.
void step_targets(const std::vector<SRow>& rows, const BenchTargets& t, StepTimes& s, std::ostringstream& targets, UnmetFacts& unmet) {
  for (const auto& kv : s.bf16_ms) {
    const std::string& model = kv.first;
    const double bf16 = kv.second;
    const bool moe = model.rfind("moe", 0) == 0;
    ufp4_bar(rows, model, bf16, moe, t, s, targets, unmet);
    const double flash_ms = flash_backward_ms(rows, model);
    deterministic_bars(model, moe, flash_ms, t, s, targets, unmet);
    eager_bar(model, bf16, moe, t, s, targets, unmet);
    compiled_bars(rows, model, bf16, moe, flash_ms, t, s, targets, unmet);
    fakequant_bars(model, moe, t, s, targets);
  }
}

// The step sections from step.h5 and its parts: the step table, what the graph, each fused kernel and
// deterministic mode cost, the MoE layer; and the step bars.
StepTimes step_sections(const std::string& dir, const std::string& spath, const std::set<std::string>& fakequant_models,
                        const BenchTargets& t, BenchOutput& out, UnmetFacts& unmet) {
  const std::vector<SRow> rows = load_step_files(dir, spath, out.sources);
  StepTimes s = index_steps(rows);
  for (const auto& m : fakequant_models) s.fakequant_ms.erase(m);  // judged from fakequant/ (fakequant_sections)
  out.md << step_table(rows, s, spath);
  out.md << graph_gain_section(s);
  out.md << leave_one_out_section(rows, s);
  out.md << moe_layer_section(rows);
  out.md << deterministic_cost_section(rows, s);
  out.md << attention_backends_log(dir, out.sources);
  step_targets(rows, t, s, out.targets, unmet);
  return s;
}

// A model's fastest row of an implementation family (name prefix) for one recipe, or NAN.
double fastest_row_ms(const std::vector<SRow>& rows, const std::string& model, const std::string& prefix, const std::string& recipe) {
  double ms = NAN;
  for (const auto& r : rows)
    if (r.model == model && r.recipe == recipe && r.impl.rfind(prefix, 0) == 0 && std::isfinite(r.step_ms) && !(r.step_ms >= ms)) ms = r.step_ms;
  return ms;
}

std::string ms_cell(double v, const char* f = "%.2f") { return std::isfinite(v) ? fmt(f, v) : "-"; }

// The fake-quant peer's commands (fakequant/*.h5 beside the step files, one command a file, in name order) and,
// per model, the one that judges its bar: the latest by its time of measurement.
struct FakequantFiles {
  std::vector<std::string> files;
  std::vector<std::vector<SRow>> rows;         // each file's rows, read once
  std::map<std::string, std::string> judging;  // model -> file
};

FakequantFiles fakequant_files(const std::string& dir) {
  FakequantFiles f;
  if (is_dir(dir + "/fakequant")) walk_files(dir + "/fakequant", ".h5", f.files);
  std::sort(f.files.begin(), f.files.end());
  std::map<std::string, std::string> latest_utc;
  for (const auto& file : f.files) {
    f.rows.push_back(load_steps(file));
    const std::string utc = read_h5_string_attrs(file)["utc"];
    for (const auto& kv : index_steps(f.rows.back()).fakequant_ms)
      if (!f.judging.count(kv.first) || utc >= latest_utc[kv.first]) f.judging[kv.first] = file, latest_utc[kv.first] = utc;
  }
  return f;
}

// The fake-quant peer timed by commands of their own: each file's peer rows against our rows of the same
// file, so every ratio comes from one command, without changing the other bars, which the step files judge.
// A model's fake-quant bar comes from its judging file only (the table lists every file's rows).
void fakequant_sections(const FakequantFiles& fq, const BenchTargets& t, BenchOutput& out) {
  if (fq.files.empty()) return;
  out.md << "## Against a fake-quant PyTorch peer\n\n"
         << "The 4-bit recipes written as a researcher would in PyTorch (`harness/bench/reference_step.py --recipe`: "
         << "quantize-dequantize in torch ops, 1 x 16 blocks, FP32 max scales, RHT-16 as a 16 x 16 matmul, SR with "
         << "`torch.rand`, an autograd Function for the three GEMMs of every linear; the routed experts' three as grouped GEMMs, WGRAD over each expert's tokens padded to blocks of 16), eager and under `torch.compile`, "
         << "timed in the same command as our step (`ufp4 bench step --reference fakequant`; the peer runs only after "
         << "its self-test passes). Our rows: the deterministic step replayed as a CUDA graph, as in the step table; the "
         << "peer runs in PyTorch's default (non-deterministic) mode. ms a step, median of the timed steps; a model's bar "
         << "in the Targets table comes from its latest file.\n\n"
         << "| model | recipe | ours | fake-quant eager | fake-quant compiled | ours / compiled | ours / our bf16 | file |\n"
         << "|---|---|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < fq.files.size(); ++i) {
    const std::string& f = fq.files[i];
    const std::vector<SRow>& rows = fq.rows[i];
    StepTimes s = index_steps(rows);
    for (const auto& [model, peers] : s.fakequant_ms)
      for (const auto& [recipe, compiled] : peers) {
        const double ours = s.recipe_ms[model].count(recipe) ? s.recipe_ms[model][recipe] : NAN;
        const double bf16 = s.bf16_ms.count(model) ? s.bf16_ms[model] : NAN;
        out.md << "| " << model << s.device_note[model] << " | " << recipe << " | " << ms_cell(ours) << " | "
               << ms_cell(fastest_row_ms(rows, model, "pytorch-fakequant-eager", recipe)) << " | " << ms_cell(compiled) << " | "
               << ms_cell(ours / compiled, "%.3f") << " | " << ms_cell(ours / bf16, "%.3f") << " | `" << rel(f) << "` |\n";
      }
    for (const auto& kv : s.fakequant_ms)
      if (fq.judging.at(kv.first) == f) fakequant_bars(kv.first, kv.first.rfind("moe", 0) == 0, t, s, out.targets);
    out.sources.push_back(provenance_line(f));
  }
  out.md << "\n";
}

// Profile evidence: Nsight Compute logs beside the results (tools/gpu-bench.sh writes them).
// Returns the table's Markdown; fills ncu by kernel name (quantize_fused_<grid>_<rounding>_<layout>_<shape>).
std::string profile_section(const std::string& dir, std::map<std::string, NcuStats>& ncu, std::vector<std::string>& sources) {
  std::ostringstream md;
  std::vector<std::string> logs;
  if (is_dir(dir + "/ncu")) walk_files(dir + "/ncu", ".log", logs);
  std::sort(logs.begin(), logs.end());
  if (!logs.empty()) {
    md << "## Where the kernel time goes (Nsight Compute)\n\n| kernel | duration µs | DRAM throughput | SM throughput | registers | "
          "achieved occupancy | warp cycles per issue | instructions per element |\n|---|---|---|---|---|---|---|---|\n";
    for (const auto& f : logs) {
      std::string name = f.substr(f.rfind('/') + 1);
      name = name.substr(4, name.size() - 8);  // ncu-<name>.log
      const NcuStats n = ncu[name] = load_ncu(f, name);
      md << "| " << name << " | " << fmt("%.1f", n.us) << " | " << fmt("%.1f%%", n.dram) << " | " << fmt("%.1f%%", n.sm) << " | "
         << fmt("%.0f", n.regs) << " | " << fmt("%.1f%%", n.occupancy) << " | " << fmt("%.2f", n.cycles_per_issue) << " | "
         << fmt("%.0f", n.instr_per_elem) << " |\n";
      sources.push_back(rel(f));
    }
    md << "\n";
  }
  return md.str();
}

}  // namespace

std::string report_bench(const std::string& root, const std::string& dir, const std::string& figures) {
  const std::string kpath = dir + "/kernels.h5", spath = dir + "/step.h5";
  if (!file_exists(kpath) && !file_exists(spath) && !file_exists(dir + "/scaling.h5"))
    throw Error("report bench: no kernels.h5, step.h5 or scaling.h5 in " + dir + " (run `ufp4 bench all --out-dir " + rel(dir) + "` on a GPU)");
  const toml::table paper = load_paper(root + "/reports/paper/figure11.toml");
  const BenchTargets t = load_targets(root);
  BenchOutput out;
  out.md << "# Kernel and training-step benchmarks (paper Figure 11)\n\n"
         << "Every ratio compares timings measured in the same command on the same GPU. Kernel times are the median over "
         << "repetitions of CUDA-event times of the launches alone, with L2 flushed before each repeat; BF16 input, BF16 "
         << "dequantized output (what the training path feeds its GEMMs), FP32 1x16 scales. `standalone`: quantization "
         << "without RHT; `fused`: RHT-16 inside the quantizer; `unfused`: an RHT kernel writes a BF16 temporary that the "
         << "quantizer reads. Bandwidth counts bytes read + written; the copy is a device-to-device copy of the same bytes.\n\n";
  UnmetFacts unmet;
  StepTimes times;
  out.targets << "## Targets\n\n| target | bar | measured | verdict |\n|---|---|---|---|\n";

  if (file_exists(kpath)) kernel_sections(kpath, paper, t, figures, out, unmet);
  const FakequantFiles fq = fakequant_files(dir);
  std::set<std::string> fakequant_models;
  for (const auto& kv : fq.judging) fakequant_models.insert(kv.first);
  if (file_exists(spath)) times = step_sections(dir, spath, fakequant_models, t, out, unmet);
  fakequant_sections(fq, t, out);

  std::map<std::string, NcuStats> ncu;  // by kernel name (quantize_fused_<grid>_<rounding>_<layout>_<shape>)
  out.md << profile_section(dir, ncu, out.sources);
  // Optional logs beside the results, shown verbatim and listed as sources.
  auto optional_log = [&](const std::string& name) {
    const std::string path = dir + "/logs/" + name;
    const std::string text = file_exists(path) ? read_text_file(path) : "";
    if (!text.empty()) out.sources.push_back(rel(path));
    return text;
  };
  // Data parallelism: scaling.h5 and the correctness runs beside the step results.
  DataParallelTargets dpt = t.data_parallel;
  dpt.paper_budgets = root + "/reports/paper/figure9.toml";
  if (!dpt.expert_checks.empty() && dpt.expert_checks[0] != '/') dpt.expert_checks = root + "/" + dpt.expert_checks;
  const DataParallelReport dp = report_data_parallel(dir + "/scaling.h5", dir + "/data-parallel", dpt);
  out.md << dp.markdown;
  out.targets << dp.target_rows;
  out.sources.insert(out.sources.end(), dp.sources.begin(), dp.sources.end());
  // Independent runs packed on a GPU: packing.csv beside the step results.
  const PackingReport pk = report_packing(dir, t.packing);
  out.md << pk.markdown;
  out.targets << pk.target_rows;
  out.sources.insert(out.sources.end(), pk.sources.begin(), pk.sources.end());
  const std::string tune_log = optional_log("tune-hot.log");
  const std::string experiments_log = optional_log("col-sr-experiments.log");
  out.md << unmet_section(t, unmet, times, ncu, tune_log, experiments_log);
  std::string text = out.md.str();
  const auto at = text.find("@@TARGETS@@");
  const std::string table = out.targets.str() + "\n";
  if (at != std::string::npos) text.replace(at, 11, table);
  else text += table;
  return text + footer("build/ufp4 report bench --results " + rel(dir), out.sources);
}

}  // namespace ufp4
