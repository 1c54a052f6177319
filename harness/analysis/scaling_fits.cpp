#include "harness/analysis/scaling_fits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/array_io.h"
#include "harness/io/fit_files.h"
#include "harness/io/provenance.h"
#include "harness/io/run_results.h"
#include "models/model_config.h"

namespace ufp4 {

namespace {

// A ladder point with what the report shows beside it: its model, seed and data accounting.
struct LadderRun {
  FitPoint p;
  std::string model, source;
  double non_embedding = 0, epochs = NAN;
};

std::vector<std::string> comma_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

std::vector<std::string> result_files(const std::vector<std::string>& dirs) {
  std::vector<std::string> files;
  for (const auto& dir : dirs) {
    if (!is_dir(dir)) throw Error("--results: '" + dir + "' is not a folder");
    walk_files(dir, ".h5", files);
  }
  return files;
}

// One run's point: compute, active parameters, tokens and the loss the metric names.
FitPoint ladder_point(const RunResults& r, const ModelConfig& mc, const ScalingFitsOptions& opt) {
  // The curves as FP32, as the committed fits were made.
  std::vector<float> loss(r.curves.loss.begin(), r.curves.loss.end());
  FitPoint p;
  p.seed = r.seed;
  p.tokens = static_cast<float>(r.curves.tokens.back());
  p.params = train_flops_per_token(mc, false) / 6;  // active parameters without the embedding lookup
  p.compute = (opt.attention_flops ? train_flops_per_token(mc, true) : 6.0 * p.params) * p.tokens;
  if (opt.metric == "val") {
    p.loss = r.final_eval_loss;
  } else {
    const size_t n = loss.size(), k = std::min<size_t>(n, static_cast<size_t>(opt.last_k));
    double s = 0;
    for (size_t i = n - k; i < n; ++i) s += loss[i];
    p.loss = s / static_cast<double>(k);
  }
  return p;
}

// The selected runs of the files, by recipe.
std::map<std::string, std::vector<LadderRun>> read_ladder(const std::vector<std::string>& files, const ScalingFitsOptions& opt) {
  std::vector<std::string> prefixes = comma_list(opt.prefix);
  if (prefixes.empty()) prefixes.push_back("");
  auto selected = [&](const std::string& name) {
    for (const auto& p : prefixes)
      if (name.rfind(p, 0) == 0) return true;
    return false;
  };
  std::map<std::string, std::vector<LadderRun>> by_recipe;
  for (const auto& f : files) {
    if (!is_run_results(f)) continue;
    const RunResults r = read_run_results(f);
    if (!selected(r.run_name)) continue;
    ModelConfig mc = model_config(r.model);
    if (r.curves.tokens.empty()) continue;
    by_recipe[r.recipe].push_back({ladder_point(r, mc, opt), r.model, f + " (" + r.model + ", commit " + r.attr("git_commit") + ", content " + r.attr("content_sha256") + ")",
                                   static_cast<double>(count_params(mc).non_embedding()), r.epochs});
  }
  if (by_recipe.empty()) throw Error("fit: no runs found in the given folders" + (opt.prefix.empty() ? std::string() : " with prefix '" + opt.prefix + "'"));
  return by_recipe;
}

void write_recipe_runs(H5Writer& w, const std::string& recipe, const std::vector<LadderRun>& runs) {
  std::vector<FitRun> rows;
  for (const auto& r : runs)
    rows.push_back({r.p.compute, r.p.params, r.p.tokens, r.p.loss, static_cast<double>(r.p.seed), r.non_embedding, r.epochs, r.model, r.source});
  write_fit_runs(w, recipe, rows);
}

FittedForm fitted_form(const std::vector<std::string>& names, const FitResult& r) {
  return {names, r.params, r.lo, r.hi, r.samples, r.c0, r.n0, r.d0, r.rmse, r.bootstrap_used, r.bootstrap_skipped};
}

// Every form for one recipe's points: written under <form>/<recipe> and printed a line each.
void fit_recipe(H5Writer& w, const std::string& recipe, const std::vector<FitPoint>& pts, const std::vector<std::string>& form_names,
                const FitOptions& opt) {
  for (const auto& fname : form_names) {
    const FitForm form = parse_fit_form(fname);
    FitResult r;
    try {
      r = fit_scaling_law(pts, form, opt);
    } catch (const Error& e) {
      if (form_names.size() > 1 && form == FitForm::kChinchilla) {  // the data may not vary N and D apart
        std::cout << recipe << ": chinchilla form skipped: " << e.what() << "\n";
        continue;
      }
      throw Error(recipe + ": " + e.what());
    }
    auto names = fit_param_names(form);
    write_fitted_form(w, fname, recipe, fitted_form(names, r));
    std::printf("%-10s %-10s n=%zu rmse=%.4f", recipe.c_str(), fname.c_str(), pts.size(), r.rmse);
    const bool intervals = r.bootstrap_used > 0;  // none used: lo = hi = the estimate, which is no interval
    for (size_t j = 0; j < names.size(); ++j)
      intervals ? std::printf("  %s=%.4g [%.4g, %.4g]", names[j].c_str(), r.params[j], r.lo[j], r.hi[j])
                : std::printf("  %s=%.4g", names[j].c_str(), r.params[j]);
    if (intervals || opt.bootstrap <= 0) std::printf("  (bootstrap %d used, %d skipped)\n", r.bootstrap_used, r.bootstrap_skipped);
    else
      std::printf("  (no intervals: all %d bootstrap resamples skipped; a resample needs at least %zu distinct sizes for %zu parameters)\n",
                  r.bootstrap_skipped, names.size() + 1, names.size());
  }
}

void write_fits_attrs(H5Writer& w, const std::string& recipes, const ScalingFitsOptions& opt) {
  w.attr("recipes", recipes);
  w.attr("metric", opt.metric == "val" ? std::string("final validation loss") : "mean training loss of the last " + std::to_string(opt.last_k) + " steps");
  w.attr("compute", std::string(opt.attention_flops ? "training FLOPs per token of our FLOP model (with attention) x tokens"
                                                    : "6 x active parameters (embedding lookup excluded) x tokens"));
  w.attr("huber_delta", opt.fit.huber_delta);
  w.attr("e_constraint", std::string(opt.fit.positive_e ? "E > 0 (fitted as exp(log E))" : "E free"));
  w.attr("coverage", opt.fit.coverage);
  w.attr("bootstrap", static_cast<int64_t>(opt.fit.bootstrap));
  if (!opt.campaign.empty()) w.attr("campaign", opt.campaign);
}

}  // namespace

void write_scaling_fits(const ScalingFitsOptions& opt) {
  std::map<std::string, std::vector<LadderRun>> by_recipe = read_ladder(opt.files.empty() ? result_files(opt.results) : opt.files, opt);
  if (opt.out.find('/') != std::string::npos) make_dirs(opt.out.substr(0, opt.out.rfind('/')));
  H5Writer w(opt.out);
  std::string recipes;
  const std::vector<std::string> form_names = comma_list(opt.forms);
  for (auto& [recipe, runs] : by_recipe) {
    // Same order in every recipe (by size, then tokens, then seed): bootstrap draws pair the same runs.
    std::sort(runs.begin(), runs.end(), [](const LadderRun& x, const LadderRun& y) {
      const FitPoint &a = x.p, &b = y.p;
      return a.params != b.params ? a.params < b.params : a.tokens != b.tokens ? a.tokens < b.tokens : a.seed < b.seed;
    });
    std::vector<FitPoint> pts;
    for (const auto& r : runs) pts.push_back(r.p);
    recipes += (recipes.empty() ? "" : ",") + recipe;
    write_recipe_runs(w, recipe, runs);
    fit_recipe(w, recipe, pts, form_names, opt.fit);
  }
  write_fits_attrs(w, recipes, opt);
  write_provenance(w);
  w.commit();
  std::cout << "written to " << opt.out << "\n";
}

}  // namespace ufp4
