// The measured packing table (results/bench/packing.csv, written by tools/gpu-packing.sh): per device and
// model, the tokens/s that K runs a GPU reach together, with or without CUDA MPS. Read here once, for
// the plan's choice of K (harness/plan/packing.h) and the benchmark report.
#pragma once
#include <string>
#include <vector>

namespace ufp4 {

struct PackingRow {
  std::string device, model;
  int per_gpu = 1;
  double tokens_per_s = 0;  // all K runs of one GPU together
  bool mps = false;         // the K runs under CUDA MPS (harness/dist/mps.h); the column is optional, 0 when absent
};

// The rows of a packing table; empty when the file is missing. Throws Error naming the file and
// line of a malformed row.
std::vector<PackingRow> load_packing(const std::string& csv);

}  // namespace ufp4
