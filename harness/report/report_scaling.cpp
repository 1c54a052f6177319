// Figure 9: loss vs training compute for the MoE ladder, fitted L(C) = E + A (C/C0)^-alpha per recipe
// (from `ufp4 fit`), bootstrap bands, the BF16-relative gap and its extrapolation to the paper's
// compute, and the paper's two claims judged from the runs and from our fits with intervals. A fit of a
// registered campaign's run set (`ufp4 fit --campaign`) shows that campaign's registered verdicts, and
// the readings of its own below them as descriptive.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/fs.h"
#include "harness/analysis/campaign_stats.h"
#include "harness/analysis/fit.h"
#include "harness/analysis/stats.h"
#include "harness/io/array_io.h"
#include "harness/io/fit_files.h"
#include "harness/plan/campaign.h"
#include "harness/report/campaign_text.h"
#include "harness/report/plot.h"
#include "harness/report/report.h"
#include "models/model_config.h"

namespace ufp4 {

namespace {

struct PowerFit {
  std::vector<double> p;                   // E, logA, alpha
  std::vector<std::vector<double>> boot;   // bootstrap samples (empty: skipped resample)
  double c0 = 1, rmse = NAN;
  std::vector<std::array<double, 4>> points;
  // Row for row with points, where the fit file has them (ufp4 fit since the seeded ladder):
  // seed, non-embedding parameters, epochs, and the model's name.
  std::vector<std::array<double, 3>> runs;
  std::vector<std::string> models;
  std::string sources;
  double at(const std::vector<double>& q, double c) const { return q[0] + std::exp(q[1]) * std::pow(c / c0, -q[2]); }
};

PowerFit load_fit(const std::string& file, const std::string& recipe) {
  PowerFit f;
  const FittedForm power = read_fitted_form(file, "power", recipe);
  f.p = power.params;
  f.c0 = power.c0;
  f.rmse = power.rmse;
  f.boot = power.samples;
  for (const FitRun& r : read_fit_runs(file, recipe)) {
    f.points.push_back({r.compute_flops, r.active_params, r.tokens, r.loss});
    f.sources += r.source + "\n";
    if (r.model.empty()) continue;  // a file made before the runs/ rows
    f.runs.push_back({r.seed, r.non_embedding_params, r.epochs});
    f.models.push_back(r.model);
  }
  return f;
}

// One size of the ladder: its accounting and each recipe's loss by seed.
struct LadderSize {
  std::string model;
  double non_embedding = 0, active = 0, tokens = 0, epochs = 0, compute = 0;
  std::map<std::string, std::map<int64_t, double>> loss;  // recipe -> seed -> loss
  std::vector<double> losses(const std::string& r) const {
    std::vector<double> v;
    if (loss.count(r))
      for (const auto& [seed, l] : loss.at(r)) v.push_back(l);
    return v;
  }
  // The seeds both recipes have: a's and b's losses, seed for seed.
  std::pair<std::vector<double>, std::vector<double>> paired(const std::string& a, const std::string& b) const {
    std::vector<double> x, y;
    if (!loss.count(a) || !loss.count(b)) return {x, y};
    for (const auto& [seed, la] : loss.at(a)) {
      auto lb = loss.at(b).find(seed);
      if (lb == loss.at(b).end()) continue;
      x.push_back(la);
      y.push_back(lb->second);
    }
    return {x, y};
  }
  // Recipe r's BF16-relative gap in percent, seed for seed: 100 (L_r - L_bf16) / L_bf16.
  std::vector<double> gaps(const std::string& r) const {
    const auto [x, b] = paired(r, "bf16");
    std::vector<double> g;
    for (size_t i = 0; i < x.size(); ++i) g.push_back(100 * (x[i] - b[i]) / b[i]);
    return g;
  }
};

// The fit file's rows grouped by size, in order of compute.
std::vector<LadderSize> ladder_sizes(const std::map<std::string, PowerFit>& f) {
  std::vector<LadderSize> sizes;
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) {
    const PowerFit& x = f.at(r);
    for (size_t i = 0; i < x.points.size(); ++i) {
      auto it = std::find_if(sizes.begin(), sizes.end(), [&](const LadderSize& z) { return z.model == x.models[i] && z.tokens == x.points[i][2]; });
      if (it == sizes.end()) {
        sizes.push_back({x.models[i], x.runs[i][1], x.points[i][1], x.points[i][2], x.runs[i][2], x.points[i][0], {}});
        it = sizes.end() - 1;
      }
      it->loss[r][static_cast<int64_t>(x.runs[i][0])] = x.points[i][3];
    }
  }
  std::sort(sizes.begin(), sizes.end(), [](const LadderSize& a, const LadderSize& b) { return a.compute < b.compute; });
  return sizes;
}

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return v.empty() ? NAN : std::sqrt(s / static_cast<double>(v.size()));
}

