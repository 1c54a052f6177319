// Reproduction reports: Markdown (+ SVG figures) with our numbers beside the paper's (reports/paper/*.toml),
// verdicts computed from our data, and a provenance footer. One renderer per table or figure family.
#pragma once
#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ufp4 {

// Shared pieces.
toml::table load_paper(const std::string& path);
// A required string of a paper file; throws naming the file and key.
std::string paper_string(const toml::table& paper, const std::string& key, const std::string& path);
// A paper claim checked on our runs: holds when the loss of the first row of every pair is lower
// (each paired interval below zero), contradicted when one lies above zero.
struct PaperClaim {
  std::string text;
  std::vector<std::pair<std::string, std::string>> pairs;
};
std::vector<PaperClaim> paper_claims(const toml::table& paper, const std::string& path);  // [[claims]]
std::string rel(const std::string& path);  // a path as the repository names it
// A benchmark file's source line: its path, device, commit, torch and CUDA versions, and when it was written.
std::string provenance_line(const std::string& path);
// The provenance section: the command that re-renders the report and its inputs. Nothing in it depends
// on when or by which build it was rendered, so the same inputs give the same bytes; an input that is a
// file of the repository gets its content hash (an HDF5 file's content_sha256, else the file's SHA-256).
std::string footer(const std::string& command, const std::vector<std::string>& sources);
// "build/ufp4 report NAME --results DIR ..." for the footer.
std::string regenerate_command(const std::string& name, const std::vector<std::string>& dirs);
std::string fmt(const char* printf_format, double v);  // one number, printf-formatted

// Draws `fig` as <figures>/<name>.svg and returns the Markdown that shows it (or says why it was skipped);
// "" when figures is empty (report to stdout).
struct Figure;
std::string figure_markdown(const std::string& figures, const std::string& name, const Figure& fig);

struct RunSummary {
  std::string path, recipe, model, commit, device, name;
  double tail_mean = NAN, final_eval = NAN;  // mean train loss of the last k steps; final validation loss
  int64_t steps = 0, k = 0, seed = 0;
  double epochs = NAN;                       // tokens / the corpus's training tokens (NaN: not recorded)
  std::vector<double> loss;                  // the training curve
};
RunSummary summarize(const std::string& path, int64_t k);
// Mean and sample standard deviation (0 for one value).
std::pair<double, double> mean_sd(const std::vector<double>& v);

// Training tables and figures (report_training.cpp); `dirs` are folders of run results.
std::string report_table1(const std::string& root);
std::string report_table2(const std::string& root, const std::vector<std::string>& dirs, int64_t k, const std::string& figures);
// Table 3 (E2M1 one-factor search) and Figure 10 (range-restricted E2M1).
std::string report_table3(const std::string& root, const std::vector<std::string>& dirs, int64_t k, const std::string& figures);
std::string report_figure10(const std::string& root, const std::vector<std::string>& dirs, int64_t k, const std::string& figures);
// A registered campaign's report from its run set (report_campaign.cpp): Figure 8, Figure 10 and any
// campaign whose file names the report, its title and the paper's numbers.
struct RunSet;
std::string report_campaign(const RunSet& set, const std::string& figures);
// Every campaign's claims on one page (report_verdicts.cpp): per campaign its run set's state, each claim's
// primary test and verdict, the one-factor groups' answers, the count of each verdict, and a figure of every claim's interval.
std::string report_verdicts(const std::vector<RunSet>& sets, const std::string& command, const std::string& figures);

// The mechanism on current-corpus runs, claim by claim beside the paper (report_mechanism.cpp), from a
// folder of `ufp4 analyze capture` step files.
std::string report_mechanism(const std::string& root, const std::string& dir);
// Shrinkage-bias analysis, Figures 2, 4-7, 12 and the attenuation chain (report_analysis.cpp).
std::string report_analysis(const std::string& root, const std::string& tensors_h5, const std::vector<std::string>& chain_h5,
                            const std::string& figures);

// Data-parallel sections of reports/bench.md (report_data_parallel.cpp): scaling from `ufp4 bench scaling`
// (scaling.h5) and correctness from the run results in a folder (one GPU, three seeds; N GPUs, reruns);
// each part is left out when its input is absent. target_rows: rows of the report's Targets table.
struct DataParallelTargets {
  double efficiency_min = 0.9;
  int efficiency_gpus = 4;
  std::string efficiency_model = "dense-1.5b";
  std::string paper_budgets;  // the paper models' token budgets for the projection (reports/paper/figure9.toml)
  std::string expert_checks;  // a folder of tools/gpu-expert-parallel.sh's `ufp4 check` logs; empty: none
  std::vector<std::string> expert_tolerance_logs, expert_exact_logs;  // the logs there that must pass, and pass bit for bit
};
struct DataParallelReport {
  std::string markdown, target_rows;
  std::vector<std::string> sources;
};
DataParallelReport report_data_parallel(const std::string& scaling_h5, const std::string& correctness_dir, const DataParallelTargets& t);
// The paper's models at the token budgets of `paper_toml`'s [[targets]] in GPU-hours at the speed measured
// in `bench_dir` (report_projection.cpp); empty when nothing there measures them.
std::string projection_section(const std::string& bench_dir, const std::string& paper_toml);

// The packing section (report_packing.cpp): packing.csv's rows against one run a GPU, the bit check of a
// packed run, and a bar on the fastest setting of each of `models`. Empty when the table is absent.
struct PackingTargets {
  double fastest_over_one_run_min = 1.5;
  std::vector<std::string> models;
};
struct PackingReport {
  std::string markdown, target_rows;
  std::vector<std::string> sources;
};
PackingReport report_packing(const std::string& dir, const PackingTargets& t);

// Figure 9 from `ufp4 fit` output (report_scaling.cpp).
std::string report_figure9(const std::string& root, const std::string& fits, const std::string& figures);

// Kernel and training-step benchmarks, Figure 11 (report_bench.cpp): `dir` holds kernels.h5 and/or step.h5.
std::string report_bench(const std::string& root, const std::string& dir, const std::string& figures);

}  // namespace ufp4
