#include "harness/train/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/sha256.h"
#include "harness/data/data.h"
#include "harness/io/array_io.h"
#include "harness/io/provenance.h"
#include "harness/train/capture_file.h"
#include "harness/train/determinism.h"
#include "harness/train/token_stream.h"
#include "models/transformer.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ufp4 {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int s) { g_signal = s; }

}  // namespace

double peak_flops(const std::string& device_name) {
  // Dense BF16 tensor-core peaks (vendor datasheets): H100 SXM and H200 989.5 TFLOP/s.
  static const std::pair<const char*, double> kPeaks[] = {{"H100", 989.5e12}, {"H200", 989.5e12}};
  for (const auto& p : kPeaks)
    if (device_name.find(p.first) != std::string::npos) return p.second;
  return 0.0;
}

double peak_flops(const torch::Device& d) {
#ifdef UFP4_WITH_CUDA
  if (d.is_cuda()) return peak_flops(at::cuda::getDeviceProperties(d.index() < 0 ? 0 : d.index())->name);
#endif
  return 0.0;
}

double peak_memory_gb(const torch::Device& d) {
#ifdef UFP4_WITH_CUDA
  if (d.is_cuda()) {
    auto st = c10::cuda::CUDACachingAllocator::getDeviceStats(d.index() < 0 ? 0 : d.index());
    return static_cast<double>(st.allocated_bytes[0].peak) / 1e9;
  }
#endif
  return 0.0;
}

std::unique_ptr<torch::optim::AdamW> make_optimizer(Transformer& model, const RunManifest& m) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model->named_parameters()) (p.value().dim() >= 2 ? decay : no_decay).push_back(p.value());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(m.lr).betas({m.beta1, m.beta2}).eps(m.eps).weight_decay(m.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(m.lr).betas({m.beta1, m.beta2}).eps(m.eps).weight_decay(0.0)));
  return std::make_unique<torch::optim::AdamW>(groups);
}

namespace {

#if TORCH_VERSION_MAJOR >= 2
// Multi-tensor clipping and AdamW (LibTorch's foreach and fused kernels, as PyTorch's fused=True path
// calls them), reading and writing the per-parameter state torch::optim::AdamW keeps, so a
// checkpoint saved by either path loads into the other.
double clip_and_fused_adamw(torch::optim::AdamW& opt, double grad_clip) {
  std::vector<torch::Tensor> grads;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  torch::Tensor total = at::linalg_vector_norm(at::stack(at::_foreach_norm(grads, 2)), 2);
  if (grad_clip > 0) at::_foreach_mul_(grads, at::clamp_max(grad_clip / (total + 1e-6), 1.0));
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> p, g, m, v, steps;
    std::map<int64_t, torch::Tensor> step_tensor;  // one device scalar per distinct step count (the kernel only reads them)
    for (auto& param : group.params()) {
      if (!param.grad().defined()) continue;
      auto& slot = opt.state()[param.unsafeGetTensorImpl()];
      if (!slot) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        st->exp_avg_sq(torch::zeros_like(param, torch::MemoryFormat::Preserve));
        slot = std::move(st);
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
      st.step(st.step() + 1);
      p.push_back(param);
      g.push_back(param.grad());
      m.push_back(st.exp_avg());
      v.push_back(st.exp_avg_sq());
      torch::Tensor& t = step_tensor[st.step()];
      if (!t.defined()) t = torch::full({}, static_cast<double>(st.step()), param.options().dtype(torch::kFloat32));
      steps.push_back(t);
    }
    if (p.empty()) continue;
    at::_fused_adamw_(p, g, m, v, {}, steps, o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(),
                      o.amsgrad(), /*maximize=*/false);
  }
  return total.item<double>();
}
#endif

}  // namespace