// Seed-to-seed standard deviation of the loss: root mean square over sizes and recipes.
double seed_sd(const std::vector<LadderSize>& sizes) {
  std::vector<double> sd;
  for (const auto& z : sizes)
    for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) {
      const Interval m = mean_interval(z.losses(r));
      if (m.defined()) sd.push_back(m.sd);
    }
  return rms(sd);
}

// The ladder point by point, before any fit: per size, each recipe's loss over seeds and the paired
// differences the claims rest on (Student-t intervals over seeds, paired by seed across recipes).
// `registered`: per model, its registered claim's verdict as the campaign's report shows it (the column then
// shows that instead of this table's own unadjusted test).
std::string ladder_table(const std::vector<LadderSize>& sizes, const std::string& metric, const toml::table& figure8,
                         const std::map<std::string, std::string>& registered) {
  std::ostringstream os;
  os << "## The ladder, size by size\n\n" << metric << ", mean and 95% Student-t interval over seeds; differences paired by seed (same "
     << "initial weights and batches across recipes); gaps relative to bf16 of the same seed.\n\n"
     << "| model | non-emb params | active (with head) | tokens | tokens / non-emb param | epochs | seeds | bf16 | e2m1_ref | ufp4 | e2m1_ref gap | ufp4 gap | "
        "ufp4 - e2m1_ref (nats) | UFP4 below E2M1" << (registered.empty() ? "" : " (registered verdict)") << " |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<double> sd_diff;
  size_t seeds_min = SIZE_MAX;
  for (const auto& z : sizes) {
    const auto de = z.gaps("e2m1_ref"), du = z.gaps("ufp4");
    const auto [lu, le] = z.paired("ufp4", "e2m1_ref");
    const Interval d = paired_difference(lu, le);
    seeds_min = std::min(seeds_min, d.n);
    if (d.defined()) sd_diff.push_back(d.sd);
    os << "| " << z.model << " | " << fmt("%.2fM", z.non_embedding / 1e6) << " | " << fmt("%.2fM", z.active / 1e6) << " | "
       << fmt("%.1fM", z.tokens / 1e6) << " | " << fmt("%.1f", z.tokens / z.non_embedding) << " | "
       << (std::isnan(z.epochs) ? std::string("n/a") : fmt("%.2f", z.epochs)) << " | " << d.n << " | "
       << format_interval(mean_interval(z.losses("bf16"))) << " | " << format_interval(mean_interval(z.losses("e2m1_ref"))) << " | "
       << format_interval(mean_interval(z.losses("ufp4"))) << " | " << format_interval(mean_interval(de), "%+.2f%%") << " | "
       << format_interval(mean_interval(du), "%+.2f%%") << " | " << format_interval(d, "%+.4f") << " | "
       << (registered.empty() ? verdict_name(verdict(d, -1)) : registered.count(z.model) ? registered.at(z.model) : std::string("not registered")) << " |\n";
  }
  os << "\n";
  if (seeds_min >= 2 && seeds_min != SIZE_MAX)
    os << "Seed-to-seed standard deviation of the loss (root mean square over sizes and recipes): " << fmt("%.4f", seed_sd(sizes))
       << " nats; of the paired ufp4 - e2m1_ref difference: " << fmt("%.4f", rms(sd_diff)) << " nats, so at " << seeds_min
       << " seeds a size the minimal detectable difference (95%, 80% power) is " << fmt("%.4f", minimal_detectable_difference(rms(sd_diff), seeds_min))
       << " nats. ";
  // The paper publishes no per-point values for Figure 9; the effect size beside ours is its Figure 8
  // MoE gap difference, converted to nats at our largest size's bf16 loss.
  const double pe = figure8["moe"]["e2m1_ref"].value_or(NAN), pu = figure8["moe"]["ufp4"].value_or(NAN);
  if (!sizes.empty() && !std::isnan(pe) && !std::isnan(pu) && sizes.back().loss.count("bf16")) {
    const double lb = mean_interval(sizes.back().losses("bf16")).mean;
    os << "The paper gives no per-point values for Figure 9; its Figure 8 (" << figure8["moe"]["model"].value_or<std::string>("MoE")
       << ") puts UFP4's BF16-relative gap " << fmt("%+.2f", pu - pe) << " points from E2M1's, " << fmt("%+.4f", (pu - pe) / 100 * lb)
       << " nats at our largest size's bf16 loss.";
  }
  os << "\n";
  return os.str();
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

// The fit file's three recipe fits, and what the sections read beside them.
struct LossFits {
  std::map<std::string, PowerFit> f;              // by recipe
  double coverage = NAN, lo_q = NAN, hi_q = NAN;  // the bootstrap intervals' coverage and their quantiles
  double cmin = INFINITY, cmax = 0;               // the runs' compute range
};

LossFits load_fits(const std::string& fits) {
  LossFits x;
  x.coverage = read_h5_double_attr(fits, "coverage");
  x.lo_q = (1 - x.coverage) / 2, x.hi_q = 1 - x.lo_q;
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) x.f[r] = load_fit(fits, r);
  for (auto& [r, fit] : x.f)
    for (const auto& p : fit.points) x.cmin = std::min(x.cmin, p[0]), x.cmax = std::max(x.cmax, p[0]);
  return x;
}

