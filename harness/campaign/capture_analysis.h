// `ufp4 analyze capture`: the shrinkage-bias measurements on the operands of the runs we judge, taken
// as they train. Each run of the manifests (sweeps expanded: recipes, seeds) trains with its [capture]
// steps handed to the analysis on the device instead of written out (a step of a 12-layer model at
// 64k tokens is gigabytes of operands), and each captured step leaves one small file,
//   <run's capture folder>/step<N>.tensors.h5
// with the tables of harness/analysis/tensor_tables.h (every captured linear, the paper's grids without
// and with RHT-16, on the unrotated operands), the recipe's own quantization of every GEMM operand as
// it trained (table "recipe": NMSE, SQNR, alpha and the shrinkage E[sign(a)(q - a)] / E[|a|] of each
// rotated and quantized operand against its rotated original), the signal chain of the step (table
// "chain", harness/analysis/signal_chain.h: the step's micro-batch through the network quantized and not,
// compared along the residual stream forward and backward beside Eq. 5's prediction from the operands'
// alpha; one process), and its provenance: model, recipe, data manifest, seed, step, epochs at the step,
// run id.
#pragma once
#include <string>
#include <vector>

#include "kernels/quantize/grid.h"

namespace ufp4 {

struct CaptureAnalysisOptions {
  std::vector<std::string> manifests;
  std::vector<Grid> grids;  // the analysis grids (default e2m1, e1m2)
  std::string device;       // overrides the manifests' device when set
  bool force = false;       // analyse again where the files exist
  int shard = 0, shards = 1;  // this process takes the runs whose index i has i % shards == shard (one process a GPU)
};

// Trains (or resumes) every run whose step files are not all there, analysing its captured steps as it
// goes; a run whose files all exist is skipped. Returns the step files, in run order.
std::vector<std::string> run_capture_analysis(const CaptureAnalysisOptions& o);

}  // namespace ufp4
