// The benchmark result files of `ufp4 bench` (kernels.h5, step*.h5, scaling.h5): their rows, and the
// one column list of each that both the benchmark's writer and the reports' reader use
// (harness/io/row_table.h). A file's header attributes (provenance, what, warm-up) are its writer's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/io/array_io.h"

namespace ufp4 {

// One kernel benchmark: name "copy/<R>x<C>" or "quantize/<kind>/<grid>/<rounding>/<layout>/<R>x<C>",
// kind standalone (no RHT) | fused (RHT-16 inside the quantizer) | unfused (RHT kernel to a BF16
// temporary, then the quantizer). Input BF16 [R, C]; output the dequantized BF16 operand.
struct KernelBenchRow {
  std::string name;
  double time_us = 0, time_us_mean = 0, time_us_sd = 0;  // median / mean / sd over repetitions of the per-repetition mean
  double bytes = 0;                                      // bytes read + written (each input once, each output once)
  double flops = 0;                                      // RHT butterflies and scaling: see bench_kernels.cpp
  int64_t repetitions = 0, iterations = 0;
};

// One training-step measurement.
struct StepBenchRow {
  // "ufp4" (this harness, deterministic as the trainer runs), "ufp4-nondeterministic", "ufp4-libtorch-ops"
  // (no fused ops), "ufp4-moe-layer" (one MoE layer forward + backward; batch 1, seq_len = its tokens),
  // "attention" / "attention-nondeterministic" (the model's attention alone, forward + backward, with the
  // run's attention backward), "attention-own-backward" / "attention-flash-backward" (the same with the
  // other one), "ufp4-own-attention-backward" / "ufp4-flash-attention-backward" (the step with it) or
  // "pytorch-[fakequant-]{eager,compiled,compiled-cudagraphs}-[deterministic-]<optimizer>" (harness/bench/reference_step.py;
  // fakequant: the row's 4-bit recipe written as plain fake quantization)
  std::string impl;
  std::string model, recipe;
  int64_t batch = 0, seq_len = 0, steps = 0;
  double step_ms = 0, step_ms_mean = 0, step_ms_sd = 0;  // median / mean / sd over timed steps
  double tokens_per_s = 0, mfu = 0, peak_memory_gb = 0, loss = 0;
  std::string note{};  // versions of the reference, etc.
};

// Data-parallel scaling: one row a (world size, model, recipe).
struct ScalingBenchRow {
  std::string model, recipe, backend, sharding, cuda_graph;
  // "" (files before expert parallelism), "1 GPU", "DP N" or "EP e x DP d"; and what was timed: "" or
  // "step" (the training step), or "MoE layer" (one routed MoE layer's forward and backward, no optimizer).
  std::string layout, unit;
  int64_t gpus = 0, batch = 0, micro_batch = 0, seq_len = 0, steps = 0;
  double step_ms = 0, step_ms_sd = 0;           // the slowest rank's median (and its sd)
  double tokens_per_s = 0, mfu = 0;             // the world's tokens/s; MFU over N GPUs' peak
  double peak_memory_gb = 0, peak_memory_gb_min = 0, plan_memory_gb = 0;  // largest and smallest rank; the plan's estimate
  double loss = 0;
};

// A benchmark file's first attributes: provenance (harness/io/provenance.h), schema_version 1, and
// `what` the file measures.
void write_bench_header(H5Writer& w, const std::string& what);

// The rows as their file's group (kernels/, step/, scaling/), into an open writer.
void write_kernel_rows(H5Writer& w, const std::vector<KernelBenchRow>& rows);
void write_step_rows(H5Writer& w, const std::vector<StepBenchRow>& rows);
void write_scaling_rows(H5Writer& w, const std::vector<ScalingBenchRow>& rows);

// The rows of a file (its content hash checked); Error naming the file when it lacks the group.
std::vector<KernelBenchRow> read_kernel_rows(const std::string& path);
std::vector<StepBenchRow> read_step_rows(const std::string& path);
std::vector<ScalingBenchRow> read_scaling_rows(const std::string& path);

}  // namespace ufp4