// "## Runs" where the fit file has no sizes: every run's point.
std::string runs_table(const std::map<std::string, PowerFit>& f) {
  std::ostringstream os;
  os << "## Runs\n\n| recipe | active params | tokens | compute (FLOPs) | loss |\n|---|---|---|---|---|\n";
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"})
    for (const auto& p : f.at(r).points)
      os << "| " << r << " | " << fmt("%.1fM", p[1] / 1e6) << " | " << fmt("%.2fM", p[2] / 1e6) << " | " << fmt("%.3e", p[0]) << " | "
         << fmt("%.4f", p[3]) << " |\n";
  return os.str();
}

// "## Fits": each recipe's parameters with their bootstrap intervals.
std::string fits_table(const LossFits& fits) {
  const auto& f = fits.f;
  const double lo_q = fits.lo_q, hi_q = fits.hi_q;
  std::ostringstream os;
  os << "\n## Fits\n\n| recipe | E | A (at C0) | alpha | C0 | rmse |\n|---|---|---|---|---|---|\n";
  auto ci = [&](const PowerFit& x, size_t j, bool expo) {
    std::vector<double> v;
    for (const auto& b : x.boot)
      if (!b.empty()) v.push_back(expo ? std::exp(b[j]) : b[j]);
    const double est = expo ? std::exp(x.p[j]) : x.p[j];
    return fmt("%.4g", est) + " [" + fmt("%.4g", quantile(v, lo_q)) + ", " + fmt("%.4g", quantile(v, hi_q)) + "]";
  };
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"})
    os << "| " << r << " | " << ci(f.at(r), 0, false) << " | " << ci(f.at(r), 1, true) << " | " << ci(f.at(r), 2, false) << " | " << fmt("%.3e", f.at(r).c0) << " | " << fmt("%.4f", f.at(r).rmse) << " |\n";
  return os.str();
}

// Paired bootstrap distributions of derived quantities at a compute value.
template <class Derived>
std::vector<double> paired_bootstrap(const std::map<std::string, PowerFit>& f, double c, Derived&& g) {
  std::vector<double> v;
  const size_t n = std::min({f.at("bf16").boot.size(), f.at("e2m1_ref").boot.size(), f.at("ufp4").boot.size()});
  for (size_t i = 0; i < n; ++i) {
    const auto &b = f.at("bf16").boot[i], &e = f.at("e2m1_ref").boot[i], &u = f.at("ufp4").boot[i];
    if (b.empty() || e.empty() || u.empty()) continue;
    v.push_back(g(f.at("bf16").at(b, c), f.at("e2m1_ref").at(e, c), f.at("ufp4").at(u, c)));
  }
  return v;
}

double gap(double l, double b) { return 100 * (l - b) / b; }