StepStats train_step(Transformer& model, torch::optim::AdamW& opt, const std::function<torch::Tensor()>& next_batch, int64_t accum,
                     int64_t seq_len, double grad_clip) {
  // Gradients to none, not to zero (LibTorch 2's default, done by hand for 1.13): an expert that gets
  // no tokens has no gradient, so clipping and AdamW skip it alike whether or not the run was resumed
  // (a zero gradient left from before a checkpoint would still decay and move its weights).
  for (auto& group : opt.param_groups())
    for (auto& p : group.params()) p.mutable_grad() = torch::Tensor();
  torch::Tensor loss_sum;
  for (int64_t a = 0; a < accum; ++a) {
    torch::Tensor batch = next_batch();
    TransformerOutput o = model->loss(batch.slice(1, 0, seq_len), batch.slice(1, 1, seq_len + 1));
    (o.loss / static_cast<double>(accum)).backward();
    torch::Tensor l = o.lm_loss.detach().to(torch::kFloat64);  // summed in double, read once
    loss_sum = a == 0 ? l : loss_sum + l;
  }
  StepStats st;
#if TORCH_VERSION_MAJOR >= 2
  const bool fused = model->parameters().front().is_cuda() && !opt.param_groups().front().params().empty();
  if (fused) st.grad_norm = clip_and_fused_adamw(opt, grad_clip);
#else
  const bool fused = false;
#endif
  if (!fused) {
    st.grad_norm = torch::nn::utils::clip_grad_norm_(model->parameters(), grad_clip > 0 ? grad_clip : 1e30);
    opt.step();
  }
  st.loss = loss_sum.item<double>() / static_cast<double>(accum);
  return st;
}

std::string results_path(const RunManifest& m, const std::string& run_id) { return m.out_dir + "/" + m.name + "-" + run_id + ".h5"; }
std::string results_path(const RunManifest& m) { return results_path(m, m.run_id()); }

std::string find_results(const RunManifest& m, const std::string& run_id) {
  if (file_exists(results_path(m, run_id))) return results_path(m, run_id);
  std::vector<std::string> files;
  walk_files(m.out_dir, "-" + run_id + ".h5", files);
  return files.empty() ? "" : files.front();
}
std::string find_results(const RunManifest& m) { return find_results(m, m.run_id()); }

std::string checkpoint_path(const RunManifest& m, const std::string& run_id) { return m.out_dir + "/" + m.name + "-" + run_id + ".ckpt"; }
std::string checkpoint_path(const RunManifest& m) { return checkpoint_path(m, m.run_id()); }

void ensure_data(const RunManifest& m) {
  if (data_ready(m.data_path) || m.data_prepare.empty()) return;
  DataPrepareOptions d;
  d.out_dir = m.data_path;
  d.ci_corpus = m.data_prepare == "ci";
  d.tokenizer = m.tokenizer;
  d.vocab_size = static_cast<int>(m.vocab_size);
  make_dirs(m.data_path);
  run_data_tool(d);
}

namespace {

torch::Device choose_device(const RunManifest& m, const RunOptions& opt, std::string& device_name) {
  const std::string dev = opt.device.empty() ? m.device : opt.device;
  const bool cuda = torch::cuda::is_available();
  if (dev == "cuda" && !cuda) throw Error(m.path + ": train.device: cuda requested but no CUDA device is available (allowed: auto, cpu, cuda)");
  const torch::Device device = (dev == "cpu" || !cuda) ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA);
  device_name = "cpu";
#ifdef UFP4_WITH_CUDA
  if (device.is_cuda()) device_name = at::cuda::getCurrentDeviceProperties()->name;
#endif
  return device;
}

