// `ufp4 fit`'s work: scaling-law fits over runs read from results folders, one fit per recipe and
// form (fit.h), written to HDF5 with the points they were made from.
// Compute is counted as 6 x active parameters (embedding lookup excluded) x tokens (the convention of the Chinchilla and Ling
// scaling-law papers; embeddings excluded, attention score FLOPs left out so that compute depends on
// the model and the token count only); attention_flops adds the attention terms of our FLOP model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "harness/analysis/fit.h"

namespace ufp4 {

struct ScalingFitsOptions {
  std::vector<std::string> results;        // folders of run results (walked for .h5 files)
  // The result files themselves (a campaign's verified run set, `ufp4 fit --campaign`): when set, the
  // folders and the prefix are not read, so the fit holds exactly the runs its campaign's report does.
  std::vector<std::string> files;
  // The campaign those files are the run set of, as given (attribute "campaign"): the fit report then
  // shows its registered verdicts, and refuses a fit of another run set than the campaign's now.
  std::string campaign;
  std::string prefix;                      // only runs whose name starts with one of these (comma list; empty: all)
  std::string forms = "power,chinchilla";  // comma list of power (L vs C) and chinchilla (L vs N, D)
  std::string metric = "val";              // val (final validation loss) or train (mean training loss of the last K steps)
  int64_t last_k = 100;                    // K for metric train
  bool attention_flops = false;            // count attention FLOPs in the compute
  FitOptions fit;                          // Huber threshold, bootstrap, coverage, seed, the sign of E
  std::string out;                         // HDF5 output (its folder is made)
};

// Reads the runs, fits every recipe in every form, prints one line per fit and writes `out`.
// Throws ufp4::Error when a folder is missing, no run matches, or a fit fails (a chinchilla fit
// beside other forms is skipped with a printed note instead: the data may not vary N and D apart).
void write_scaling_fits(const ScalingFitsOptions& opt);

}  // namespace ufp4