// "[lo, hi]": the bootstrap interval of v, each end printf-formatted with f0.
std::string bootstrap_interval(const LossFits& fits, const std::vector<double>& v, const char* f0) {
  return "[" + fmt(f0, quantile(v, fits.lo_q)) + ", " + fmt(f0, quantile(v, fits.hi_q)) + "]";
}

// A fit that misses the runs by much more than their seed noise does not describe them: its verdicts
// and extrapolations say nothing (the power law holds only once a ladder nears its asymptote).
struct FitQuality {
  double worst_rmse = 0;  // the largest rmse of the three fits
  double noise = NAN;     // the seed-to-seed standard deviation (NaN without sizes)
  bool ok = true;
};

FitQuality fit_quality(const LossFits& fits, bool by_size, const std::vector<LadderSize>& sizes) {
  FitQuality q;
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) q.worst_rmse = std::max(q.worst_rmse, fits.f.at(r).rmse);
  q.noise = by_size ? seed_sd(sizes) : NAN;
  q.ok = !(q.worst_rmse > 2 * q.noise);
  return q;
}

// Where the gap table evaluates the fits: the measured range's ends and the paper's targets (extrapolated).
std::vector<std::pair<std::string, double>> gap_points(const toml::table& paper, std::map<std::string, std::string>& attrs, double cmin,
                                                       double cmax) {
  std::vector<std::pair<std::string, double>> at = {{"smallest run", cmin}, {"largest run", cmax}};
  if (auto t = paper["targets"].as_array())
    for (auto&& e : *t) {
      auto tt = e.as_table();
      // Same compute convention as the fit that produced `fits`.
      const ModelConfig mc = model_config((*tt)["model"].value_or<std::string>(""));
      const bool attn = attrs["compute"].find("with attention") != std::string::npos;
      at.push_back({(*tt)["name"].value_or<std::string>("") + " (extrapolated)", train_flops_per_token(mc, attn) * (*tt)["tokens"].value_or(NAN)});
    }
  return at;
}

// "## BF16-relative gap": each recipe's gap and ufp4 - e2m1_ref at each point, with paired bootstrap intervals.
std::string gap_table(const LossFits& fits, const std::vector<std::pair<std::string, double>>& at, const toml::table& paper, bool fit_ok) {
  const auto& f = fits.f;
  std::ostringstream os;
  os << "\n## BF16-relative gap, measured range and extrapolation\n\n| compute | where | e2m1_ref gap | ufp4 gap | ufp4 - e2m1_ref loss |\n|---|---|---|---|---|\n";
  for (const auto& [where, c] : at) {
    const double b = f.at("bf16").at(f.at("bf16").p, c), e = f.at("e2m1_ref").at(f.at("e2m1_ref").p, c), u = f.at("ufp4").at(f.at("ufp4").p, c);
    os << "| " << fmt("%.2e", c) << " | " << where << " | " << fmt("%+.3f%%", gap(e, b)) << " " << bootstrap_interval(fits, paired_bootstrap(f, c, [&](double B, double E, double) { return gap(E, B); }), "%+.3f%%")
       << " | " << fmt("%+.3f%%", gap(u, b)) << " " << bootstrap_interval(fits, paired_bootstrap(f, c, [&](double B, double, double U) { return gap(U, B); }), "%+.3f%%") << " | "
       << fmt("%+.4f", u - e) << " " << bootstrap_interval(fits, paired_bootstrap(f, c, [](double, double E, double U) { return U - E; }), "%+.4f") << " |\n";
  }
  if (auto notes = paper["targets_note"].value<std::string>()) os << "\n" << *notes << "\n";
  if (!fit_ok) os << "\nThese are the fits' values only: the fits do not describe the ladder (see the claims below), so they predict nothing.\n";
  return os.str();
}

// A claim's answer as a verdict ("**holds**"), or, beside a campaign's registered verdicts, as a reading
// that is not one ("holds (descriptive)").
std::string shown(const std::string& answer, bool descriptive) { return descriptive ? answer + " (descriptive)" : "**" + answer + "**"; }

// The campaign the fits were made from (`ufp4 fit --campaign`, the file's attribute "campaign"): its run
// set now and its claims' registered tests.
struct RegisteredCampaign {
  RunSet set;
  std::vector<ClaimTest> tests;
};

