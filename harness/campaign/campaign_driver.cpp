#include "harness/campaign/campaign_driver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/sha256.h"
#include "harness/analysis/campaign_stats.h"
#include "harness/campaign/run_times.h"
#include "harness/data/data.h"
#include "harness/io/run_compare.h"
#include "harness/plan/run_files.h"
#include "harness/plan/packing.h"

namespace ufp4 {

namespace {

// The data each run trains on, prepared here when a manifest says how (prepare_plans: each plan then names
// its data by content and must be trainable), and compared with the manifest the campaign pinned: a
// corpus prepared anew that differs gives every run a new id.
void prepare_data(const Campaign& c, std::vector<RunPlan>& plans) {
  prepare_plans(plans, nullptr);
  std::set<std::string> done;
  for (const auto& p : plans) {
    const std::string& dir = p.data_source.path;
    if (!done.insert(dir).second) continue;
    const std::string pin = pinned_data_manifest(dir);
    if (!pin.empty() && p.identity.data_sha256 != sha256_hex(read_text_file(pin)))
      log_warn("campaign " + c.name + ": " + dir + "/data.toml differs from the data manifest the campaign pinned (" + pin +
               "): its runs get new run ids and the committed results do not count for them");
  }
}

// Per model: the step at which the campaign's slowest recipe reaches the transition level on average
// (transition_delays), and the runs' length: a campaign should end at least ~1,000 steps after it.
struct TransitionMargin {
  std::string model;
  double latest = NAN;
  int64_t steps = 0;
};
std::vector<TransitionMargin> transition_margins(const CampaignRuns& runs, const std::string& baseline) {
  const std::vector<TransitionDelay> delays = transition_delays(runs, baseline);
  std::vector<TransitionMargin> out;
  for (const auto& [model, rs] : runs) {
    TransitionMargin m;
    m.model = model;
    for (const auto& d : delays)
      if (d.model == model && d.steps.n) m.latest = std::isnan(m.latest) ? d.steps.mean : std::max(m.latest, d.steps.mean);
    for (const auto& [recipe, seeds] : rs)
      for (const auto& [seed, r] : seeds) m.steps = std::max(m.steps, r.steps);
    if (!std::isnan(m.latest)) out.push_back(m);
  }
  return out;
}

// Per model, where the transition lies against the runs' end, and whether the baseline's seeds have come
// together again by the end (seed_spreads): a size can pass the transition and still end in a later,
// seed-dependent descent, which the transition level does not see.
void print_transition(const Campaign& c, const CampaignRuns& runs) {
  const std::string baseline = baseline_recipe(c.registration);
  for (const auto& m : transition_margins(runs, baseline))
    std::printf("%s: the slowest recipe reaches the transition level at step %.0f on average; the runs end at step %lld (%+.0f steps after)%s\n",
                m.model.c_str(), m.latest, static_cast<long long>(m.steps), static_cast<double>(m.steps) - m.latest,
                static_cast<double>(m.steps) - m.latest < 1000 ? "  WARNING: less than 1,000 steps past the transition: seed noise stays high" : "");
  for (const auto& s : seed_spreads(runs))
    if (s.recipe == baseline && s.sd.size() >= 2)
      std::printf("%s: the %s seeds' validation sd ends at %.3f nats, %.2f of its largest (%zu seeds)%s\n", s.model.c_str(), baseline.c_str(), s.sd.back(),
                  s.end_to_largest(), s.seeds.back(),
                  s.not_fallen() ? "  WARNING: the seeds have not come together by the end: the paired sd stays high (a seed-dependent descent)" : "");
}

// Before the seeds are decided: what the registered rule gives on the complete seeds so far, so that the
// device time past the pilot can be planned. Only a preview: the decision waits for the whole pilot.
void print_seed_preview(const Campaign& c, const RunSet& set, const CampaignRuns& runs) {
  if (c.seeds_decided()) return;
  const std::vector<ClaimTest> tests = test_claims(c.registration, runs);
  SeedPlan policy = c.seeds;
  size_t fewest = 0;
  for (const auto& t : tests)
    if (t.claim.powered) fewest = fewest == 0 ? t.diff.n : std::min(fewest, t.diff.n);
  if (fewest < 2) return;  // no powered claim, or one without two complete seeds: no sd to plan from
  policy.pilot = static_cast<int64_t>(fewest);
  const SeedPlan preview = plan_seeds(policy, c.registration, tests);
  std::printf("\nthe registered power rule on the complete seeds so far (a preview; the seeds are decided once all %lld pilot seeds are in):\n",
              static_cast<long long>(c.seeds.pilot));
  for (const auto& t : tests)
    if (preview.pilot_sd.count(t.claim.id))
      std::printf("  claim %s: paired sd %.3f pp over %zu seeds: %lld seeds for the power against %.3f pp\n", t.claim.id.c_str(),
                  preview.pilot_sd.at(t.claim.id), t.diff.n, static_cast<long long>(preview.seeds_for_power.at(t.claim.id)),
                  std::fabs(t.claim.effect_of_interest));
  double total_runs = 0, total_tokens = 0;
  for (const auto& [model, n] : preview.seeds) {
    double runs_a_seed = 0, tokens_a_seed = 0;  // from the planned runs of seed 1
    for (const auto& r : set.runs)
      if (r.model == model && r.seed == 1) ++runs_a_seed, tokens_a_seed += static_cast<double>(r.train_tokens);
    const double past = static_cast<double>(std::max<int64_t>(0, n - c.seeds.pilot));
    std::printf("  %s: %lld seeds within [%lld, %lld]: %.0f runs past the pilot, %.3g tokens\n", model.c_str(), static_cast<long long>(n),
                static_cast<long long>(c.seeds.min), static_cast<long long>(c.seeds.max), past * runs_a_seed, past * tokens_a_seed);
    total_runs += past * runs_a_seed, total_tokens += past * tokens_a_seed;
  }
  std::printf("  in all %.0f runs past the pilot, %.3g tokens (runs that a folder this campaign reads holds are read, not trained)\n", total_runs,
              total_tokens);
}

// The registered gate on the pilot: every model's runs end at least transition_gate steps after its
// slowest recipe reaches the transition level. False (and why, printed) when one does not.
bool pilot_passes_transition_gate(const Campaign& c) {
  if (c.seeds.transition_gate <= 0) return true;
  bool ok = true;
  for (const auto& m : transition_margins(read_campaign_runs(c.resolve(/*pilot_only=*/true)), baseline_recipe(c.registration)))
    if (static_cast<double>(m.steps) - m.latest < static_cast<double>(c.seeds.transition_gate)) {
      std::printf("campaign %s: %s: the pilot's runs end %.0f steps after the slowest recipe reaches the transition level (step %.0f), fewer than the "
                  "registered %lld (%s [seeds] transition_gate): the design fails for this size; the seeds are not decided and no seed past the "
                  "pilot is trained (register the campaign again)\n",
                  c.name.c_str(), m.model.c_str(), static_cast<double>(m.steps) - m.latest, m.latest, static_cast<long long>(c.seeds.transition_gate),
                  c.path.c_str());
      ok = false;
    }
  return ok;
}

}  // namespace

int campaign_plan(const Campaign& c) {
  const RunSet set = c.resolve();
  std::printf("campaign %s (%s): %zu runs, %zu with results, %zu missing; results in %s\n", c.name.c_str(), c.path.c_str(), set.runs.size(),
              set.runs.size() - set.missing(), set.missing(), c.results_dir.c_str());
  std::printf("seeds: pilot 1-%lld, then by the registered power rule within [%lld, %lld]: %s\n", static_cast<long long>(c.seeds.pilot),
              static_cast<long long>(c.seeds.min), static_cast<long long>(c.seeds.max),
              c.seeds_decided() ? ("decided in " + c.seeds.source).c_str() : "not decided yet (the pilot decides them)");
  for (const auto& [model, n] : c.seeds.seeds) std::printf("  %s: %lld seeds\n", model.c_str(), static_cast<long long>(n));
  for (const auto& [claim, sd] : c.seeds.pilot_sd)
    std::printf("  claim %s: pilot paired sd %.4f pp, %lld seeds for the power\n", claim.c_str(), sd,
                static_cast<long long>(c.seeds.seeds_for_power.at(claim)));
  std::printf("\n%-40s %-17s %-14s %-10s %6s %s\n", "run", "run id", "model", "recipe", "seed", "results");
  for (const auto& r : set.runs)
    std::printf("%-40s %-17s %-14s %-10s %6lld %s\n", r.name.c_str(), r.run_id.c_str(), r.model.c_str(), r.recipe.c_str(), static_cast<long long>(r.seed),
                r.path.empty() ? "missing" : r.path.c_str());
  for (const auto& why : set.ignored) std::printf("ignored: %s\n", why.c_str());
  std::vector<std::pair<std::string, double>> missing;
  for (const auto& r : set.runs)
    if (r.path.empty()) missing.emplace_back(r.model, static_cast<double>(r.train_tokens));
  if (const std::string packed = packed_estimate(missing, repository_root() + "/results/bench/packing.csv"); !packed.empty())
    std::printf("\nthe missing runs side by side (--gpus N, the packing table results/bench/packing.csv):\n%s", packed.c_str());
  const CampaignRuns runs = read_campaign_runs(set);  // every result file read once, for both
  print_transition(c, runs);
  print_seed_preview(c, set, runs);
  return 0;
}

namespace {

// The runs this call trains: not those a folder the campaign reads holds (another campaign's, the same
// run id), nor, unless forced, those whose results are in the campaign's folder already (a child started
// for one would only append "results exist" to its committed log).
std::vector<RunPlan> runs_to_train(const Campaign& c, std::vector<RunPlan> ps, bool force) {
  const size_t before = ps.size();
  ps.erase(std::remove_if(ps.begin(), ps.end(), [&](const RunPlan& p) { return !c.read_result(p).empty(); }), ps.end());
  if (ps.size() < before)
    log_info("campaign " + c.name + ": " + std::to_string(before - ps.size()) + " of " + std::to_string(before) + " runs are read from another campaign's folder");
  const size_t unread = ps.size();
  if (!force) ps.erase(std::remove_if(ps.begin(), ps.end(), [](const RunPlan& p) { return !find_results(p).empty(); }), ps.end());
  if (ps.size() < unread) log_info("campaign " + c.name + ": " + std::to_string(unread - ps.size()) + " runs have results already");
  return ps;
}



// Trains the planned runs with the options; the children train one run each with --only and --run-id.
RunQueueOutcome train(const Campaign& c, std::vector<RunPlan> plans, RunQueueOptions q, const std::string& expect_id = "") {
  prepare_data(c, plans);
  for (const auto& p : plans) check_planned_as(p, expect_id, "campaign run");
  const std::string exe = shell_quote(executable_dir() + "/ufp4");
  return train_queue(plans, [&](size_t i) {
    return exe + " campaign run " + shell_quote(c.path) + " --only " + shell_quote(plans[i].name) + " --run-id " + plans[i].run_id +
           (q.run.device.empty() ? "" : " --device " + shell_quote(q.run.device));
  }, q);
}



// The pilot in, no seeds decided yet: the registered rule decides them and writes the seeds file.
void decide_seeds(Campaign& c) {
  const RunSet pilot = c.resolve(/*pilot_only=*/true);
  if (pilot.missing() > 0) return;
  const std::vector<ClaimTest> tests = test_claims(c.registration, read_campaign_runs(pilot));
  const SeedPlan plan = plan_seeds(c.seeds, c.registration, tests);
  write_seed_plan(c, plan);
  for (const auto& t : tests)
    if (plan.pilot_sd.count(t.claim.id))  // a powered claim (the others do not set the seeds)
      log_info("campaign " + c.name + ": claim " + t.claim.id + ": pilot paired sd " + std::to_string(plan.pilot_sd.at(t.claim.id)) + " pp, " +
             std::to_string(plan.seeds_for_power.at(t.claim.id)) + " seeds for the power against " + std::to_string(t.claim.effect_of_interest) + " pp (" +
             (t.claim.paper_sized() ? "the paper's effect" : "the registered effect of interest") + ")");
  for (const auto& [model, n] : plan.seeds) log_info("campaign " + c.name + ": " + model + ": " + std::to_string(n) + " seeds");
  c = Campaign::load(c.path);
}

}  // namespace

bool CampaignFilter::keeps(const RunPlan& p) const {
  const auto in = [](const std::vector<std::string>& list, const std::string& v) { return list.empty() || std::find(list.begin(), list.end(), v) != list.end(); };
  return in(models, p.model.name) && in(recipes, recipe_stem(p.recipe_file));  // the names the campaign's run set gives them
}

void check_filter(const Campaign& c, const CampaignFilter& f) {
  std::set<std::string> models, recipes;
  for (const auto& p : c.plans()) models.insert(p.model.name), recipes.insert(recipe_stem(p.recipe_file));
  const auto check = [&](const char* option, const std::vector<std::string>& given, const std::set<std::string>& have) {
    for (const auto& v : given)
      if (!have.count(v)) {
        std::string allowed;
        for (const auto& h : have) allowed += (allowed.empty() ? "" : ", ") + h;
        throw Error("campaign run: " + std::string(option) + ": '" + v + "' is not one of " + c.path + "'s (allowed: " + allowed + ")");
      }
  };
  check("--models", f.models, models);
  check("--recipes", f.recipes, recipes);
}

namespace {

std::vector<RunPlan> filtered(std::vector<RunPlan> ps, const CampaignFilter& f) {
  ps.erase(std::remove_if(ps.begin(), ps.end(), [&](const RunPlan& p) { return !f.keeps(p); }), ps.end());
  return ps;
}

}  // namespace

// `out_dir`: with --only, where the run goes instead of the campaign's folder (a retrained copy).
int campaign_run(Campaign& c, const std::string& only, const std::string& out_dir, const std::string& expect_id, bool pilot_only, RunQueueOptions q,
                 const CampaignFilter& filter) {
  if (!only.empty()) {  // one run, here: a child of the scheduler, or by hand
    std::vector<RunPlan> ps;
    for (const bool pilot : {false, true})
      for (auto m : c.runs(pilot))
        if (m.name == only && ps.empty()) {
          if (!out_dir.empty()) m.out_dir = out_dir;
          ps.push_back(plan_run(m));
        }
    if (ps.empty()) throw Error("campaign run: no run named '" + only + "' in " + c.path);
    q.gpus = 0;
    const RunQueueOutcome out = train(c, ps, q, expect_id);
    return out.exit_code();
  }
  // A time limit judges each fresh run by its model's runs; until one finishes here, by those on record.
  if (q.schedule.deadline != std::chrono::steady_clock::time_point::max()) q.schedule.prior_by_kind = time_limit_priors(c.resolve(), this_gpu_name());
  const std::vector<RunPlan> pilot = filtered(runs_to_train(c, c.plans(/*pilot_only=*/true), q.run.force), filter);
  RunQueueOutcome out = train(c, pilot, q);
  print_queue_outcome(out, pilot.size(), "campaign run");
  if (out.exit_code() != 0 || pilot_only) return out.exit_code();
  if (!c.seeds_decided()) {
    if (const size_t missing = c.resolve(/*pilot_only=*/true).missing(); missing > 0) {  // a filter left part of the pilot, or a result was refused
      std::printf("campaign %s: %zu pilot run(s)%s still missing: the seeds are decided when every pilot run is in\n", c.name.c_str(), missing,
                  filter.empty() ? "" : " outside --models/--recipes");
      return out.exit_code();
    }
    if (!pilot_passes_transition_gate(c)) return kExitRuntime;
    decide_seeds(c);
  }
  std::vector<RunPlan> rest;  // the seeds past the pilot (the pilot's are in)
  for (const auto& m : c.runs())
    if (m.seed > c.seeds.pilot) rest.push_back(plan_run(m));
  rest = filtered(runs_to_train(c, rest, q.run.force), filter);
  if (!rest.empty()) {
    out = train(c, rest, q);
    print_queue_outcome(out, rest.size(), "campaign run");
  }
  if (out.exit_code() == 0) {
    const RunSet set = c.resolve();
    std::printf("campaign %s: %zu of %zu runs have results\n", c.name.c_str(), set.runs.size() - set.missing(), set.runs.size());
  }
  return out.exit_code();
}

namespace {

// A sample retrained into `dir` and compared bit for bit with the committed results: per model the
// first seed of each recipe a claim names (or of every recipe with `all_recipes`), among the runs this
// campaign made itself (a run read from another campaign's folder is that campaign's to check).
int retrain_and_compare(const Campaign& c, const RunSet& set, const std::string& dir, bool all_recipes, RunQueueOptions q) {
  std::set<std::string> recipes;
  for (const auto& k : c.registration.claims)
    for (const auto* side : {&k.plus, &k.minus}) recipes.insert(side->begin(), side->end());
  std::vector<RunPlan> plans;
  std::vector<std::string> committed;
  const std::vector<RunManifest> ms = c.runs();
  for (size_t i = 0; i < ms.size(); ++i) {
    const PlannedRun& p = set.runs[i];
    if (p.seed != 1 || p.path.empty() || (!all_recipes && !recipes.count(p.recipe)) || p.path.rfind(c.results_dir + "/", 0) != 0) continue;
    RunManifest m = ms[i];
    m.out_dir = dir;
    plans.push_back(plan_run(m));
    committed.push_back(p.path);
  }
  if (plans.empty()) throw Error("campaign check: no committed run to retrain in " + c.results_dir);
  q.run.force = true;
  prepare_data(c, plans);
  const std::string exe = shell_quote(executable_dir() + "/ufp4");
  // A child retrains one run from the campaign's manifest with --out-dir (the run id ignores the folder).
  const RunQueueOutcome out = train_queue(plans, [&](size_t i) {
    return exe + " campaign run " + shell_quote(c.path) + " --only " + shell_quote(plans[i].name) + " --run-id " + plans[i].run_id + " --force --out-dir " + shell_quote(dir) +
           (q.run.device.empty() ? "" : " --device " + shell_quote(q.run.device));
  }, q);
  int failures = static_cast<int>(out.failed.size());
  for (size_t i = 0; i < plans.size(); ++i) {
    const std::string fresh = find_results(plans[i]);
    if (fresh.empty()) {
      std::printf("FAIL %s: retrained, but no results in %s\n", plans[i].name.c_str(), dir.c_str());
      ++failures;
      continue;
    }
    failures += compare_runs_exact(plans[i].name, read_run_results(fresh), read_run_results(committed[i]));
  }
  return failures;
}

}  // namespace

int campaign_check(const Campaign& c, const std::string& retrain_dir, bool all_recipes, const RunQueueOptions& q) {
  const RunSet set = c.resolve();
  int failures = 0;
  for (const auto& r : set.runs)
    if (r.path.empty()) {
      std::string where = c.results_dir;
      for (const auto& d : c.read_dirs) where += " or " + d;
      std::printf("FAIL %s: missing (run id %s, no verified result in %s)\n", r.name.c_str(), r.run_id.c_str(), where.c_str());
      ++failures;
    }
  for (const auto& why : set.ignored) {
    std::printf("FAIL not in the run set: %s\n", why.c_str());
    ++failures;
  }
  std::printf("%s: %zu of %zu runs with verified results, %zu file(s) outside the set\n", c.path.c_str(), set.runs.size() - set.missing(), set.runs.size(),
              set.ignored.size());
  if (!retrain_dir.empty()) failures += retrain_and_compare(c, set, retrain_dir + "/" + c.name, all_recipes, q);
  return failures ? kExitRuntime : 0;
}

}  // namespace ufp4
