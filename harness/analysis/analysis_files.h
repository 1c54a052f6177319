// The analyses of `ufp4 analyze` run end to end: each measures, prints its summary and writes its
// HDF5 file (with provenance).
//   bias     per-bin table of a grid (Eq. 2) and b_G(P) for densities, by integration and Monte Carlo
//   tensors  SQNR, Delta SQNR, alpha, bucket ratio of captured operands, and GEMM output SQNR
//   chain    signal attenuation through stacked quantized GEMMs (Eq. 5)
// The tensors and chain analyses use 1x16 blocks with FP32 single-level scales, RTNE, each without
// and with RHT-16 (H16).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/analysis/analysis.h"
#include "kernels/quantize/grid.h"

namespace ufp4 {

// The empirical density of a tensor: a .npy file, or `dataset` inside an HDF5 file.
Density tensor_density(const std::string& file, const std::string& dataset);

struct BiasAnalysisOptions {
  Grid grid = Grid::from_name("e2m1");
  std::vector<Density> densities;  // none: the bin table only
  int block = 16;                  // block size B of the max scaling
  int64_t samples = 1 << 18;       // Monte Carlo blocks (0: integration only)
  uint64_t seed = 1;               // Monte Carlo seed
  bool json = false;               // machine-readable output
  std::string out;                 // also write the results to this HDF5 file (empty: none)
};
// The grid's bin table (Eq. 2) and b_G(P) of each density without and with RHT-16, by integration and
// Monte Carlo, printed (text or JSON) and written to `out`. Throws RuntimeError when integration and
// Monte Carlo disagree beyond their stated errors (after printing and writing).
void run_bias_analysis(const BiasAnalysisOptions& opt);

struct TensorsAnalysisOptions {
  std::string capture;  // a capture_step*.h5 file
  std::vector<Grid> grids;
  int64_t tokens = 2048;  // tokens of each activation used (a multiple of 16)
  torch::Device device = torch::kCPU;
  std::string out;  // HDF5 output
};
// SQNR, alpha, bucket ratio and Eq. 2 per bin of every captured operand, and the output SQNR of each
// layer's three GEMMs, for every grid without and with RHT-16; written to `out`, with a summary per
// family and tensor (mean over layers) printed.
void run_tensors_analysis(const TensorsAnalysisOptions& opt);

struct ChainAnalysisOptions {
  std::string capture;              // chain the captured linear_proj weights of this capture file; empty: random weights
  std::string input = "student-t";  // input rows: gaussian, student-t (heavy-tailed), or captured
  double nu = 3;                    // degrees of freedom of the student-t input
  int64_t depth = 12;               // number K of stacked GEMMs
  int64_t dim = 768;                // width of random weights
  int64_t tokens = 2048;            // rows of the input
  std::vector<std::string> grids;   // grid names, each parsed when its turn comes
  uint64_t seed = 1;                // seed of random weights and inputs
  double residual = 0;              // branch gain of a residual stream (attenuation_chain); 0: the serial chain
  torch::Device device = torch::kCPU;
  std::string out;  // also write the results to this HDF5 file (empty: none)
};
// Signal attenuation through `depth` stacked quantized GEMMs for every grid without and with RHT-16,
// printed and written to `out`.
void run_chain_analysis(const ChainAnalysisOptions& opt);

}  // namespace ufp4