// The result files a fit read, each with the content hash it had ("path (model, commit c, content h)"
// lines of each recipe's sources; "" where a line has none).
std::map<std::string, std::string> fitted_files(const LossFits& fits) {
  std::map<std::string, std::string> files;
  for (const auto& [recipe, fit] : fits.f) {
    std::istringstream in(fit.sources);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const size_t content = line.find(", content ");
      files[rel(line.substr(0, line.find(" (")))] = content == std::string::npos ? "" : line.substr(content + 10, line.find(')', content) - content - 10);
    }
  }
  return files;
}

// Loads the campaign and checks that the fit holds exactly its run set's verified results, each with the
// content it has now: a fit made before runs were added, or before a file was replaced, would put numbers
// of another run set beside the campaign's verdicts. Throws naming the fit file, the difference, a file
// that differs and what makes the fit again.
RegisteredCampaign registered_campaign(const std::string& fits_file, const std::string& campaign, const LossFits& fits) {
  if (!file_exists(campaign))
    throw Error("figure9: " + rel(fits_file) + " was fitted from the campaign " + campaign + ", which is not there (render from the checkout's root)");
  RegisteredCampaign r{Campaign::load(campaign).resolve(), {}};
  const CampaignRuns runs = read_campaign_runs(r.set);
  std::map<std::string, std::string> verified;  // path -> content hash
  for (const auto& [model, recipes] : runs)
    for (const auto& [recipe, seeds] : recipes)
      for (const auto& [seed, m] : seeds) verified[rel(m.path)] = m.content_sha256;
  const std::map<std::string, std::string> fitted = fitted_files(fits);
  size_t not_fitted = 0, gone = 0, changed = 0;
  std::string example;
  for (const auto& [path, content] : verified) {
    const auto f = fitted.find(path);
    const bool differs = f == fitted.end() || f->second != content;
    not_fitted += f == fitted.end();
    changed += f != fitted.end() && differs;
    if (differs && example.empty()) example = path;
  }
  for (const auto& [path, content] : fitted)
    if (!verified.count(path)) {
      ++gone;
      if (example.empty()) example = path;
    }
  if (not_fitted + gone + changed > 0)
    throw Error("figure9: " + rel(fits_file) + " fits " + std::to_string(fitted.size()) + " runs, and " + campaign + " has " +
                std::to_string(verified.size()) + " verified now (" + std::to_string(not_fitted) + " not in the fit, " + std::to_string(gone) +
                " in the fit and not in its run set, " + std::to_string(changed) + " changed since; e.g. " + example + "): fit again with `ufp4 fit --campaign " +
                campaign + " --out " + rel(fits_file) + "` and the options it was made with");
  r.tests = test_claims(r.set.registration, runs);
  return r;
}

// Each model's per-size claim's verdict as the campaign's report shows it (trend claims have no one model).
std::map<std::string, std::string> verdicts_by_model(const RegisteredCampaign& c) {
  std::map<std::string, std::string> out;
  for (const auto& t : c.tests)
    if (!t.claim.trend()) out[t.claim.model] = shown_verdict(c.set, c.tests, t);
  return out;
}

