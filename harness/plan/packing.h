// How many independent runs a GPU should hold at once, from the measured packing table
// (results/bench/packing.csv, tools/gpu-packing.sh): per device and model, the tokens/s that K runs a
// GPU reach together. `ufp4 run --gpus` and `ufp4 campaign run --gpus` take the fastest K for their
// runs' model by default, and `ufp4 plan` estimates a campaign's time from it.
#pragma once
#include <string>
#include <vector>

#include "harness/io/packing_table.h"

namespace ufp4 {

// The fastest row measured for `model` (on `device`, or on any device when `device` is empty), with or
// without MPS; nullptr when the table has no row for it.
const PackingRow* fastest_packing(const std::vector<PackingRow>& rows, const std::string& model, const std::string& device = "");
// Tokens/s a GPU reaches with K runs of `model`, with or without MPS; 0 when not measured.
double packed_tokens_per_s(const std::vector<PackingRow>& rows, const std::string& model, int per_gpu, bool mps, const std::string& device = "");

// GPU time of `tokens` per model at the fastest measured packing: one line per model, "" for models the
// table has not measured ("dense-ne6.6m: 1.3e+10 tokens at 4 runs a GPU (3.9M tokens/s a GPU): 0.93 GPU-h").
std::string packed_estimate(const std::vector<std::pair<std::string, double>>& model_tokens, const std::string& table);

// The first GPU's name as nvidia-smi gives it, as runs record it ("NVIDIA H200"); "" without one.
std::string this_gpu_name();

// How the runs of some models share a GPU, and the sentence that says why.
struct PackingChoice {
  int per_gpu = 1;
  bool mps = false;
  std::string why;
  bool table_missing = false;  // no table at all: one run a GPU, said as a warning
};
// `--per-gpu auto`: the smallest of the fastest K measured for each of the runs' models (1 for a model
// the table lacks), on this machine's GPU when the table has it. With allow_mps, under MPS where every
// model was measured faster under it at that K; otherwise K from the rows without MPS.
PackingChoice choose_packing(const std::vector<std::string>& models, const std::string& table, bool allow_mps);
// `--per-gpu K --mps auto`: whether every model's MPS row at K is faster than its row without (false
// when either is not measured).
bool mps_measured_faster(const std::vector<std::string>& models, int per_gpu, const std::string& table);

}  // namespace ufp4
