// `ufp4 fit`: scaling-law fits over runs read from results folders, one fit per recipe, written to HDF5.
// Compute is counted as 6 x active parameters (embedding lookup excluded) x tokens (the convention of the Chinchilla and Ling
// scaling-law papers; embeddings excluded, attention score FLOPs left out so that compute depends on
// the model and the token count only); --attention-flops adds the attention terms of our FLOP model.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <algorithm>

#include "common/error.h"
#include "common/fs.h"
#include "harness/analysis/fit.h"
#include "harness/cli/cli.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/io/run_results.h"
#include "models/model_config.h"

namespace ufp4 {

int cmd_fit(const std::vector<std::string>& args) {
  std::vector<std::string> dirs;
  std::string prefix, forms, metric, out;
  int64_t last_k = 100;
  double huber = 0, coverage = 0.95;
  int bootstrap = 1000;
  uint64_t seed = 1;
  po::options_description d("options");
  d.add_options()
      ("results", po::value(&dirs)->multitoken(), "folders of run results (default results/figure9)")
      ("prefix", po::value(&prefix)->default_value(""), "only runs whose name starts with one of these (comma list)")
      ("form", po::value(&forms)->default_value("power,chinchilla"), "comma list of power (L vs C) and chinchilla (L vs N, D)")
      ("metric", po::value(&metric)->default_value("val"), "val (final validation loss) or train (mean training loss of the last K steps)")
      ("last-k", po::value(&last_k)->default_value(100), "K for --metric train")
      ("huber", po::value(&huber)->default_value(0), "Huber threshold in loss units (0: least squares)")
      ("bootstrap", po::value(&bootstrap)->default_value(1000), "bootstrap resamples over sizes, and over seeds within a size")
      ("coverage", po::value(&coverage)->default_value(0.95), "coverage of the bootstrap intervals")
      ("seed", po::value(&seed)->default_value(1), "bootstrap seed (the same for every recipe: resamples are paired)")
      ("attention-flops", po::bool_switch(), "count attention FLOPs in the compute")
      ("free-e", po::bool_switch(), "let the irreducible loss E take any sign (default: E > 0)")
      ("out", po::value(&out)->default_value("results/fits/figure9-proxy.h5"), "HDF5 output (an existing file is replaced only when given here or with --force)")
      ("force", po::bool_switch(), "replace the default output file when it exists");
  auto vm = parse_command("fit", "[--results DIR...] [--form power,chinchilla] [--out FILE]", d, args);
  if (!vm) return 0;
  refuse_to_replace(out, !(*vm)["out"].defaulted() || (*vm)["force"].as<bool>(), "fit");
  if (metric != "val" && metric != "train") throw Error("--metric: '" + metric + "' is not allowed (allowed: val, train)");
  if (!(coverage > 0 && coverage < 1)) throw Error("--coverage: must lie in (0, 1)");
  if (huber < 0) throw Error("--huber: must be >= 0");
  if (dirs.empty()) dirs = {"results/figure9"};
  const bool attn = (*vm)["attention-flops"].as<bool>();
  std::vector<std::string> files;
  for (const auto& dir : dirs) {
    if (!is_dir(dir)) throw Error("--results: '" + dir + "' is not a folder");
    walk_files(dir, ".h5", files);
  }
  std::vector<std::string> prefixes;
  {
    std::stringstream ps(prefix);
    for (std::string s; std::getline(ps, s, ',');) prefixes.push_back(s);
    if (prefixes.empty()) prefixes.push_back("");
  }
  auto selected = [&](const std::string& name) {
    for (const auto& p : prefixes)
      if (name.rfind(p, 0) == 0) return true;
    return false;
  };
  // A ladder point with what the report shows beside it: its model, seed and data accounting.
  struct Run {
    FitPoint p;
    std::string model, source;
    double non_embedding = 0, epochs = NAN;
  };
  std::map<std::string, std::vector<Run>> by_recipe;
  for (const auto& f : files) {
    if (!is_run_results(f)) continue;
    const RunResults r = read_run_results(f);
    if (!selected(r.run_name)) continue;
    ModelConfig mc = model_config(r.model);
    // The curves as FP32, as the committed fits were made.
    std::vector<float> loss(r.curves.loss.begin(), r.curves.loss.end());
    if (r.curves.tokens.empty()) continue;
    FitPoint p;
    p.seed = r.seed;
    p.tokens = static_cast<float>(r.curves.tokens.back());
    p.params = train_flops_per_token(mc, false) / 6;  // active parameters without the embedding lookup
    p.compute = (attn ? train_flops_per_token(mc, true) : 6.0 * p.params) * p.tokens;
    if (metric == "val") {
      p.loss = r.final_eval_loss;
    } else {
      const size_t n = loss.size(), k = std::min<size_t>(n, static_cast<size_t>(last_k));
      double s = 0;
      for (size_t i = n - k; i < n; ++i) s += loss[i];
      p.loss = s / static_cast<double>(k);
    }
    by_recipe[r.recipe].push_back({p, r.model, f + " (" + r.model + ", commit " + r.attr("git_commit") + ")",
                                   static_cast<double>(count_params(mc).non_embedding()), r.epochs});
  }
  if (by_recipe.empty()) throw Error("fit: no runs found in the given folders" + (prefix.empty() ? std::string() : " with prefix '" + prefix + "'"));
  FitOptions opt;
  opt.huber_delta = huber;
  opt.bootstrap = bootstrap;
  opt.coverage = coverage;
  opt.seed = seed;
  opt.positive_e = !(*vm)["free-e"].as<bool>();
  if (out.find('/') != std::string::npos) make_dirs(out.substr(0, out.rfind('/')));
  H5Writer w(out);
  std::string recipes;
  std::stringstream fs(forms);
  std::vector<std::string> form_names;
  for (std::string s; std::getline(fs, s, ',');) form_names.push_back(s);
  for (auto& [recipe, runs] : by_recipe) {
    // Same order in every recipe (by size, then tokens, then seed): bootstrap draws pair the same runs.
    std::sort(runs.begin(), runs.end(), [](const Run& x, const Run& y) {
      const FitPoint &a = x.p, &b = y.p;
      return a.params != b.params ? a.params < b.params : a.tokens != b.tokens ? a.tokens < b.tokens : a.seed < b.seed;
    });
    std::vector<FitPoint> pts;
    for (const auto& r : runs) pts.push_back(r.p);
    recipes += (recipes.empty() ? "" : ",") + recipe;
    std::vector<float> pt, ru;
    for (const auto& p : pts)
      for (double v : {p.compute, p.params, p.tokens, p.loss}) pt.push_back(static_cast<float>(v));
    for (const auto& r : runs)
      for (double v : {static_cast<double>(r.p.seed), r.non_embedding, r.epochs}) ru.push_back(static_cast<float>(v));
    w.write_f32("points/" + recipe, pt.data(), {static_cast<int64_t>(pts.size()), 4});
    w.attr("columns", std::string("compute_flops,active_params,tokens,loss"), "points/" + recipe);
    // The same runs, row for row: what pairs them across recipes (seed) and their data accounting.
    w.write_f32("runs/" + recipe, ru.data(), {static_cast<int64_t>(runs.size()), 3});
    w.attr("columns", std::string("seed,non_embedding_params,epochs"), "runs/" + recipe);
    std::string src, models;
    for (const auto& r : runs) src += r.source + "\n", models += r.model + "\n";
    w.attr("sources", src, "points/" + recipe);
    w.attr("models", models, "runs/" + recipe);
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
      const std::string g = fname + "/" + recipe;
      auto names = fit_param_names(form);
      std::vector<float> est(r.params.begin(), r.params.end()), lo(r.lo.begin(), r.lo.end()), hi(r.hi.begin(), r.hi.end());
      const int64_t np = static_cast<int64_t>(names.size());
      w.write_f32(g + "/params", est.data(), {np});
      w.write_f32(g + "/lo", lo.data(), {np});
      w.write_f32(g + "/hi", hi.data(), {np});
      std::vector<float> smp;
      for (const auto& s : r.samples)
        for (int64_t j = 0; j < np; ++j) smp.push_back(s.empty() ? NAN : static_cast<float>(s[static_cast<size_t>(j)]));
      if (!smp.empty()) w.write_f32(g + "/samples", smp.data(), {static_cast<int64_t>(r.samples.size()), np});
      std::string nm;
      for (const auto& n : names) nm += (nm.empty() ? "" : ",") + n;
      w.attr("names", nm, g + "/params");
      w.attr("c0", r.c0, g + "/params");
      w.attr("n0", r.n0, g + "/params");
      w.attr("d0", r.d0, g + "/params");
      w.attr("rmse", r.rmse, g + "/params");
      w.attr("bootstrap_used", static_cast<int64_t>(r.bootstrap_used), g + "/params");
      w.attr("bootstrap_skipped", static_cast<int64_t>(r.bootstrap_skipped), g + "/params");
      std::printf("%-10s %-10s n=%zu rmse=%.4f", recipe.c_str(), fname.c_str(), pts.size(), r.rmse);
      for (size_t j = 0; j < names.size(); ++j) std::printf("  %s=%.4g [%.4g, %.4g]", names[j].c_str(), r.params[j], r.lo[j], r.hi[j]);
      std::printf("  (bootstrap %d used, %d skipped)\n", r.bootstrap_used, r.bootstrap_skipped);
    }
  }
  w.attr("recipes", recipes);
  w.attr("metric", metric == "val" ? std::string("final validation loss") : "mean training loss of the last " + std::to_string(last_k) + " steps");
  w.attr("compute", std::string(attn ? "training FLOPs per token of our FLOP model (with attention) x tokens" : "6 x active parameters (embedding lookup excluded) x tokens"));
  w.attr("huber_delta", huber);
  w.attr("e_constraint", std::string(opt.positive_e ? "E > 0 (fitted as exp(log E))" : "E free"));
  w.attr("coverage", coverage);
  w.attr("bootstrap", static_cast<int64_t>(bootstrap));
  write_provenance(w);
  w.commit();
  std::cout << "written to " << out << "\n";
  return 0;
}

}  // namespace ufp4