// ---- verdicts from the runs themselves (no fit) ----
// "## The paper's claims, judged from the runs": each size's seed-paired differences, sizes as the unit.
// `descriptive`: a registered campaign's verdicts are shown above it, and this reading (no family correction,
// not registered) is labelled as such, its answers not set as verdicts.
std::string run_claims(const std::vector<LadderSize>& sizes, bool descriptive) {
  std::ostringstream os;
  os << "\n## The paper's claims, judged from the runs" << (descriptive ? " (descriptive, not registered)" : "") << "\n\n";
  if (descriptive)
    os << "Another reading of the same runs, not the registered test: sizes as the unit, no Holm correction. The registered verdicts "
          "above decide each claim.\n\n";
  // The unit is the size: each contributes the mean of its seed-paired differences, so seeds of one
  // size are not counted as independent evidence about the ladder (t intervals over sizes).
  std::vector<double> diff;
  std::map<std::string, int> per_size;
  size_t seeds_min = SIZE_MAX;
  for (const auto& z : sizes) {
    const auto [u, e] = z.paired("ufp4", "e2m1_ref");
    const Interval d = paired_difference(u, e);
    seeds_min = std::min(seeds_min, d.n);
    if (d.n > 0) diff.push_back(d.mean);
    ++per_size[verdict_name(verdict(d, -1))];
  }
  // A verdict needs at least three seeds a size, here as everywhere: with fewer, the spread over
  // sizes is not the run-to-run spread, and every claim is inconclusive.
  const bool seeded = seeds_min >= 3 && seeds_min != SIZE_MAX;
  auto judged = [&](Verdict v) { return shown(verdict_name(seeded ? v : Verdict::kInconclusive), descriptive); };
  const Interval over = mean_interval(diff);
  // Holds when the mean over sizes is below zero and no size says otherwise.
  const Verdict v = per_size["contradicted"] > 0 ? (verdict(over, -1) == Verdict::kContradicted ? Verdict::kContradicted : Verdict::kInconclusive)
                                                   : verdict(over, -1);
  if (!seeded)
    os << "Seeds a size: " << (seeds_min == SIZE_MAX ? 0 : seeds_min) << ". A verdict needs at least three, so every claim below is "
       << shown("inconclusive", descriptive) << " whatever its interval says.\n\n";
  os << "Each size counts once (the mean over its seeds), and intervals are Student-t over the " << sizes.size() << " sizes.\n\n"
     << "- \"UFP4 below E2M1 over the measured range\" (paper: yes): " << judged(v) << " — ufp4 - e2m1_ref, mean over sizes of "
     << "the seed-paired differences: " << format_interval(over, "%+.4f") << " nats; size by size " << per_size["holds"] << " hold, "
     << per_size["inconclusive"] << " inconclusive, " << per_size["contradicted"] << " contradicted.\n";
  for (const char* r : {"e2m1_ref", "ufp4"}) {
    std::vector<double> x, y;
    for (const auto& z : sizes) {
      const Interval g = mean_interval(z.gaps(r));
      if (g.n > 0) x.push_back(std::log10(z.compute)), y.push_back(g.mean);
    }
    const Interval slope = slope_interval(x, y);
    os << "- \"The gap to BF16 shrinks with compute\" (paper: yes), " << r << ": " << judged(verdict(slope, -1))
       << " — least-squares slope of the size's mean gap on log10 compute: " << format_interval(slope, "%+.2f") << " points a decade.\n";
  }
  return os.str();
}

