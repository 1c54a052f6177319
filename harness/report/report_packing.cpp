// The packing section of reports/bench.md, from results/bench/packing.csv (tools/gpu-packing.sh): per
// model, the tokens/s a GPU reaches with K independent runs at once, with and without CUDA MPS, against
// one run a GPU; the bar on the fastest setting of each model it names; the script's bit check of a
// packed run against the same run alone (logs/packing/exact.log).
#include <map>
#include <sstream>

#include "common/fs.h"
#include "common/text.h"
#include "harness/io/packing_table.h"
#include "harness/report/report.h"

namespace ufp4 {

PackingReport report_packing(const std::string& dir, const PackingTargets& t) {
  PackingReport out;
  const std::string csv = dir + "/packing.csv";
  const std::vector<PackingRow> rows = load_packing(csv);
  if (rows.empty()) return out;
  out.sources.push_back(rel(csv));
  // One run a GPU without MPS, a device and model's baseline.
  std::map<std::pair<std::string, std::string>, double> one;
  for (const auto& r : rows)
    if (r.per_gpu == 1 && !r.mps) one[{r.device, r.model}] = r.tokens_per_s;
  std::ostringstream md;
  md << "## Packing: independent runs a GPU\n\n"
     << "A campaign trains many small proxy runs, and one run leaves a GPU mostly idle. K runs a GPU at once, each its own "
     << "process (`ufp4 run --gpus N --per-gpu K`), with and without CUDA MPS (`--mps on|off`: without it the processes of a "
     << "GPU take turns, under it their kernels run at once). Tokens/s a GPU: the sum of each run's training-loop tokens/s; "
     << "against one run a GPU without MPS, on the same device.\n\n"
     << "| model | device | runs a GPU (K) | MPS | tokens/s a GPU | over one run a GPU |\n|---|---|---|---|---|---|\n";
  std::map<std::string, const PackingRow*> fastest;  // by model, over devices
  for (const auto& r : rows) {
    const auto base = one.find({r.device, r.model});
    const double ratio = base != one.end() && base->second > 0 ? r.tokens_per_s / base->second : 0;
    md << "| " << r.model << " | " << r.device << " | " << r.per_gpu << " | " << (r.mps ? "on" : "off") << " | " << fmt("%.0f", r.tokens_per_s)
       << " | " << (ratio > 0 ? fmt("%.2fx", ratio) : std::string("-")) << " |\n";
    const PackingRow*& f = fastest[r.model];
    if (!f || r.tokens_per_s > f->tokens_per_s) f = &r;
  }
  const std::string exact = dir + "/logs/packing/exact.log";
  if (file_exists(exact)) {
    out.sources.push_back(rel(exact));
    md << "\nBits: seed 1 of the most packed MPS setting, trained again alone on a GPU without MPS, against its packed self "
       << "(`ufp4 check --exact`: every loss, gradient norm and the final weights):\n\n";
    std::istringstream lines(read_text_file(exact));
    for (std::string l; std::getline(lines, l);)
      if (!l.empty()) md << "- " << l << "\n";
  }
  md << "\n";
  std::ostringstream targets;
  for (const std::string& model : t.models) {
    const std::string bar = "proxy tokens/s a GPU, " + model + ": the fastest packing over one run a GPU";
    const auto f = fastest.find(model);
    const auto base = f == fastest.end() ? one.end() : one.find({f->second->device, model});
    if (base == one.end() || base->second <= 0) {
      targets << "| " << bar << " | >= " << fmt("%.2f", t.fastest_over_one_run_min) << "x | not measured | **not met** |\n";
      continue;
    }
    const double ratio = f->second->tokens_per_s / base->second;
    targets << "| " << bar << " | >= " << fmt("%.2f", t.fastest_over_one_run_min) << "x | " << fmt("%.2fx", ratio) << " (K = " << f->second->per_gpu
            << (f->second->mps ? ", MPS" : "") << ") | " << (ratio >= t.fastest_over_one_run_min ? "**met**" : "**not met**") << " |\n";
  }
  out.markdown = md.str();
  out.target_rows = targets.str();
  return out;
}

}  // namespace ufp4
