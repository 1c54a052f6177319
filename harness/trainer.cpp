#include "harness/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <cstdio>

#include "harness/array_io.h"
#include "harness/data.h"
#include "harness/token_stream.h"
#include "harness/error.h"
#include "harness/fs.h"
#include "harness/log.h"
#include "harness/provenance.h"
#include "harness/sha256.h"
#include "models/transformer.h"
#ifdef UFP4_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ufp4 {

namespace {

std::atomic<int> g_signal{0};
void on_signal(int s) { g_signal = s; }


// Metrics kept across checkpoints so a resumed run writes the whole curve.
struct Curves {
  std::vector<double> step, tokens, loss, lr, grad_norm, time_s, eval_step, eval_loss, alpha_step;
  std::vector<std::vector<double>> alpha;  // per telemetry step, in alpha_keys order
  std::vector<std::string> alpha_keys;
};

torch::Tensor vec(const std::vector<double>& v) {
  return torch::from_blob(const_cast<double*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kFloat64).clone();
}
std::vector<double> unvec(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

void save_checkpoint(const std::string& dir, Transformer& model, torch::optim::Optimizer& opt, const TokenStream& data, int64_t step,
                     const Curves& c) {
  const std::string tmp = dir + ".tmp-" + std::to_string(::getpid());
  make_dirs(tmp);
  torch::save(model, tmp + "/model.pt");
  torch::save(opt, tmp + "/optimizer.pt");
  torch::serialize::OutputArchive a;
  a.write("step", torch::tensor(step, torch::kInt64));
  a.write("epoch", torch::tensor(data.cursor.epoch, torch::kInt64));
  a.write("index", torch::tensor(data.cursor.index, torch::kInt64));
  const std::pair<const char*, const std::vector<double>*> cols[] = {
      {"c_step", &c.step}, {"c_tokens", &c.tokens}, {"c_loss", &c.loss}, {"c_lr", &c.lr}, {"c_grad_norm", &c.grad_norm},
      {"c_time", &c.time_s}, {"c_eval_step", &c.eval_step}, {"c_eval_loss", &c.eval_loss}, {"c_alpha_step", &c.alpha_step}};
  for (const auto& col : cols) a.write(col.first, vec(*col.second));
  a.save_to(tmp + "/state.pt");
  // Replace the previous checkpoint only once the new one is complete.
  const std::string old = dir + ".old-" + std::to_string(::getpid());
  if (file_exists(dir)) std::rename(dir.c_str(), old.c_str());
  if (std::rename(tmp.c_str(), dir.c_str()) != 0) throw RuntimeError(dir + ": cannot move the checkpoint into place");
  if (file_exists(old)) std::system(("rm -rf '" + old + "'").c_str());
}

int64_t load_checkpoint(const std::string& dir, Transformer& model, torch::optim::Optimizer& opt, TokenStream& data, Curves& c,
                        const torch::Device& device) {
  torch::load(model, dir + "/model.pt", device);
  torch::load(opt, dir + "/optimizer.pt", device);
  torch::serialize::InputArchive a;
  a.load_from(dir + "/state.pt");
  // A fresh tensor for every read: reading into a defined tensor keeps that tensor's dtype.
  auto read = [&](const char* key) {
    torch::Tensor t;
    a.read(key, t);
    return t;
  };
  const int64_t step = read("step").item<int64_t>();
  data.cursor.epoch = read("epoch").item<int64_t>();
  data.cursor.index = read("index").item<int64_t>();
  std::pair<const char*, std::vector<double>*> cols[] = {
      {"c_step", &c.step}, {"c_tokens", &c.tokens}, {"c_loss", &c.loss}, {"c_lr", &c.lr}, {"c_grad_norm", &c.grad_norm},
      {"c_time", &c.time_s}, {"c_eval_step", &c.eval_step}, {"c_eval_loss", &c.eval_loss}, {"c_alpha_step", &c.alpha_step}};
  for (auto& col : cols) *col.second = unvec(read(col.first));
  return step;
}

void write_results(const std::string& path, const RunManifest& m, const ModelConfig& mc, const Recipe& recipe, const DataInfo& data,
                   const Curves& c, bool diverged, int64_t diverged_step, const std::string& utc_start, double tokens_per_s, double mfu,
                   const std::string& device_name, double peak_mem_gb) {
  H5Writer w(path);
  write_provenance(w);
  w.attr("schema_version", static_cast<int64_t>(1));
  w.attr("run_name", m.name);
  w.attr("run_id", m.run_id());
  w.attr("manifest", m.resolved());
  w.attr("manifest_sha256", sha256_hex(m.resolved()));
  w.attr("manifest_path", m.path);
  w.attr("model", mc.name);
  w.attr("recipe", recipe.name);
  w.attr("recipe_resolved", recipe.to_toml());
  w.attr("data_path", data.dir);
  w.attr("data_manifest_sha256", data.manifest_sha256);
  w.attr("seed", static_cast<int64_t>(m.seed));
  w.attr("utc_start", utc_start);
  w.attr("utc_end", utc_now());
  w.attr("device_name", device_name);
  const int64_t n = static_cast<int64_t>(c.step.size());
  auto put = [&](const std::string& name, const std::vector<double>& v, const std::string& unit) {
    std::vector<float> f(v.begin(), v.end());
    w.write_f32(name, f.data(), {static_cast<int64_t>(f.size())});
    w.attr("units", unit, name);
  };
  std::vector<int64_t> steps(c.step.begin(), c.step.end()), tokens(c.tokens.begin(), c.tokens.end());
  w.write_i64("train/step", steps.data(), {n});
  w.attr("units", std::string("optimizer steps (0-based)"), "train/step");
  w.write_i64("train/tokens", tokens.data(), {n});
  w.attr("units", std::string("tokens seen after the step"), "train/tokens");
  put("train/loss", c.loss, "nats per token (mean next-token cross entropy)");
  put("train/lr", c.lr, "learning rate");
  put("train/grad_norm", c.grad_norm, "L2 norm before clipping");
  put("train/time", c.time_s, "seconds since the run (or its last resume) started");
  std::vector<int64_t> es(c.eval_step.begin(), c.eval_step.end());
  w.write_i64("eval/step", es.data(), {static_cast<int64_t>(es.size())});
  put("eval/loss", c.eval_loss, "nats per token on the validation split");
  if (!c.alpha.empty()) {
    std::vector<float> a;
    for (const auto& row : c.alpha) a.insert(a.end(), row.begin(), row.end());
    w.write_f32("telemetry/alpha", a.data(), {static_cast<int64_t>(c.alpha.size()), static_cast<int64_t>(c.alpha_keys.size())});
    std::string keys;
    for (const auto& k : c.alpha_keys) keys += k + "\n";
    w.attr("keys", keys, "telemetry/alpha");
    w.attr("units", std::string("alpha (Eq. 3) of each quantized operand; rows: telemetry/alpha_step"), "telemetry/alpha");
    put("telemetry/alpha_step", c.alpha_step, "optimizer step");
  }
  const int64_t k = std::max<int64_t>(1, std::min<int64_t>(1000, n / 10));
  double tail = 0;
  for (int64_t i = n - k; i < n; ++i) tail += c.loss[static_cast<size_t>(i)];
  w.attr("final_loss", n ? c.loss.back() : NAN);
  w.attr("mean_loss_last_k", n ? tail / k : NAN);
  w.attr("last_k", k);
  w.attr("final_eval_loss", c.eval_loss.empty() ? NAN : c.eval_loss.back());
  w.attr("diverged", static_cast<int64_t>(diverged));
  w.attr("diverged_step", diverged_step);
  w.attr("steps_done", n);
  w.attr("tokens_per_s", tokens_per_s);
  w.attr("mfu", mfu);
  w.attr("flops_per_token", train_flops_per_token(mc));
  w.attr("peak_memory_gb", peak_mem_gb);
  w.commit();
}

}  // namespace

double peak_flops(const torch::Device& d) {
  // Dense BF16 tensor-core peak used for MFU: 989.5 TFLOP/s for H100/H200 SXM (vendor datasheet).
  return d.is_cuda() ? 989.5e12 : 0.0;
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
  opt.zero_grad();
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

std::string results_path(const RunManifest& m) { return m.out_dir + "/" + m.name + "-" + m.run_id() + ".h5"; }
std::string find_results(const RunManifest& m) {
  if (file_exists(results_path(m))) return results_path(m);
  std::vector<std::string> files;
  walk_files(m.out_dir, "-" + m.run_id() + ".h5", files);
  return files.empty() ? "" : files.front();
}

std::string checkpoint_dir(const RunManifest& m) { return m.out_dir + "/" + m.name + "-" + m.run_id() + ".ckpt"; }

RunResult run_training(const RunManifest& m, const RunOptions& opt) {
  const std::string out = results_path(m), ckpt = checkpoint_dir(m);
  const std::string existing = find_results(m);
  if (!existing.empty() && !opt.force) {
    log_info("run " + m.name + ": results exist (" + existing + "), skipped");
    return {RunStatus::kSkipped, existing, 0};
  }
  ModelConfig mc = model_config(m.model);
  if (m.seq_len > 0) mc.seq_len = m.seq_len;
  Recipe recipe = Recipe::load(m.recipe);
  // Data: prepared on first use when the manifest says how.
  if (!file_exists(m.data_path + "/data.toml") && !m.data_prepare.empty()) {
    DataPrepareOptions d;
    d.out_dir = m.data_path;
    d.ci_corpus = m.data_prepare == "ci";
    d.tokenizer = m.tokenizer;
    d.vocab_size = static_cast<int>(m.vocab_size);
    make_dirs(m.data_path);
    run_data_tool(d);
  }
  DataInfo data = load_data_info(m.data_path);
  if (data.vocab > mc.vocab && data.tokenizer != "external (llm.c shards)")
    throw Error(m.path + ": data vocabulary " + std::to_string(data.vocab) + " exceeds model " + mc.name + "'s " + std::to_string(mc.vocab));
  make_dirs(m.out_dir);

  std::string dev = opt.device.empty() ? m.device : opt.device;
  bool cuda = torch::cuda::is_available();
  if (dev == "cuda" && !cuda) throw Error(m.path + ": train.device: cuda requested but no CUDA device is available (allowed: auto, cpu, cuda)");
  const torch::Device device = (dev == "cpu" || !cuda) ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA);
  std::string device_name = "cpu";
#ifdef UFP4_WITH_CUDA
  if (device.is_cuda()) device_name = at::cuda::getCurrentDeviceProperties()->name;
#endif

  torch::manual_seed(static_cast<uint64_t>(m.seed));
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = recipe;
  ctx->run_seed = static_cast<uint64_t>(m.seed);
  if (!m.capture_steps.empty())
    ctx->capture = std::make_shared<CaptureSink>(m.out_dir + "/" + m.name + "-" + m.run_id() + ".capture",
                                                 std::set<int64_t>(m.capture_steps.begin(), m.capture_steps.end()), m.capture_layers,
                                                 m.capture_tokens);
  Transformer model(mc, ctx);
  model->to(device);
  model->set_compute_dtype(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);

  std::unique_ptr<torch::optim::AdamW> opt_ptr = make_optimizer(model, m);
  torch::optim::AdamW& optimizer = *opt_ptr;

  TokenStream train(data.train_shards, mc.seq_len, static_cast<uint64_t>(m.seed));
  Curves curves;
  int64_t start = 0;
  if (file_exists(ckpt + "/state.pt")) {
    start = load_checkpoint(ckpt, model, optimizer, train, curves, device);
    log_info("run " + m.name + ": resumed from " + ckpt + " at step " + std::to_string(start));
  }
  const std::string utc_start = utc_now();
  g_signal = 0;
  auto old_int = std::signal(SIGINT, on_signal);
  auto old_term = std::signal(SIGTERM, on_signal);
  struct Restore {
    void (*i)(int);
    void (*t)(int);
    ~Restore() { std::signal(SIGINT, i); std::signal(SIGTERM, t); }
  } restore{old_int, old_term};

  const int64_t accum = m.batch / m.micro_batch;
  const int64_t tokens_per_step = m.batch * mc.seq_len;
  const double flops_per_token = train_flops_per_token(mc);
  Progress progress("run " + m.name, m.steps, 5.0);
  auto t0 = std::chrono::steady_clock::now();
  double best = std::numeric_limits<double>::infinity(), smooth = NAN;
  bool diverged = false;
  int64_t diverged_step = -1, step = start;
  double tokens_per_s = 0, mfu = 0;
  const int64_t timed_from = start;
  auto evaluate = [&]() {
    torch::NoGradGuard ng;
    TokenStream val(data.val_shards, mc.seq_len, 0, /*shuffle=*/false);
    double sum = 0;
    for (int64_t b = 0; b < m.eval_batches; ++b) {
      torch::Tensor batch = val.next(m.micro_batch).to(device);
      sum += model->loss(batch.slice(1, 0, mc.seq_len), batch.slice(1, 1, mc.seq_len + 1)).lm_loss.item<double>();
    }
    return sum / m.eval_batches;
  };

  for (; step < m.steps; ++step) {
    const double lr = m.lr_at(step);
    for (auto& g : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    ctx->step = step;
    ctx->telemetry = m.telemetry_every > 0 && step % m.telemetry_every == 0;
    const StepStats st = train_step(model, optimizer, [&] { return train.next(m.micro_batch).to(device); }, accum, mc.seq_len, m.grad_clip);
    const double loss = st.loss, gnorm = st.grad_norm;
    if (ctx->capture) ctx->capture->flush(step);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    curves.step.push_back(static_cast<double>(step));
    curves.tokens.push_back(static_cast<double>((step + 1) * tokens_per_step));
    curves.loss.push_back(loss);
    curves.lr.push_back(lr);
    curves.grad_norm.push_back(gnorm);
    curves.time_s.push_back(elapsed);
    if (ctx->telemetry && !ctx->alpha.empty()) {
      if (curves.alpha_keys.empty())
        for (const auto& kv : ctx->alpha) curves.alpha_keys.push_back(kv.first);
      std::vector<double> row;
      for (const auto& k : curves.alpha_keys) row.push_back(ctx->alpha.count(k) ? ctx->alpha[k] : NAN);
      curves.alpha.push_back(row);
      curves.alpha_step.push_back(static_cast<double>(step));
    }
    tokens_per_s = elapsed > 0 ? (step + 1 - timed_from) * tokens_per_step / elapsed : 0;
    mfu = peak_flops(device) > 0 ? tokens_per_s * flops_per_token / peak_flops(device) : 0;
    char extra[96];
    if (device.is_cuda()) std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f | MFU %.1f%%", lr, gnorm, 100 * mfu);
    else std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f", lr, gnorm);
    progress.update(step + 1, (step + 1) * tokens_per_step, loss, extra);
    // Divergence: a non-finite loss, or one far above the best smoothed loss once past warmup.
    smooth = std::isnan(smooth) ? loss : 0.9 * smooth + 0.1 * loss;
    if (step >= m.warmup) best = std::min(best, smooth);
    if (!std::isfinite(loss) || !std::isfinite(gnorm) || (step >= m.warmup && loss > m.divergence_factor * best)) {
      diverged = true;
      diverged_step = step;
      log_warn("run " + m.name + ": diverged at step " + std::to_string(step) + " (loss " + std::to_string(loss) + ")");
      ++step;
      break;
    }
    if (m.eval_every > 0 && ((step + 1) % m.eval_every == 0 || step + 1 == m.steps)) {
      curves.eval_step.push_back(static_cast<double>(step));
      curves.eval_loss.push_back(evaluate());
      log_info("run " + m.name + ": step " + std::to_string(step + 1) + " validation loss " + std::to_string(curves.eval_loss.back()));
    }
    const bool stop = g_signal != 0 || (opt.stop_after >= 0 && step + 1 >= opt.stop_after && step + 1 < m.steps);
    if ((m.checkpoint_every > 0 && (step + 1) % m.checkpoint_every == 0) || stop) save_checkpoint(ckpt, model, optimizer, train, step + 1, curves);
    if (stop) {
      log_info("run " + m.name + ": stopped after step " + std::to_string(step + 1) + "; checkpoint " + ckpt + " (ufp4 run resumes it)");
      return {RunStatus::kStopped, "", step + 1};
    }
  }
  write_results(out, m, mc, recipe, data, curves, diverged, diverged_step, utc_start, tokens_per_s, mfu, device_name,
                peak_memory_gb(device));
  std::system(("rm -rf '" + ckpt + "'").c_str());
  log_info("run " + m.name + ": " + (diverged ? "diverged" : "done") + " -> " + out);
  return {diverged ? RunStatus::kDiverged : RunStatus::kCompleted, out, step};
}

}  // namespace ufp4