// SIGINT/SIGTERM stop the loop at the next step boundary (with a checkpoint) while a run is in it.
struct SignalScope {
  void (*old_int)(int), (*old_term)(int);
  SignalScope() : old_int(std::signal(SIGINT, on_signal)), old_term(std::signal(SIGTERM, on_signal)) { g_signal = 0; }
  ~SignalScope() {
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
};

// SHA-256 of the FP32 master weights, parameter by parameter in registration order, with names.
std::string weights_sha256(Transformer& model) {
  Sha256 h;
  for (const auto& p : model->named_parameters()) {
    torch::Tensor t = p.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    h.update(p.key());
    h.update(t.data_ptr(), static_cast<size_t>(t.numel()) * 4);
  }
  return h.hex();
}

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

Trainer::Trainer(const RunPlan& plan, const torch::Device& device, std::string device_name)
    : plan_(plan), m_(plan.manifest), device_(device), device_name_(std::move(device_name)), utc_start_(utc_now()), model_(nullptr),
      train_(plan.data.train_shards, plan.model.seq_len, static_cast<uint64_t>(plan.manifest.seed)),
      best_(std::numeric_limits<double>::infinity()), smooth_(NAN) {
  // Determinism and the seed come first: they fix the initial weights drawn below.
  set_deterministic(m_.deterministic);
  torch::manual_seed(static_cast<uint64_t>(m_.seed));
  ctx_ = std::make_shared<QuantContext>();
  ctx_->recipe = plan.recipe;
  ctx_->run_seed = static_cast<uint64_t>(m_.seed);
  if (!m_.capture_steps.empty())
    ctx_->capture = std::make_shared<OperandCapture>(std::set<int64_t>(m_.capture_steps.begin(), m_.capture_steps.end()), m_.capture_layers,
                                                     m_.capture_tokens);
  model_ = Transformer(plan.model, ctx_);
  model_->to(device_);
  model_->set_compute_dtype(device_.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  optimizer_ = make_optimizer(model_, m_);
}

void Trainer::resume(const std::string& checkpoint) {
  state_ = load_checkpoint(checkpoint, model_, *optimizer_, device_);
  train_.cursor = state_.cursor;
  start_ = state_.step;
}

void Trainer::save(const std::string& checkpoint) {
  state_.cursor = train_.cursor;
  save_checkpoint(checkpoint, model_, *optimizer_, state_);
}

double Trainer::evaluate() {
  torch::NoGradGuard ng;
  TokenStream val(plan_.data.val_shards, plan_.model.seq_len, 0, /*shuffle=*/false);
  const int64_t seq = plan_.model.seq_len;
  double sum = 0;
  for (int64_t b = 0; b < m_.eval_batches; ++b) {
    torch::Tensor batch = val.next(m_.micro_batch).to(device_);
    sum += model_->loss(batch.slice(1, 0, seq), batch.slice(1, 1, seq + 1)).lm_loss.item<double>();
  }
  return sum / m_.eval_batches;
}

bool Trainer::step_once(int64_t step) {
  const double lr = m_.lr_at(step);
  for (auto& g : optimizer_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  ctx_->step = step;
  ctx_->telemetry = m_.telemetry_every > 0 && step % m_.telemetry_every == 0;
  // This step's values only: an operand that saw no tokens (an idle expert) reads NaN, not the value
  // of an earlier step, which a resumed process would not have.
  if (ctx_->telemetry) ctx_->alpha.clear();
  const StepStats st = train_step(model_, *optimizer_, [&] { return train_.next(m_.micro_batch).to(device_); }, m_.batch / m_.micro_batch,
                                  plan_.model.seq_len, m_.grad_clip);
  if (ctx_->capture) write_capture(plan_.capture_dir, step, ctx_->capture->take());
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const int64_t tokens = (step + 1) * plan_.tokens_per_step;
  record_step(state_.curves, state_.elapsed_before, *ctx_, step, tokens, lr, st, elapsed);
  tokens_per_s_ = elapsed > 0 ? (step + 1 - start_) * plan_.tokens_per_step / elapsed : 0;  // this process's steps only
  const double peak = peak_flops(device_name_);
  mfu_ = peak > 0 ? tokens_per_s_ * train_flops_per_token(plan_.model) / peak : 0;
  char extra[96];
  if (device_.is_cuda()) std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f | MFU %.1f%%", lr, st.grad_norm, 100 * mfu_);
  else std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f", lr, st.grad_norm);
  progress_->update(step + 1, tokens, st.loss, extra);
  // Divergence: a non-finite loss, or one far above the best smoothed loss once past warmup.
  smooth_ = std::isnan(smooth_) ? st.loss : 0.9 * smooth_ + 0.1 * st.loss;
  if (step >= m_.warmup) best_ = std::min(best_, smooth_);
  if (std::isfinite(st.loss) && std::isfinite(st.grad_norm) && !(step >= m_.warmup && st.loss > m_.divergence_factor * best_)) return true;
  diverged_ = true;
  diverged_step_ = step;
  log_warn("run " + m_.name + ": diverged at step " + std::to_string(step) + " (loss " + std::to_string(st.loss) + ")");
  return false;
}

Trainer::Outcome Trainer::train(int64_t stop_after) {
  SignalScope signals;
  Progress progress("run " + m_.name, m_.steps, 5.0);
  progress.resume_from(start_, start_ * plan_.tokens_per_step);
  progress_ = &progress;
  t0_ = std::chrono::steady_clock::now();
  for (int64_t step = start_; step < m_.steps; ++step) {
    const bool ok = step_once(step);
    state_.step = step + 1;
    if (!ok) return Outcome::kDiverged;
    if (m_.eval_every > 0 && ((step + 1) % m_.eval_every == 0 || step + 1 == m_.steps)) {
      state_.curves.eval_step.push_back(static_cast<double>(step));
      state_.curves.eval_loss.push_back(evaluate());
      log_info("run " + m_.name + ": step " + std::to_string(step + 1) + " validation loss " + std::to_string(state_.curves.eval_loss.back()));
    }
    const bool stop = g_signal != 0 || (stop_after >= 0 && step + 1 >= stop_after && step + 1 < m_.steps);
    if ((m_.checkpoint_every > 0 && (step + 1) % m_.checkpoint_every == 0 && step + 1 < m_.steps) || stop) save(plan_.checkpoint_path);
    if (stop) return Outcome::kStopped;
  }
  return Outcome::kFinished;
}

RunResults Trainer::results() {
  RunResults r;
  const RunPlan& p = plan_;
  r.run_name = m_.name;
  r.run_id = p.run_id;
  r.run_identity = p.identity.text;
  r.manifest = m_.resolved();
  r.manifest_sha256 = sha256_hex(r.manifest);
  r.manifest_path = m_.path;
  r.model = p.model.name;
  r.model_sha256 = p.identity.model_sha256;
  r.recipe = p.recipe.name;
  r.recipe_resolved = p.recipe.to_toml();
  r.recipe_sha256 = p.identity.recipe_sha256;
  r.data_path = p.data.dir;
  r.data_manifest_sha256 = p.data.manifest_sha256;
  r.data_train_tokens = train_.tokens();
  r.seed = m_.seed;
  r.deterministic = m_.deterministic;
  r.utc_start = utc_start_;
  r.device_name = device_name_;
  r.weights_sha256 = weights_sha256(model_);
  r.diverged = diverged_;
  r.diverged_step = diverged_step_;
  r.tokens_per_s = tokens_per_s_;
  r.mfu = mfu_;
  r.flops_per_token = train_flops_per_token(p.model);
  r.peak_memory_gb = peak_memory_gb(device_);
  r.curves = state_.curves;
  return r;
}

RunResult run_training(const RunManifest& m, const RunOptions& opt) {
  ensure_data(m);
  return run_training(plan_run(m), opt);
}

RunResult run_training(const RunPlan& plan, const RunOptions& opt) {
  const RunManifest& m = plan.manifest;
  if (const int n = remove_stale_temporaries(m.out_dir)) log_info("run " + m.name + ": removed " + std::to_string(n) + " temporary file(s) left by a killed process");
  if (const std::string existing = find_results(m, plan.run_id); !existing.empty() && !opt.force) {
    log_info("run " + m.name + ": results exist (" + existing + "), skipped");
    return {RunStatus::kSkipped, existing, 0};
  }
  make_dirs(m.out_dir);
  std::string device_name;
  const torch::Device device = choose_device(m, opt, device_name);
  Trainer trainer(plan, device, device_name);
  if (file_exists(plan.checkpoint_path)) {
    trainer.resume(plan.checkpoint_path);
    log_info("run " + m.name + ": resumed from " + plan.checkpoint_path + " at step " + std::to_string(trainer.steps_done()));
  }
  char intro[256];
  std::snprintf(intro, sizeof intro, "run %s: %lld steps x %lld tokens = %.3g tokens, %.3g epochs of %lld training tokens; %s, %s", m.name.c_str(),
                static_cast<long long>(m.steps), static_cast<long long>(plan.tokens_per_step), static_cast<double>(m.steps * plan.tokens_per_step),
                plan.epochs, static_cast<long long>(plan.data_train_tokens), device_name.c_str(), m.deterministic ? "deterministic" : "not deterministic");
  log_info(intro);
  const Trainer::Outcome outcome = trainer.train(opt.stop_after);
  if (outcome == Trainer::Outcome::kStopped) {
    log_info("run " + m.name + ": stopped after step " + std::to_string(trainer.steps_done()) + "; checkpoint " + plan.checkpoint_path +
             " (ufp4 run resumes it)");
    return {RunStatus::kStopped, "", trainer.steps_done()};
  }
  write_run_results(plan.results_path, trainer.results());
  remove_tree(plan.checkpoint_path);  // only once the results are in place
  const bool diverged = outcome == Trainer::Outcome::kDiverged;
  log_info("run " + m.name + ": " + (diverged ? "diverged" : "done") + " -> " + plan.results_path);
  return {diverged ? RunStatus::kDiverged : RunStatus::kCompleted, plan.results_path, trainer.steps_done()};
}

}  // namespace ufp4
