#include "harness/train/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <sstream>
#include <utility>
#include <map>
#include <set>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/file_lock.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/sha256.h"
#include "harness/data/data.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/io/run_results.h"
#include "harness/train/capture_file.h"
#include "harness/train/determinism.h"
#include "harness/train/expert_shard.h"
#include "harness/train/row_exchange_c10d.h"
#include "harness/plan/run_files.h"
#include "harness/train/train_device.h"
#include "harness/train/token_stream.h"
#include "models/transformer.h"

namespace ufp4 {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int s) { g_signal = s; }

}  // namespace

namespace {

// SIGINT/SIGTERM stop the loop at the next step boundary (with a checkpoint) while a run is in it.
struct SignalScope {
  void (*old_int)(int), (*old_term)(int);
  SignalScope() : old_int(std::signal(SIGINT, on_signal)), old_term(std::signal(SIGTERM, on_signal)) { g_signal = 0; }
  ~SignalScope() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

void record_step(RunCurves& c, double elapsed_before, const QuantContext& ctx, int64_t step, int64_t tokens, double lr, const StepStats& st,
                 double elapsed) {
  c.step.push_back(static_cast<double>(step));
  c.tokens.push_back(static_cast<double>(tokens));
  c.loss.push_back(st.loss);
  c.lr.push_back(lr);
  c.grad_norm.push_back(st.grad_norm);
  c.time_s.push_back(elapsed_before + elapsed);
  if (!ctx.telemetry || ctx.alpha.empty()) return;
  if (c.alpha_keys.empty())
    for (const auto& kv : ctx.alpha) c.alpha_keys.push_back(kv.first);
  std::vector<double> row;
  for (const auto& k : c.alpha_keys) row.push_back(ctx.alpha.count(k) ? ctx.alpha.at(k) : NAN);
  c.alpha.push_back(row);
  c.alpha_step.push_back(static_cast<double>(step));
}

}  // namespace

Trainer::Trainer(const RunPlan& plan, const torch::Device& device, std::string device_name, std::shared_ptr<ProcessGroups> groups,
                 const DataParallelOptions& dp)
    : plan_(plan), t_(plan.train), device_(device), device_name_(std::move(device_name)), utc_start_(utc_now()), model_(nullptr),
      groups_(std::move(groups)), train_(plan.data.train_shards, plan.model.seq_len, static_cast<uint64_t>(plan.train.seed)),
      val_(plan.data.val_shards, plan.model.seq_len, 0, /*shuffle=*/false), best_(std::numeric_limits<double>::infinity()), smooth_(NAN) {
  train_.check_vocab(plan.model.vocab, plan.model.name);
  val_.check_vocab(plan.model.vocab, plan.model.name);
  // Determinism and the seed come first: they fix the initial weights drawn below.
  set_deterministic(t_.deterministic);
  torch::manual_seed(static_cast<uint64_t>(t_.seed));
  ctx_ = std::make_shared<QuantContext>();
  ctx_->recipe = plan.recipe;
  ctx_->run_seed = static_cast<uint64_t>(t_.seed);
  ctx_->recipe_rht_signs = t_.recipe_rht_signs;
  if (groups_) {
    rank_ = groups_->data->rank();
    world_ = groups_->data->size();
  }
  ExpertGroups eg;
  if (t_.expert_parallel > 1) {
    check_expert_parallel(plan_, world_);
    eg = groups_->expert_groups(static_cast<int>(t_.expert_parallel));
    experts_ = eg.experts;
  }
  // Operands are captured by one rank (rank 0's micro-batches) in a data-parallel run.
  if (!plan_.capture.steps.empty() && rank_ == 0) ctx_->capture = new_capture(/*on_device=*/false);
  model_ = Transformer(plan.model, ctx_, experts_ ? row_exchange(experts_) : nullptr);
  model_->to(device_);
  model_->set_compute_dtype(device_.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  optimizer_ = make_optimizer(model_, plan.optimizer);
  if (groups_) {
    check_data_parallel_batch(plan_, world_);
    dp_ = std::make_unique<DataParallel>(model_, *optimizer_, gradient_groups(model_, groups_->data, eg.experts_data), dp);
    log_info("run " + plan_.name + ": " + dp_->describe());
  }
  if (device_.is_cuda()) {
    graph_off_ = t_.cuda_graph ? StepGraph::obstacle(model_, device_, dp_ != nullptr) : "train.cuda_graph = false";
    if (graph_off_.empty()) graph_ = std::make_unique<StepGraph>(model_, *optimizer_, t_.micro_batches(), plan.model.seq_len, plan_.optimizer.grad_clip);
    else if (rank_ == 0) log_info("run " + plan_.name + ": steps uncaptured (no CUDA graph: " + graph_off_ + ")");
  }
}

std::string Trainer::shard_path(const std::string& checkpoint, int64_t step) const {
  return checkpoint + ".zero1-rank" + std::to_string(rank_) + "of" + std::to_string(world_) + "-step" + std::to_string(step);
}

std::string Trainer::experts_path(const std::string& checkpoint, int64_t step) const {
  return checkpoint + ".experts-rank" + std::to_string(experts_->rank()) + "of" + std::to_string(experts_->size()) + "-step" + std::to_string(step);
}

// The first replica's ranks write the experts shards (every replica holds the same experts).
bool Trainer::writes_experts() const { return experts_ && rank_ < experts_->size(); }

void Trainer::remove_shards(const std::string& checkpoint, int64_t keep_step) const {
  if (dp_ && dp_->sharded()) remove_files_of(checkpoint, ".zero1-rank" + std::to_string(rank_) + "of", keep_step >= 0 ? shard_path(checkpoint, keep_step) : "");
  if (writes_experts())
    remove_files_of(checkpoint, ".experts-rank" + std::to_string(experts_->rank()) + "of", keep_step >= 0 ? experts_path(checkpoint, keep_step) : "");
}

void Trainer::remove_files_of(const std::string& checkpoint, const std::string& tag, const std::string& keep_path) const {
  const size_t slash = checkpoint.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : checkpoint.substr(0, slash);
  const std::string prefix = checkpoint.substr(slash == std::string::npos ? 0 : slash + 1) + tag;
  const std::string keep = keep_path.substr(keep_path.find_last_of('/') == std::string::npos ? 0 : keep_path.find_last_of('/') + 1);
  for (const std::string& name : dir_entries(dir))
    if (name.rfind(prefix, 0) == 0 && (keep_path.empty() || name != keep) && name.find(".tmp-") == std::string::npos) remove_tree(dir + "/" + name);
}

void Trainer::remove_checkpoint(const std::string& checkpoint) const {
  if (rank_ == 0) remove_tree(checkpoint);
  remove_shards(checkpoint, -1);
}

void Trainer::resume(const std::string& checkpoint) {
  state_ = load_checkpoint(checkpoint, model_, *optimizer_, device_, plan_.run_id);
  const bool sharded = dp_ && dp_->sharded();
  if (state_.world_size != world_ || state_.sharded_optimizer != sharded || state_.expert_parallel != t_.expert_parallel)
    throw RuntimeError(checkpoint + ": written by " + std::to_string(state_.world_size) + " rank(s)" + (state_.sharded_optimizer ? " with a sharded optimizer" : "") +
                       (state_.expert_parallel > 1 ? ", experts over " + std::to_string(state_.expert_parallel) + " ranks" : "") +
                       "; resume it the same way (ranks: " + std::to_string(state_.world_size) + (state_.sharded_optimizer ? "" : ", --replicate-optimizer") +
                       ", --ep " + std::to_string(state_.expert_parallel) + "), or remove it to start over");
  if (experts_) load_expert_shard(experts_path(checkpoint, state_.step), model_, *experts_, device_, {"experts shard", plan_.run_id, state_.step});
  if (dp_) {
    dp_->rebind_parameters(/*broadcast=*/false);  // loading replaced the parameters' storage
    if (sharded) dp_->load_shard(shard_path(checkpoint, state_.step), {"optimizer shard", plan_.run_id, state_.step});
  }
  train_.cursor = state_.cursor;
  start_ = state_.step;
}

// A data-parallel checkpoint is complete once rank 0's file names its step: each rank first writes
// its optimizer shard under that step's name, then rank 0 writes the shared file, then the shards
// of older steps go. A kill at any point leaves a shared file whose shards all exist.
void Trainer::save(const std::string& checkpoint) {
  state_.cursor = train_.cursor;
  state_.world_size = world_;
  state_.sharded_optimizer = dp_ && dp_->sharded();
  state_.expert_parallel = t_.expert_parallel;
  if (state_.sharded_optimizer) dp_->save_shard(shard_path(checkpoint, state_.step), {"optimizer shard", plan_.run_id, state_.step});
  if (writes_experts()) save_expert_shard(experts_path(checkpoint, state_.step), model_, *experts_, {"experts shard", plan_.run_id, state_.step});
  if (dp_) dp_->comm().barrier();
  if (rank_ == 0) save_checkpoint(checkpoint, model_, *optimizer_, state_, plan_.run_id);
  if (dp_) dp_->comm().barrier();
  remove_shards(checkpoint, state_.step);
}

StepStats Trainer::data_parallel_step() {
  // This rank's part of the global batch: the windows a single process would read at positions
  // [rank * local, (rank + 1) * local) of this step.
  const int64_t local = t_.batch / world_;
  train_.skip(rank_ * local);
  const DataParallel::Result r = dp_->step([&] { return train_.next(t_.micro_batch).to(device_); }, local / t_.micro_batch,
                                           t_.micro_batches(), plan_.model.seq_len, plan_.optimizer.grad_clip, g_signal != 0);
  train_.skip((world_ - 1 - rank_) * local);
  stop_agreed_ = r.stop;
  if (ctx_->telemetry) share_telemetry();
  StepStats st;
  st.loss = r.loss;
  st.grad_norm = r.grad_norm;
  return st;
}

// A single process records the alpha values of the step's last micro-batch; in a data-parallel run
// the last rank ran it, so its values (keys and all: an idle expert has none) go to every rank. With
// expert parallelism a rank has values only for the experts it holds, so the values of every rank of
// the last block (which holds every expert once) go to every rank, a later rank's replacing an
// earlier's: the last rank's for all but the experts, each expert's from the rank of the last block that
// holds it (the rows of that block's last micro-batches; an expert idle there has none).
void Trainer::share_telemetry() {
  std::ostringstream os;
  os.precision(17);
  for (const auto& kv : ctx_->alpha) os << kv.first << '\t' << kv.second << '\n';
  const std::string mine = os.str();
  ctx_->alpha.clear();
  for (int from = world_ - (experts_ ? experts_->size() : 1); from < world_; ++from) {
    std::istringstream is(dp_->comm().broadcast_bytes(mine, from));
    std::string line;
    while (std::getline(is, line)) {
      const size_t tab = line.find('\t');
      if (tab != std::string::npos) ctx_->alpha[line.substr(0, tab)] = std::stod(line.substr(tab + 1));
    }
  }
}

double Trainer::evaluate(bool whole_split) {
  torch::NoGradGuard ng;
  // An evaluation at a captured step captures nothing: its forward operands are not the step's.
  struct NoCapture {
    std::shared_ptr<QuantContext> ctx;
    std::shared_ptr<OperandCapture> kept;
    ~NoCapture() { ctx->capture = kept; }
  } no_capture{ctx_, std::exchange(ctx_->capture, nullptr)};
  val_.cursor = {};
  const int64_t seq = plan_.model.seq_len;
  if (!whole_split) {
    double sum = 0;
    for (int64_t b = 0; b < plan_.eval.batches; ++b) {
      torch::Tensor batch = val_.next(t_.micro_batch).to(device_);
      sum += model_->loss(batch.slice(1, 0, seq), batch.slice(1, 1, seq + 1)).lm_loss.item<double>();
    }
    return sum / plan_.eval.batches;
  }
  double sum = 0;
  for (int64_t done = 0; done < val_.windows();) {
    const int64_t n = std::min(t_.micro_batch, val_.windows() - done);
    torch::Tensor batch = val_.next(n).to(device_);
    sum += model_->loss(batch.slice(1, 0, seq), batch.slice(1, 1, seq + 1)).lm_loss.item<double>() * static_cast<double>(n);
    done += n;
  }
  return sum / static_cast<double>(val_.windows());
}

std::shared_ptr<OperandCapture> Trainer::new_capture(bool on_device) const {
  return std::make_shared<OperandCapture>(std::set<int64_t>(plan_.capture.steps.begin(), plan_.capture.steps.end()), plan_.capture.layers,
                                          plan_.capture.tokens, on_device);
}

void Trainer::set_capture_sink(CaptureSink sink) {
  capture_sink_ = std::move(sink);
  if (!ctx_->capture) return;
  ctx_->capture = new_capture(/*on_device=*/true);  // the operands stay where they were made: the sink analyses them there
  ctx_->capture->stream_to([this](const std::string& key, const torch::Tensor& before, const torch::Tensor& after) {
    if (capture_sink_.operand) capture_sink_.operand(ctx_->step, key, before, after);
  });
}

bool Trainer::step_once(int64_t step) {
  const double lr = plan_.optimizer.lr_at(step);
  for (auto& g : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  ctx_->step = step;
  ctx_->telemetry = plan_.capture.telemetry_every > 0 && step % plan_.capture.telemetry_every == 0;
  // This step's values only: an operand that saw no tokens (an idle expert) reads NaN, not the value
  // of an earlier step, which a resumed process would not have.
  if (ctx_->telemetry) ctx_->alpha.clear();
  // A captured step whose sink measures the signal chain keeps its last micro-batch for that (a reference:
  // the batch trains as before). Data-parallel ranks' backwards join collectives: one process only.
  const bool probe = capture_sink_.stream && ctx_->capture && ctx_->capture->at_step(step) && !dp_;
  torch::Tensor last_batch;
  const auto next_batch = [&] {
    torch::Tensor b = train_.next(t_.micro_batch).to(device_);
    if (probe) last_batch = b;
    return b;
  };
  const StepStats st = dp_      ? data_parallel_step()
                       : graph_ ? graph_->step(next_batch)
                                : train_step(model_, *optimizer_, next_batch, t_.micro_batches(), plan_.model.seq_len, plan_.optimizer.grad_clip);
  if (ctx_->capture && capture_sink_ && ctx_->capture->at_step(step)) {
    // The analysis's time is no training time: the clock that makes tokens/s and MFU skips it.
    const auto s0 = std::chrono::steady_clock::now();
    if (probe) capture_sink_.stream(step, compare_stream(model_, last_batch, plan_.model.seq_len));
    capture_sink_.step(step, ctx_->capture->take_raw());
    t0_ += std::chrono::steady_clock::now() - s0;
  } else if (ctx_->capture) {
    auto raw = ctx_->capture->take_raw();
    write_capture(plan_.capture.dir, step, ctx_->capture->take(), raw);
  }
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const int64_t tokens = (step + 1) * plan_.tokens_per_step;
  record_step(state_.curves, state_.elapsed_before, *ctx_, step, tokens, lr, st, elapsed);
  tokens_per_s_ = elapsed > 0 ? (step + 1 - start_) * plan_.tokens_per_step / elapsed : 0;  // this process's steps only
  const double peak = peak_flops(device_name_);
  mfu_ = peak > 0 ? tokens_per_s_ * train_flops_per_token(plan_.model) / (peak * world_) : 0;
  char extra[96];
  if (device_.is_cuda() && peak > 0) std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f | MFU %.1f%%", lr, st.grad_norm, 100 * mfu_);
  else if (device_.is_cuda()) std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f | MFU n/a", lr, st.grad_norm);
  else std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f", lr, st.grad_norm);
  if (rank_ == 0) progress_->update(step + 1, tokens, st.loss, extra);
  // Divergence: a non-finite loss, or one far above the best smoothed loss once past warmup.
  smooth_ = std::isnan(smooth_) ? st.loss : 0.9 * smooth_ + 0.1 * st.loss;
  if (step >= plan_.optimizer.warmup) best_ = std::min(best_, smooth_);
  if (std::isfinite(st.loss) && std::isfinite(st.grad_norm) && !(step >= plan_.optimizer.warmup && st.loss > t_.divergence_factor * best_)) return true;
  diverged_ = true;
  diverged_step_ = step;
  if (rank_ == 0) log_warn("run " + plan_.name + ": diverged at step " + std::to_string(step) + " (loss " + std::to_string(st.loss) + ")");
  return false;
}

Trainer::Outcome Trainer::train(int64_t stop_after) {
  SignalScope signals;
  Progress progress("run " + plan_.name, t_.steps, 4.0);  // lines at most ~4 s apart: under 5 s with an evaluation between
  progress.resume_from(start_, start_ * plan_.tokens_per_step);
  progress_ = &progress;
  t0_ = std::chrono::steady_clock::now();
  for (int64_t step = start_; step < t_.steps; ++step) {
    const bool ok = step_once(step);
    state_.step = step + 1;
    if (!ok) return Outcome::kDiverged;
    if (plan_.eval.every > 0 && ((step + 1) % plan_.eval.every == 0 || step + 1 == t_.steps)) {
      state_.curves.eval_step.push_back(static_cast<double>(step));
      state_.curves.eval_loss.push_back(evaluate(step + 1 == t_.steps && plan_.eval.whole_split_at_end));
      if (rank_ == 0) log_info("run " + plan_.name + ": step " + std::to_string(step + 1) + " validation loss " + std::to_string(state_.curves.eval_loss.back()));
    }
    // Data-parallel ranks stop on the step they agreed on (a signal may reach them at different steps).
    const bool stop = (dp_ ? stop_agreed_ : g_signal != 0) || (stop_after >= 0 && step + 1 >= stop_after && step + 1 < t_.steps);
    if ((plan_.checkpoint.every > 0 && (step + 1) % plan_.checkpoint.every == 0 && step + 1 < t_.steps) || stop) save(plan_.checkpoint.path);
    if (stop) return Outcome::kStopped;
  }
  return Outcome::kFinished;
}

RunResults Trainer::results() {
  RunResults r;
  const RunPlan& p = plan_;
  r.run_name = plan_.name;
  r.run_id = p.run_id;
  r.run_identity = p.identity.text;
  r.manifest = plan_.resolved_manifest;
  r.manifest_sha256 = sha256_hex(r.manifest);
  r.manifest_path = plan_.manifest_path;
  r.model = p.model.name;
  r.model_sha256 = p.identity.model_sha256;
  r.recipe = p.recipe.name;
  r.recipe_resolved = p.recipe.to_toml();
  r.recipe_sha256 = p.identity.recipe_sha256;
  r.data_path = p.data.dir;
  r.data_manifest_sha256 = p.data.manifest_sha256;
  r.data_train_tokens = train_.tokens();
  r.seed = t_.seed;
  r.deterministic = t_.deterministic;
  r.world_size = world_;
  r.expert_parallel = t_.expert_parallel;
  r.backend = groups_ ? groups_->backend() : "none";
  r.optimizer_sharding = dp_ ? (dp_->sharded() ? "zero1" : "replicated") : "none";
  r.cuda_graph = graph_ ? graph_->describe() : device_.is_cuda() ? "off: " + graph_off_ : "off: not a CUDA device";
  r.utc_start = utc_start_;
  r.device_name = device_name_;
  // Rank 0 writes the results: it alone hashes (a 7.9B model is 31 GB of FP32); with expert parallelism
  // every rank joins the gathers of its group's experts.
  if (experts_ || rank_ == 0) {
    const double gb = static_cast<double>(count_params(p.model).total) * 4 / 1e9;
    if (rank_ == 0 && gb > 4) log_info("run " + p.name + ": hashing the final weights (" + std::to_string(static_cast<int>(gb)) + " GB of FP32)");
    const auto started = std::chrono::steady_clock::now();
    r.weights_sha256 = weights_sha256(model_, experts_.get(), /*hash=*/rank_ == 0);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (rank_ == 0 && took > 5) log_info("run " + p.name + ": final weights hashed in " + std::to_string(static_cast<int>(took)) + " s");
  }
  r.diverged = diverged_;
  r.diverged_step = diverged_step_;
  r.tokens_per_s = tokens_per_s_;
  r.mfu = mfu_;
  r.flops_per_token = train_flops_per_token(p.model);
  r.peak_memory_gb = peak_memory_gb(device_);
  r.curves = state_.curves;
  return r;
}

namespace {

// The run's lock: a second process on the same run waits for the first (then finds its results), and a
// killed process leaves nothing held (common/file_lock.h).
std::unique_ptr<FileLock> take_run_lock(const std::string& path, const std::string& name) {
  auto lock = std::make_unique<FileLock>(path);
  if (lock->locked()) return lock;
  const std::string who = lock->holder();
  log_info("run " + name + ": another process trains it (" + (who.empty() ? std::string("holder unknown") : who) + ", lock " + path +
           "); waiting for it to finish");
  lock->wait();
  return lock;
}

// A file at the run's results path that is not this run's results (damaged, or another run's) is kept
// for inspection beside it, never overwritten in silence.
void set_aside(const std::string& path, const std::string& name) {
  const std::string to = path + ".rejected";
  if (std::rename(path.c_str(), to.c_str()) != 0) throw RuntimeError(path + ": cannot move the rejected file aside to " + to);
  log_warn("run " + name + ": moved the rejected " + path + " to " + to + "; training the run");
}

// The run's shards against data.toml before they train anything (a quick check: sizes, counts, a
// sampled hash; harness/data/data.h), once per folder and process. llm.c shards are named by content.
void check_data_once(const std::string& dir) {
  static std::set<std::string> checked;
  if (checked.count(dir) || !file_exists(dir + "/data.toml")) return;
  const DataVerification v = verify_data(dir, DataCheck::kQuick);
  if (v.full) log_info("data " + dir + ": every shard checked against data.toml (" + std::to_string(v.bytes >> 20) + " MiB)");
  checked.insert(dir);
}

// The same run (the same run id) already made in another folder: its results copied into this run's
// place, checked again there, instead of training it twice. "" when there is none.
std::string reuse_identical_run(const RunPlan& plan, const RunOptions& opt) {
  if (find_identical_run(plan.run_id, plan.out_dir, "").empty()) return "";  // none at all: no device to ask for
  std::string device_name;
  (void)choose_device(plan.train.device, opt.device, plan.manifest_path, device_name);  // made on this device: GPU models differ in bits
  const std::string found = find_identical_run(plan.run_id, plan.out_dir, device_name);
  if (found.empty()) return "";
  write_text_atomically(plan.results_path, read_text_file(found));
  if (read_run_results(plan.results_path, /*with_curves=*/false).run_id != plan.run_id) throw RuntimeError("run " + plan.name + ": the copy of " + found + " does not check");
  log_info("run " + plan.name + ": the identical run (run id " + plan.run_id + ") is in " + found + ": copied to " + plan.results_path +
           " instead of training it again (--force trains it)");
  return plan.results_path;
}

}  // namespace

RunResult run_training(const RunPlan& plan, const RunOptions& opt) {
  const std::shared_ptr<Communicator> comm = opt.groups ? opt.groups->data : nullptr;
  const bool lead = !comm || comm->rank() == 0;
  // Rank 0 holds the run's lock, looks at the files and decides; every rank follows its decision.
  std::unique_ptr<FileLock> lock;
  std::string decision, existing;
  if (lead) {
    make_dirs(plan.out_dir);
    lock = take_run_lock(plan.lock_path, plan.name);
    if (const int n = remove_stale_temporaries(plan.out_dir)) log_info("run " + plan.name + ": removed " + std::to_string(n) + " temporary file(s) left by a killed process");
    std::vector<std::string> rejected;
    existing = find_results(plan, &rejected);
    for (const auto& why : rejected) log_warn("run " + plan.name + ": ignored " + why);
    if (existing.empty() && file_exists(plan.results_path)) set_aside(plan.results_path, plan.name);
    // Never for a run asked to train (--force) or to stop part way (--stop-after), nor over a checkpoint.
    if (existing.empty() && !opt.force && opt.stop_after < 0 && !file_exists(plan.checkpoint.path)) existing = reuse_identical_run(plan, opt);
    decision = !existing.empty() && !opt.force ? "skip" : file_exists(plan.checkpoint.path) ? "resume" : "start";
    if (decision != "skip") check_data_once(plan.data.dir);
  }
  if (comm) {
    const std::string both = comm->broadcast_bytes(decision + "\n" + existing, 0);
    decision = both.substr(0, both.find('\n'));
    existing = both.substr(both.find('\n') + 1);
  }
  if (decision == "skip") {
    log_info("run " + plan.name + ": results exist (" + existing + "), skipped");
    return {RunStatus::kSkipped, existing, 0};
  }
  std::string device_name;
  const torch::Device device = choose_device(plan.train.device, opt.device, plan.manifest_path, device_name);
  Trainer trainer(plan, device, device_name, opt.groups, opt.data_parallel);
  if (opt.capture_sink) trainer.set_capture_sink(opt.capture_sink);
  if (decision == "resume") {
    trainer.resume(plan.checkpoint.path);
    log_info("run " + plan.name + ": resumed from " + plan.checkpoint.path + " at step " + std::to_string(trainer.steps_done()));
  }
  char intro[256];
  std::snprintf(intro, sizeof intro, "run %s: %lld steps x %lld tokens = %.3g tokens, %.3g epochs of %lld training tokens; %s, %s", plan.name.c_str(),
                static_cast<long long>(plan.train.steps), static_cast<long long>(plan.tokens_per_step), static_cast<double>(plan.train.steps * plan.tokens_per_step),
                plan.epochs, static_cast<long long>(plan.data_train_tokens), device_name.c_str(), plan.train.deterministic ? "deterministic" : "not deterministic");
  log_info(intro);
  const Trainer::Outcome outcome = trainer.train(opt.stop_after);
  if (outcome == Trainer::Outcome::kStopped) {
    log_info("run " + plan.name + ": stopped after step " + std::to_string(trainer.steps_done()) + "; checkpoint " + plan.checkpoint.path +
             " (ufp4 run resumes it)");
    return {RunStatus::kStopped, "", trainer.steps_done(), g_signal != 0};
  }
  const RunResults results = trainer.results();  // every rank: the weights' hash gathers the experts of expert parallelism
  if (lead) write_run_results(plan.results_path, results);
  if (comm) comm->barrier();
  trainer.remove_checkpoint(plan.checkpoint.path);  // only once the results are in place
  const bool diverged = outcome == Trainer::Outcome::kDiverged;
  log_info("run " + plan.name + ": " + (diverged ? "diverged" : "done") + " -> " + plan.results_path);
  return {diverged ? RunStatus::kDiverged : RunStatus::kCompleted, plan.results_path, trainer.steps_done()};
}

}  // namespace ufp4
