// Benchmarks: quantization kernels (Google Benchmark, CUDA events, L2 flushed between repeats) and
// training steps (ours per recipe, and a plain-PyTorch eager reference of the same BF16 model), kept
// as rows that are written to HDF5 with provenance and rendered by `ufp4 report bench`.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/io/bench_files.h"

namespace ufp4 {


struct KernelBenchOptions {
  std::string filter;        // Google Benchmark regex over names ("" = all)
  std::string json_out;      // Google Benchmark's own JSON output ("" = none)
  int iterations = 20, repetitions = 5;
  bool quick = false;        // two shapes only (smoke test)
};

// Runs the kernel suite on the current GPU; throws when this build or machine has no CUDA.
std::vector<KernelBenchRow> run_kernel_benchmarks(const KernelBenchOptions& o);
void write_kernel_bench(const std::string& path, const std::vector<KernelBenchRow>& rows, const KernelBenchOptions& o);


struct StepBenchOptions {
  std::vector<std::string> models = {"dense-113m", "moe-81m"};
  std::vector<std::string> recipes = {"bf16", "e2m1_ref", "ufp4"};
  std::vector<std::string> extra_recipes;  // diagnostics on the first model only (leave-one-out)
  int64_t batch = 16, seq_len = 2048;
  int warmup = 3, steps = 10;
  std::string device = "auto";
  // The plain-PyTorch peers of every model: "eager", "compiled", "deterministic" (compiled in deterministic mode),
  // "fakequant" (the 4-bit recipes of `recipes` as plain fake quantization, eager and compiled) or "none".
  std::vector<std::string> reference = {"fakequant", "eager", "compiled", "deterministic"};
  std::string python = "python3";
  bool nondeterministic = true;     // also time bf16 and ufp4 without deterministic mode (its cost)
  // Deterministic mode's attention backward for every row: ours (kernels/attention/attention_backward.h; the trainer's default) or flash's
  // (models/deterministic_attention.h); the other is timed in rows of its own.
  bool own_attention_backward = true;
  // One routed MoE layer of these models, forward + backward on moe_layer_tokens tokens (impl "ufp4-moe-layer").
  std::vector<std::string> moe_layers;
  int64_t moe_layer_tokens = 16384;
  // Called with the rows so far after each row (the command writes step.h5 then: a timed-out command keeps them).
  std::function<void(const std::vector<StepBenchRow>&)> on_row;
};

std::vector<StepBenchRow> run_step_benchmarks(const StepBenchOptions& o);
void write_step_bench(const std::string& path, const std::vector<StepBenchRow>& rows, const StepBenchOptions& o);

// Data-parallel scaling: N ranks on this machine, one a GPU, each at a fixed batch (harness/bench/bench_scaling.cpp).
struct ScalingBenchOptions {
  std::vector<int> gpus = {1, 2};  // world sizes; 1 is one process without data parallelism
  std::vector<std::string> models = {"dense-113m", "dense-1.5b"};
  std::vector<std::string> recipes = {"bf16", "ufp4"};
  int64_t batch = 16, micro_batch = 8, seq_len = 2048;  // sequences a GPU a step, in micro-batches
  int warmup = 3, steps = 10;
  std::string device = "auto";
  std::string backend = "auto";  // auto (NCCL on GPUs) | nccl | gloo
  double bucket_mb = 25;         // gradient bucket size (DataParallelOptions::bucket_bytes)
  // Expert parallelism for MoE models: at N ranks the experts split over gcd(ep, N) ranks (ufp4 run --ep).
  int ep = 1;
  // Time one routed MoE layer (layer 1) forward and backward on batch x seq tokens a rank instead of the
  // model's training step: a model too large to train here, at its real shapes.
  bool moe_layer = false;
  // Set by the launcher for its ranks: where a rank writes its figures (@RANK@ becomes its rank).
  std::string rank_out;
  // Called with the rows so far after each world size (the command writes its file then: a command cut
  // by a time limit keeps the world sizes it finished).
  std::function<void(const std::vector<ScalingBenchRow>&)> on_world;
};


// In the launcher: one launch of N ranks per world size; returns a row per (N, model, recipe). In a
// rank (rank_out set): times every model and recipe, writes its file, returns nothing.
std::vector<ScalingBenchRow> run_scaling_benchmarks(const ScalingBenchOptions& o);
// NCCL's NVLink multicast switch as a scaling file records it: NCCL_NVLS_ENABLE's value, or "(unset)".
std::string nccl_nvls_setting();
void write_scaling_bench(const std::string& path, const std::vector<ScalingBenchRow>& rows, const ScalingBenchOptions& o);

}  // namespace ufp4
