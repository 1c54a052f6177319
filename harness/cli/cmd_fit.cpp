// `ufp4 fit`: scaling-law fits over runs read from results folders, one fit per recipe, written to HDF5
// (harness/analysis/scaling_fits.h, which says how compute is counted; --attention-flops adds the
// attention terms of our FLOP model).
#include <iostream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/analysis/scaling_fits.h"
#include "harness/cli/cli.h"
#include "harness/plan/campaign.h"
#include "harness/report/report.h"

namespace ufp4 {
namespace {

// The verified results of a campaign's run set, as its report reads them; the missing runs are named
// on stderr (a fit over part of a ladder is allowed: the report says how many seeds each size has).
std::vector<std::string> campaign_result_files(const std::string& path) {
  const RunSet set = Campaign::load(path).resolve();
  std::vector<std::string> files;
  for (const auto& r : set.runs)
    if (!r.path.empty()) files.push_back(r.path);
  if (files.empty()) throw Error(path + ": no run of the campaign has a verified result yet (ufp4 campaign check " + path + ")");
  if (set.missing() > 0)
    std::cerr << "fit: " << path << ": " << files.size() << " of " << set.runs.size() << " runs with verified results; " << set.missing()
              << " missing are left out (ufp4 campaign check " << path << " lists them)\n";
  return files;
}

}  // namespace

int cmd_fit(const std::vector<std::string>& args) {
  ScalingFitsOptions opt;
  std::string campaign;
  po::options_description d("options");
  d.add_options()
      ("results", po::value(&opt.results)->multitoken(), "folders of run results (default results/figure9)")
      ("prefix", po::value(&opt.prefix)->default_value(""), "only runs whose name starts with one of these (comma list)")
      ("campaign", po::value(&campaign), "a campaign file: fit exactly its run set's verified results (the runs its report reads; "
                                        "not with --results or --prefix)")
      ("form", po::value(&opt.forms)->default_value("power,chinchilla"), "comma list of power (L vs C) and chinchilla (L vs N, D)")
      ("metric", po::value(&opt.metric)->default_value("val"), "val (final validation loss) or train (mean training loss of the last K steps)")
      ("last-k", po::value(&opt.last_k)->default_value(100), "K for --metric train")
      ("huber", po::value(&opt.fit.huber_delta)->default_value(0), "Huber threshold in loss units (0: least squares)")
      ("bootstrap", po::value(&opt.fit.bootstrap)->default_value(1000), "bootstrap resamples over sizes, and over seeds within a size")
      ("coverage", po::value(&opt.fit.coverage)->default_value(0.95), "coverage of the bootstrap intervals")
      ("seed", po::value(&opt.fit.seed)->default_value(1), "bootstrap seed (the same for every recipe: resamples are paired)")
      ("attention-flops", po::bool_switch(&opt.attention_flops), "count attention FLOPs in the compute")
      ("free-e", po::bool_switch(), "let the irreducible loss E take any sign (default: E > 0)")
      ("out", po::value(&opt.out)->default_value("results/fits/figure9-proxy.h5"), "HDF5 output (an existing file is replaced only when given here or with --force)")
      ("force", po::bool_switch(), "replace the default output file when it exists");
  auto vm = parse_command("fit", "[--results DIR... | --campaign FILE] [--form power,chinchilla] [--out FILE]", d, args);
  if (!vm) return 0;
  refuse_to_replace(opt.out, !(*vm)["out"].defaulted() || (*vm)["force"].as<bool>(), "fit");
  if (opt.metric != "val" && opt.metric != "train") throw Error("--metric: '" + opt.metric + "' is not allowed (allowed: val, train)");
  if (!(opt.fit.coverage > 0 && opt.fit.coverage < 1)) throw Error("--coverage: must lie in (0, 1)");
  if (opt.fit.huber_delta < 0) throw Error("--huber: must be >= 0");
  if (vm->count("campaign")) {
    if (vm->count("results") || !(*vm)["prefix"].defaulted()) throw Error("--campaign: not with --results or --prefix (the campaign names its runs)");
    if (campaign.empty()) throw Error("--campaign: a campaign file is needed (e.g. experiments/figure9/campaign.toml)");
    opt.files = campaign_result_files(campaign);
    opt.campaign = rel(campaign);  // as the checkout names it: the report reads it from the checkout's root
  }
  if (opt.results.empty()) opt.results = {"results/figure9"};
  opt.fit.positive_e = !(*vm)["free-e"].as<bool>();
  write_scaling_fits(opt);
  return 0;
}

}  // namespace ufp4