// "## The paper's claims, judged from our fits": each claim from the fits over the measured range, with
// paired bootstrap intervals; inconclusive with too few seeds or fits that miss the runs.
std::string fit_claims(const LossFits& fits, const FitQuality& quality, bool descriptive) {
  const auto& f = fits.f;
  const double cmin = fits.cmin, cmax = fits.cmax, lo_q = fits.lo_q, hi_q = fits.hi_q, coverage = fits.coverage;
  const bool fit_ok = quality.ok;
  std::ostringstream os;
  os << "\n## The paper's claims, judged from our fits" << (descriptive ? " (descriptive, not registered)" : "") << "\n\n";
  if (descriptive) os << "The fits' reading of the claims, not the registered test; the registered verdicts above decide.\n\n";
  std::vector<double> grid;
  for (int i = 0; i <= 20; ++i) grid.push_back(cmin * std::pow(cmax / cmin, i / 20.0));
  // Seeds per ladder point (runs of one size and recipe): a verdict needs at least three; with fewer,
  // the bootstrap over sizes measures the fit, not the run-to-run spread, and every claim is inconclusive.
  size_t seeds = SIZE_MAX;
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) {
    std::set<std::pair<double, double>> points_of_size;
    for (const auto& p : f.at(r).points) points_of_size.insert({p[1], p[2]});
    seeds = std::min(seeds, points_of_size.empty() ? size_t(0) : f.at(r).points.size() / points_of_size.size());
  }
  const bool enough_seeds = seeds >= 3;
  if (!enough_seeds)
    os << "Runs per ladder point: " << seeds << " (one seed). A verdict needs at least three seeds a point, so every claim below is "
       << shown("inconclusive", descriptive) << " whatever its interval says; the intervals bootstrap over sizes only.\n\n";
  if (!fit_ok)
    os << "The fits miss the runs by up to " << fmt("%.4f", quality.worst_rmse) << " nats (rmse), more than twice the seed-to-seed standard deviation ("
       << fmt("%.4f", quality.noise) << "): the power law does not describe this ladder, so every claim below is " << shown("inconclusive", descriptive)
       << " whatever its interval says, and the extrapolations above are not predictions. "
       << (descriptive ? "The registered verdicts above stand on their own.\n\n" : "The verdicts from the runs above stand on their own.\n\n");
  auto judged = [&](bool holds, bool contradicted) {
    return shown(!enough_seeds || !fit_ok || (!holds && !contradicted) ? "inconclusive" : holds ? "holds" : "contradicted", descriptive);
  };
  double worst = -INFINITY, worst_hi = -INFINITY, worst_lo = -INFINITY;
  for (double c : grid) {
    worst = std::max(worst, f.at("ufp4").at(f.at("ufp4").p, c) - f.at("e2m1_ref").at(f.at("e2m1_ref").p, c));
    const auto diff = paired_bootstrap(f, c, [](double, double E, double U) { return U - E; });
    worst_hi = std::max(worst_hi, quantile(diff, hi_q));
    worst_lo = std::max(worst_lo, quantile(diff, lo_q));
  }
  os << "- \"UFP4 below E2M1 over the measured range\" (paper: yes): " << judged(worst_hi < 0, worst_lo > 0) << " — the largest fitted "
     << "L_ufp4 - L_e2m1 over [" << fmt("%.2e", cmin) << ", " << fmt("%.2e", cmax) << "] FLOPs is " << fmt("%+.4f", worst) << "; its upper "
     << fmt("%.0f", 100 * coverage) << "% bound is " << fmt("%+.4f", worst_hi) << (worst_hi < 0 ? " (below zero)" : " (not below zero)") << ".\n";
  for (const char* r : {"e2m1_ref", "ufp4"}) {
    auto g = [&](double c) { return gap(f.at(r).at(f.at(r).p, c), f.at("bf16").at(f.at("bf16").p, c)); };
    const std::string rr = r;
    std::vector<double> shrink;
    const size_t n = std::min(f.at("bf16").boot.size(), f.at(r).boot.size());
    for (size_t i = 0; i < n; ++i) {
      const auto &b = f.at("bf16").boot[i], &x = f.at(r).boot[i];
      if (b.empty() || x.empty()) continue;
      shrink.push_back(gap(f.at(r).at(x, cmin), f.at("bf16").at(b, cmin)) - gap(f.at(r).at(x, cmax), f.at("bf16").at(b, cmax)));
    }
    const double s = g(cmin) - g(cmax);
    os << "- \"The gap to BF16 shrinks with compute\" (paper: yes), " << rr << ": " << judged(quantile(shrink, lo_q) > 0, quantile(shrink, hi_q) < 0)
       << " — gap " << fmt("%+.3f%%", g(cmin)) << " at the smallest run, " << fmt("%+.3f%%", g(cmax)) << " at the largest; shrinkage "
       << fmt("%+.3f", s) << " points " << bootstrap_interval(fits, shrink, "%+.3f") << ".\n";
  }
  return os.str();
}

// Figure 9's Markdown: the runs, the fits and their bootstrap bands over the range out to the farthest
// point of the gap table; "" when figures is empty.
std::string figure9_markdown(const LossFits& fits, const std::vector<std::pair<std::string, double>>& at, const std::string& figures) {
  const auto& f = fits.f;
  const double cmin = fits.cmin, cmax = fits.cmax, lo_q = fits.lo_q, hi_q = fits.hi_q;
  std::ostringstream os;
  Figure fig;
  fig.title = "Figure 9: loss vs compute (points: runs; lines: fits; dashed: bootstrap band)";
  fig.xlabel = "training compute (FLOPs)";
  fig.ylabel = "loss";
  fig.logx = true;
  double ctop = cmax;
  for (const auto& a : at) ctop = std::max(ctop, a.second);
  std::vector<double> cs;
  for (int i = 0; i <= 60; ++i) cs.push_back(cmin / 2 * std::pow(ctop * 2 / (cmin / 2), i / 60.0));
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) {
    Series pts, line, lo, hi;
    pts.title = std::string(r) + " runs";
    pts.style = "points pt 7";
    for (const auto& p : f.at(r).points) pts.x.push_back(p[0]), pts.y.push_back(p[3]);
    line.title = std::string(r) + " fit";
    line.style = "lines lw 2";
    lo.title = hi.title = "";
    lo.style = hi.style = "lines dt 2";
    for (double c : cs) {
      line.x.push_back(c), line.y.push_back(f.at(r).at(f.at(r).p, c));
      std::vector<double> v;
      for (const auto& b : f.at(r).boot)
        if (!b.empty()) v.push_back(f.at(r).at(b, c));
      lo.x.push_back(c), lo.y.push_back(quantile(v, lo_q));
      hi.x.push_back(c), hi.y.push_back(quantile(v, hi_q));
    }
    for (auto* s : {&pts, &line, &lo, &hi}) fig.series.push_back(*s);
  }
  if (!figures.empty()) {
    make_dirs(figures);
    const std::string why = render_svg(fig, figures + "/figure9.svg");
    os << "\n" << (why.empty() ? "![Figure 9](figures/figure9.svg)" : "_(figure skipped: " + why + ")_") << "\n";
  }
  return os.str();
}

}  // namespace

