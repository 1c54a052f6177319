// The scaling-law fits file of `ufp4 fit` (fits/*.h5), written by harness/analysis/scaling_fits and
// read by the Figure 9 report through these types alone:
//   points/<recipe>        [n, 4] compute FLOPs, active parameters, tokens, loss (attribute "sources")
//   runs/<recipe>          [n, 3] seed, non-embedding parameters, epochs, row for row (attribute "models")
//   <form>/<recipe>/params the fitted parameters (attributes names, c0, n0, d0, rmse, bootstrap counts),
//   <form>/<recipe>/lo|hi  their bootstrap interval, and .../samples the bootstrap draws (NaN: skipped)
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/io/array_io.h"

namespace ufp4 {

// One run of a recipe's ladder.
struct FitRun {
  double compute_flops = 0, active_params = 0, tokens = 0, loss = 0;
  double seed = NAN, non_embedding_params = NAN, epochs = NAN;  // NaN in files made before the runs/ rows
  std::string model, source;
};

// One fitted form of one recipe.
struct FittedForm {
  std::vector<std::string> names;
  std::vector<double> params, lo, hi;
  std::vector<std::vector<double>> samples;  // bootstrap draws; an empty one was skipped
  double c0 = 1, n0 = 1, d0 = 1, rmse = NAN;
  int64_t bootstrap_used = 0, bootstrap_skipped = 0;
};

void write_fit_runs(H5Writer& w, const std::string& recipe, const std::vector<FitRun>& runs);
void write_fitted_form(H5Writer& w, const std::string& form, const std::string& recipe, const FittedForm& f);

// A recipe's runs; Error naming the file when its runs/ rows do not match its points row for row.
std::vector<FitRun> read_fit_runs(const std::string& path, const std::string& recipe);
FittedForm read_fitted_form(const std::string& path, const std::string& form, const std::string& recipe);

}  // namespace ufp4
