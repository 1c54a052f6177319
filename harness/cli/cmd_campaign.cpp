// `ufp4 campaign plan|run|check CAMPAIGN`: a registered campaign (harness/train/campaign.h).
//   plan   its runs (run id, state), the seeds, the transition against the runs' length, and files ignored
//   run    trains the pilot's seeds, decides the seeds by the registered power rule once the pilot is in
//          (results/<campaign>/seeds.toml), then trains the rest; resumable, like ufp4 run
//   check  exit 1 unless every run of the set has verified results and no other result file sits in the
//          folder; with --retrain, re-trains a sample into another folder and compares it bit for bit
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/sha256.h"
#include "harness/analysis/campaign_stats.h"
#include "harness/cli/cli.h"
#include "harness/data/data.h"
#include "harness/io/run_compare.h"
#include "harness/train/campaign.h"
#include "harness/train/packing.h"
#include "harness/train/run_queue.h"

namespace ufp4 {

namespace {

// The data each run trains on, prepared here when a manifest says how, and compared with the manifest
// the campaign pinned: a corpus prepared anew that differs gives every run a new id.
void prepare_data(const Campaign& c, const std::vector<RunManifest>& runs) {
  std::set<std::string> done;
  for (const auto& m : runs) {
    if (!done.insert(m.data_path).second) continue;
    ensure_data(m);
    const std::string pin = pinned_data_manifest(m.data_path);
    if (!pin.empty() && data_ready(m.data_path) && data_identity(m.data_path) != sha256_hex(read_text_file(pin)))
      log_warn("campaign " + c.name + ": " + m.data_path + "/data.toml differs from the data manifest the campaign pinned (" + pin +
               "): its runs get new run ids and the committed results do not count for them");
  }
}

std::vector<RunPlan> plan_all(const std::vector<RunManifest>& ms) {
  std::vector<RunPlan> plans;
  for (const auto& m : ms) plans.push_back(plan_run(m));
  return plans;
}

// Per model: the step at which the campaign's slowest recipe reaches the transition level on average
// (transition_delays), and the runs' length: a campaign should end at least ~1,000 steps after it.
struct TransitionMargin {
  std::string model;
  double latest = NAN;
  int64_t steps = 0;
};
std::vector<TransitionMargin> transition_margins(const Campaign& c, const RunSet& set) {
  const CampaignRuns runs = read_campaign_runs(set);
  const std::string baseline = c.registration.claims.empty() ? "bf16" : c.registration.claims.front().baseline;
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

void print_transition(const Campaign& c, const RunSet& set) {
  for (const auto& m : transition_margins(c, set))
    std::printf("%s: the slowest recipe reaches the transition level at step %.0f on average; the runs end at step %lld (%+.0f steps after)%s\n",
                m.model.c_str(), m.latest, static_cast<long long>(m.steps), static_cast<double>(m.steps) - m.latest,
                static_cast<double>(m.steps) - m.latest < 1000 ? "  WARNING: less than 1,000 steps past the transition: seed noise stays high" : "");
}

// The registered gate on the pilot: every model's runs end at least transition_gate steps after its
// slowest recipe reaches the transition level. False (and why, printed) when one does not.
bool pilot_passes_transition_gate(const Campaign& c) {
  if (c.seeds.transition_gate <= 0) return true;
  bool ok = true;
  for (const auto& m : transition_margins(c, c.resolve(/*pilot_only=*/true)))
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
  const std::vector<RunManifest> ms = c.runs();
  for (size_t i = 0; i < ms.size(); ++i)
    if (set.runs[i].path.empty()) missing.emplace_back(ms[i].model, static_cast<double>(ms[i].train_tokens()));
  if (const std::string packed = packed_estimate(missing, repository_root() + "/results/bench/packing.csv"); !packed.empty())
    std::printf("\nthe missing runs side by side (--gpus N, the packing table results/bench/packing.csv):\n%s", packed.c_str());
  print_transition(c, set);
  return 0;
}

// The runs this call trains: not those a folder the campaign reads holds (another campaign's, the same
// run id), nor, unless forced, those whose results are in the campaign's folder already (a child started
// for one would only append "results exist" to its committed log).
std::vector<RunManifest> runs_to_train(const Campaign& c, std::vector<RunManifest> ms, bool force) {
  const size_t before = ms.size();
  ms.erase(std::remove_if(ms.begin(), ms.end(), [&](const RunManifest& m) { return !c.read_result(m).empty(); }), ms.end());
  if (ms.size() < before)
    log_info("campaign " + c.name + ": " + std::to_string(before - ms.size()) + " of " + std::to_string(before) + " runs are read from another campaign's folder");
  const size_t unread = ms.size();
  if (!force) ms.erase(std::remove_if(ms.begin(), ms.end(), [](const RunManifest& m) { return !find_results(m).empty(); }), ms.end());
  if (ms.size() < unread) log_info("campaign " + c.name + ": " + std::to_string(unread - ms.size()) + " runs have results already");
  return ms;
}

// Trains `ms` (planned here) with the options; the children train one run each with --only.
RunQueueOutcome train(const Campaign& c, const std::vector<RunManifest>& ms, RunQueueOptions q) {
  prepare_data(c, ms);
  const std::vector<RunPlan> plans = plan_all(ms);
  const std::string exe = shell_quote(executable_dir() + "/ufp4");
  return train_queue(plans, [&](size_t i) {
    return exe + " campaign run " + shell_quote(c.path) + " --only " + shell_quote(ms[i].name) + (q.run.device.empty() ? "" : " --device " + shell_quote(q.run.device));
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

// `out_dir`: with --only, where the run goes instead of the campaign's folder (a retrained copy).
int campaign_run(Campaign& c, const std::string& only, const std::string& out_dir, bool pilot_only, RunQueueOptions q) {
  if (!only.empty()) {  // one run, here: a child of the scheduler, or by hand
    std::vector<RunManifest> ms;
    for (const bool pilot : {false, true})
      for (auto m : c.runs(pilot))
        if (m.name == only && ms.empty()) {
          if (!out_dir.empty()) m.out_dir = out_dir;
          ms.push_back(m);
        }
    if (ms.empty()) throw Error("campaign run: no run named '" + only + "' in " + c.path);
    q.gpus = 0;
    const RunQueueOutcome out = train(c, ms, q);
    return out.exit_code();
  }
  const std::vector<RunManifest> pilot = runs_to_train(c, c.runs(/*pilot_only=*/true), q.run.force);
  RunQueueOutcome out = train(c, pilot, q);
  print_queue_outcome(out, pilot.size(), "campaign run");
  if (out.exit_code() != 0 || pilot_only) return out.exit_code();
  if (!c.seeds_decided()) {
    if (!pilot_passes_transition_gate(c)) return kExitRuntime;
    decide_seeds(c);
  }
  std::vector<RunManifest> rest;  // the seeds past the pilot (the pilot's are in)
  for (auto& m : c.runs())
    if (m.seed > c.seeds.pilot) rest.push_back(std::move(m));
  rest = runs_to_train(c, rest, q.run.force);
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

// A sample retrained into `dir` and compared bit for bit with the committed results: per model the
// first seed of each recipe a claim names (or of every recipe with `all_recipes`), among the runs this
// campaign made itself (a run read from another campaign's folder is that campaign's to check).
int retrain_and_compare(const Campaign& c, const RunSet& set, const std::string& dir, bool all_recipes, RunQueueOptions q) {
  std::set<std::string> recipes;
  for (const auto& k : c.registration.claims)
    for (const auto* side : {&k.plus, &k.minus}) recipes.insert(side->begin(), side->end());
  std::vector<RunManifest> sample;
  std::vector<std::string> committed;
  const std::vector<RunManifest> ms = c.runs();
  for (size_t i = 0; i < ms.size(); ++i) {
    const PlannedRun& p = set.runs[i];
    if (p.seed != 1 || p.path.empty() || (!all_recipes && !recipes.count(p.recipe)) || p.path.rfind(c.results_dir + "/", 0) != 0) continue;
    RunManifest m = ms[i];
    m.out_dir = dir;
    sample.push_back(m);
    committed.push_back(p.path);
  }
  if (sample.empty()) throw Error("campaign check: no committed run to retrain in " + c.results_dir);
  q.run.force = true;
  prepare_data(c, sample);
  const std::vector<RunPlan> plans = plan_all(sample);
  const std::string exe = shell_quote(executable_dir() + "/ufp4");
  // A child retrains one run from the campaign's manifest with --out-dir (the run id ignores the folder).
  const RunQueueOutcome out = train_queue(plans, [&](size_t i) {
    return exe + " campaign run " + shell_quote(c.path) + " --only " + shell_quote(sample[i].name) + " --force --out-dir " + shell_quote(dir) +
           (q.run.device.empty() ? "" : " --device " + shell_quote(q.run.device));
  }, q);
  int failures = static_cast<int>(out.failed.size());
  for (size_t i = 0; i < sample.size(); ++i) {
    const std::string fresh = find_results(sample[i], plans[i].run_id);
    if (fresh.empty()) {
      std::printf("FAIL %s: retrained, but no results in %s\n", sample[i].name.c_str(), dir.c_str());
      ++failures;
      continue;
    }
    failures += compare_runs_exact(sample[i].name, read_run_results(fresh), read_run_results(committed[i]));
  }
  return failures;
}

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

}  // namespace

int cmd_campaign(const std::vector<std::string>& args) {
  std::string action, path, only, retrain, out_dir;
  int gpus = 0;
  std::string per_gpu = "auto";
  bool pilot_only = false, all_recipes = false;
  RunQueueOptions q;
  po::options_description d("options");
  d.add_options()
      ("action", po::value(&action), "plan | run | check")
      ("campaign", po::value(&path), "the campaign file (experiments/<table or figure>/campaign.toml)")
      ("gpus", po::value(&gpus)->default_value(0), "run: train on this many GPUs, one child process a run (0: one after another here)")
      ("per-gpu", po::value(&per_gpu)->default_value("auto"), "run: concurrent runs per GPU: a number, or auto (the fastest measured for the runs' model)")
      ("stall-timeout", po::value(&q.schedule.stall_seconds)->default_value(300), "run: seconds without progress before a run is stopped and started again once")
      ("stop-grace", po::value(&q.schedule.stop_grace_seconds)->default_value(40), "run: seconds a stopped run may take to checkpoint before it is killed")
      ("device", po::value(&q.run.device), "override the manifests' device: auto, cpu, cuda")
      ("only", po::value(&only), "run: train only the run of this name, here")
      ("force", po::bool_switch(&q.run.force), "run --only: train it again even when its results exist")
      ("out-dir", po::value(&out_dir), "run --only: write into this folder instead of the campaign's (a retrained copy)")
      ("pilot-only", po::bool_switch(&pilot_only), "run: stop after the pilot's seeds")
      ("retrain", po::value(&retrain), "check: also retrain a sample into this folder and compare it bit for bit (GPU: the committed runs' GPU model)")
      ("all-recipes", po::bool_switch(&all_recipes), "check --retrain: seed 1 of every recipe, not only of the claimed ones");
  po::positional_options_description pos;
  pos.add("action", 1).add("campaign", 1);
  auto vm = parse_command("campaign", "plan|run|check CAMPAIGN [--gpus N] [--retrain DIR]", d, args, &pos);
  if (!vm) return 0;
  if (path.empty()) throw Error("campaign: give an action and a campaign file (usage: ufp4 campaign plan|run|check CAMPAIGN)");
  if (gpus < 0) throw Error("campaign: --gpus must be >= 0");
  Campaign c = Campaign::load(path);
  q.gpus = gpus;
  if (gpus > 0) q.schedule.per_gpu = resolve_per_gpu(per_gpu, c.runs());
  if (!out_dir.empty() && only.empty()) throw Error("campaign: --out-dir goes with --only (one retrained run)");
  if (action == "plan") return campaign_plan(c);
  if (action == "run") return campaign_run(c, only, out_dir, pilot_only, q);
  if (action == "check") return campaign_check(c, retrain, all_recipes, q);
  throw Error("campaign: unknown action '" + action + "' (allowed: plan, run, check)");
}

}  // namespace ufp4