std::string report_figure9(const std::string& root, const std::string& fits, const std::string& figures) {
  toml::table paper = load_paper(root + "/reports/paper/figure9.toml");
  if (!file_exists(fits)) throw Error("figure9: no fit results at " + fits + " (make reproduce-figure-9 creates them)");
  verify_h5_content(fits);
  auto attrs = read_h5_string_attrs(fits);
  const LossFits fitted = load_fits(fits);
  std::ostringstream os;
  os << "# Figure 9: loss vs training compute, MoE ladder\n\nOurs: " << attrs["metric"] << " of each run of the ladder against compute ("
     << attrs["compute"] << "), fitted per recipe with L(C) = E + A (C / C0)^-alpha (`ufp4 fit`, Levenberg-Marquardt"
     << (read_h5_double_attr(fits, "huber_delta") > 0 ? ", Huber loss" : "")
     << (attrs.count("e_constraint") ? ", " + attrs["e_constraint"] : std::string()) << "); intervals: " << fmt("%.0f", 100 * fitted.coverage)
     << "% bootstrap over sizes, and over seeds within a size where there are several, resamples paired across recipes. Paper: " << paper["source"].value_or<std::string>("") << ".\n\n";

  const bool by_size = !fitted.f.at("bf16").runs.empty() && !fitted.f.at("e2m1_ref").runs.empty() && !fitted.f.at("ufp4").runs.empty();
  const std::vector<LadderSize> sizes = by_size ? ladder_sizes(fitted.f) : std::vector<LadderSize>{};
  const bool registered = attrs.count("campaign") > 0;
  const std::optional<RegisteredCampaign> campaign =
      registered ? std::optional<RegisteredCampaign>(registered_campaign(fits, attrs["campaign"], fitted)) : std::nullopt;
  if (by_size)
    os << ladder_table(sizes, attrs["metric"], load_paper(root + "/reports/paper/figure8.toml"),
                       campaign ? verdicts_by_model(*campaign) : std::map<std::string, std::string>{});
  else os << runs_table(fitted.f);

  os << fits_table(fitted);
  const FitQuality quality = fit_quality(fitted, by_size, sizes);
  const std::vector<std::pair<std::string, double>> at = gap_points(paper, attrs, fitted.cmin, fitted.cmax);
  os << gap_table(fitted, at, paper, quality.ok);

  // ---- verdicts ----
  if (campaign)
    os << verdicts_section(campaign->set, campaign->tests, campaign->set.registration.alpha) << "\nThe campaign's registered tests ("
       << "`" << attrs["campaign"] << "`; its report, `build/ufp4 report " << campaign->set.report << " --campaign " << attrs["campaign"]
       << "`, shows the same table). The sections below read the runs and the fits other ways.\n";
  if (by_size) os << run_claims(sizes, registered);
  os << fit_claims(fitted, quality, registered);

  // ---- figure ----
  os << figure9_markdown(fitted, at, figures);
  std::vector<std::string> sources = {rel(fits) + " (commit " + attrs["git_commit"] + ", " + attrs["device"] + ")"};
  if (campaign) {  // the verdicts above come from the registration and the seeds its power rule decided
    sources.push_back(rel(attrs["campaign"]) + " (the campaign's registration)");
    if (!campaign->set.seeds.source.empty()) sources.push_back(rel(campaign->set.seeds.source) + " (the seeds its power rule decided)");
  }
  for (const char* r : {"bf16", "e2m1_ref", "ufp4"}) {
    std::istringstream in(fitted.f.at(r).sources);
    for (std::string line; std::getline(in, line);) sources.push_back(rel(line));
  }
  os << footer("make reproduce-figure-9", sources);
  return os.str();
}

}  // namespace ufp4
