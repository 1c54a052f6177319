// `ufp4 campaign plan|run|check CAMPAIGN`: a registered campaign (harness/plan/campaign.h).
//   plan   its runs (run id, state), the seeds, the transition against the runs' length, and files ignored
//   run    trains the pilot's seeds, decides the seeds by the registered power rule once the pilot is in
//          (results/<campaign>/seeds.toml), then trains the rest; resumable, like ufp4 run
//   check  exit 1 unless every run of the set has verified results and no other result file sits in the
//          folder; with --retrain, re-trains a sample into another folder and compares it bit for bit
#include "common/error.h"
#include "common/text.h"
#include "harness/campaign/campaign_driver.h"
#include "harness/cli/cli.h"
#include "harness/plan/campaign.h"
#include "harness/train/run_queue.h"

namespace ufp4 {

int cmd_campaign(const std::vector<std::string>& args) {
  std::string action, path, only, retrain, out_dir, expect_id;
  int gpus = 0;
  std::string per_gpu = "auto", mps = "auto", models, recipes;
  bool pilot_only = false, all_recipes = false;
  double time_limit = 0;
  RunQueueOptions q;
  po::options_description d("options");
  d.add_options()
      ("action", po::value(&action), "plan | run | check")
      ("campaign", po::value(&path), "the campaign file (experiments/<table or figure>/campaign.toml)")
      ("gpus", po::value(&gpus)->default_value(0), "run: train on this many GPUs, one child process a run (0: one after another here)")
      ("per-gpu", po::value(&per_gpu)->default_value("auto"), "run: concurrent runs per GPU: a number, or auto (the fastest measured for the runs' model)")
      ("mps", po::value(&mps)->default_value("auto"), "run: the runs of a GPU under CUDA MPS: on, off, or auto (as measured faster for the runs' model)")
      ("stall-timeout", po::value(&q.schedule.stall_seconds)->default_value(300), "run: seconds without progress before a run is stopped and started again once")
      ("stop-grace", po::value(&q.schedule.stop_grace_seconds)->default_value(40), "run: seconds a stopped run may take to checkpoint before it is killed")
      ("time-limit", po::value(&time_limit)->default_value(0), "run --gpus N: stop every run this many seconds from the start (each checkpoints), and before that start no run that a finished run of its model says would not end in time (0: none)")
      ("device", po::value(&q.run.device), "override the manifests' device: auto, cpu, cuda")
      ("only", po::value(&only), "run: train only the run of this name, here")
      ("run-id", po::value(&expect_id), "run --only: refuse unless the run plans as this run id (the scheduler's children)")
      ("force", po::bool_switch(&q.run.force), "run --only: train it again even when its results exist")
      ("out-dir", po::value(&out_dir), "run --only: write into this folder instead of the campaign's (a retrained copy)")
      ("pilot-only", po::bool_switch(&pilot_only), "run: stop after the pilot's seeds")
      ("models", po::value(&models), "run: train only the missing runs of these models (comma list); the seeds are decided once every pilot run is in")
      ("recipes", po::value(&recipes), "run: train only the missing runs of these recipes (comma list, the names the manifests give)")
      ("retrain", po::value(&retrain), "check: also retrain a sample into this folder and compare it bit for bit (GPU: the committed runs' GPU model)")
      ("all-recipes", po::bool_switch(&all_recipes), "check --retrain: seed 1 of every recipe, not only of the claimed ones");
  po::positional_options_description pos;
  pos.add("action", 1).add("campaign", 1);
  auto vm = parse_command("campaign", "plan|run|check CAMPAIGN [--gpus N] [--models M,...] [--recipes R,...] [--retrain DIR]", d, args, &pos);
  if (!vm) return 0;
  if (path.empty()) throw Error("campaign: give an action and a campaign file (usage: ufp4 campaign plan|run|check CAMPAIGN)");
  if (gpus < 0) throw Error("campaign: --gpus must be >= 0");
  if (time_limit != 0 && (action != "run" || !only.empty())) throw Error("campaign: --time-limit goes with run (without --only)");
  set_time_limit("campaign run", time_limit, gpus, q.schedule);
  check_mps_option(mps, gpus);
  Campaign c = Campaign::load(path);
  q.gpus = gpus;
  if (gpus > 0) resolve_packing(per_gpu, mps, c.plans(), q.schedule);
  if (!out_dir.empty() && only.empty()) throw Error("campaign: --out-dir goes with --only (one retrained run)");
  if (!expect_id.empty() && only.empty()) throw Error("campaign: --run-id goes with --only (one run)");
  const CampaignFilter filter{split(models, ',', true), split(recipes, ',', true)};
  if ((vm->count("models") && filter.models.empty()) || (vm->count("recipes") && filter.recipes.empty()))
    throw Error("campaign run: --models and --recipes need at least one name (a comma list); leave the option out to train every missing run");
  if (!filter.empty()) {
    if (action != "run" || !only.empty()) throw Error("campaign: --models and --recipes go with run (without --only)");
    check_filter(c, filter);
  }
  if (action == "plan") return campaign_plan(c);
  if (action == "run") return campaign_run(c, only, out_dir, expect_id, pilot_only, q, filter);
  if (action == "check") return campaign_check(c, retrain, all_recipes, q);
  throw Error("campaign: unknown action '" + action + "' (allowed: plan, run, check)");
}

}  // namespace ufp4
