#include "harness/trainer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <map>
#include <cstdio>

#include "harness/array_io.h"
#include "harness/atomic_file.h"
#include "harness/data.h"
#include "harness/determinism.h"
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
  double elapsed_before = 0;  // training seconds of earlier processes of this run (train/time is cumulative)
};

torch::Tensor vec(const std::vector<double>& v) {
  return torch::from_blob(const_cast<double*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kFloat64).clone();
}
std::vector<double> unvec(const torch::Tensor& t) {
  torch::Tensor c = t.to(torch::kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}
torch::Tensor text_tensor(const std::string& s) {
  return torch::from_blob(const_cast<char*>(s.data()), {static_cast<int64_t>(s.size())}, torch::kUInt8).clone();
}
std::string tensor_text(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous();
  return std::string(reinterpret_cast<const char*>(c.data_ptr<uint8_t>()), static_cast<size_t>(c.numel()));
}

// The curve columns a checkpoint keeps, one list for saving and loading.
std::vector<std::pair<const char*, std::vector<double>*>> columns(Curves& c) {
  return {{"c_step", &c.step},         {"c_tokens", &c.tokens},       {"c_loss", &c.loss},
          {"c_lr", &c.lr},             {"c_grad_norm", &c.grad_norm}, {"c_time", &c.time_s},
          {"c_eval_step", &c.eval_step}, {"c_eval_loss", &c.eval_loss}, {"c_alpha_step", &c.alpha_step}};
}

// One file: the model, the optimizer and the loop's state (step, data cursor, curves, telemetry, clock)
// as nested archives of one LibTorch archive, written through AtomicFile: a full disk or a kill leaves
// the previous checkpoint as it was.
void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const TokenStream& data, int64_t step,
                     Curves& c) {
  torch::serialize::OutputArchive root, model_ar, opt_ar, state;
  model->save(model_ar);
  opt.save(opt_ar);
  state.write("step", torch::tensor(step, torch::kInt64));
  state.write("epoch", torch::tensor(data.cursor.epoch, torch::kInt64));
  state.write("index", torch::tensor(data.cursor.index, torch::kInt64));
  for (const auto& col : columns(c)) state.write(col.first, vec(*col.second));
  std::string keys;
  for (const auto& k : c.alpha_keys) keys += k + "\n";
  state.write("alpha_keys", text_tensor(keys));
  std::vector<double> flat;
  for (const auto& row : c.alpha) flat.insert(flat.end(), row.begin(), row.end());
  state.write("alpha", vec(flat));
  state.write("elapsed", torch::tensor(c.time_s.empty() ? c.elapsed_before : c.time_s.back(), torch::kFloat64));
  root.write("model", model_ar);
  root.write("optimizer", opt_ar);
  root.write("state", state);
  AtomicFile f(path);
  root.save_to([&f](const void* p, size_t n) {
    f.write(p, n);
    return n;  // a failure is reported by commit(), after LibTorch's writer has finished
  });
  f.commit();
}

int64_t load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, TokenStream& data, Curves& c,
                        const torch::Device& device) {
  torch::serialize::InputArchive root, model_ar, opt_ar, state;
  try {
    root.load_from(path, device);
    root.read("model", model_ar);
    root.read("optimizer", opt_ar);
    root.read("state", state);
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    throw RuntimeError(path + ": not a readable checkpoint (" + msg.substr(0, msg.find('\n')) + "); remove it to start over");
  }
  model->load(model_ar);
  opt.load(opt_ar);
  // A fresh tensor for every read: reading into a defined tensor keeps that tensor's dtype.
  auto read = [&](const char* key) {
    torch::Tensor t;
    state.read(key, t);
    return t.cpu();
  };
  const int64_t step = read("step").item<int64_t>();
  data.cursor.epoch = read("epoch").item<int64_t>();
  data.cursor.index = read("index").item<int64_t>();
  for (auto& col : columns(c)) *col.second = unvec(read(col.first));
  c.alpha_keys.clear();
  std::string keys = tensor_text(read("alpha_keys"));
  for (size_t at = 0, nl; (nl = keys.find('\n', at)) != std::string::npos; at = nl + 1) c.alpha_keys.push_back(keys.substr(at, nl - at));
  const std::vector<double> flat = unvec(read("alpha"));
  c.alpha.clear();
  const size_t width = c.alpha_keys.size();
  for (size_t r = 0; width && r < c.alpha_step.size(); ++r) c.alpha.emplace_back(flat.begin() + r * width, flat.begin() + (r + 1) * width);
  c.elapsed_before = read("elapsed").item<double>();
  return step;
}

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

struct RunInfo {  // what the results file says about the run beside its curves
  std::string utc_start, device_name, weights_sha256;
  bool diverged = false;
  int64_t diverged_step = -1;
  double tokens_per_s = 0, mfu = 0, peak_mem_gb = 0;
};

void write_results(const std::string& path, const RunManifest& m, const RunIdentity& id, const ModelConfig& mc, const Recipe& recipe,
                   const DataInfo& data, const TokenStream& train, const Curves& c, const RunInfo& info) {
  H5Writer w(path);
  write_provenance(w);
  w.attr("schema_version", static_cast<int64_t>(2));
  w.attr("run_name", m.name);
  w.attr("run_id", sha256_hex(id.text).substr(0, 16));
  w.attr("run_identity", id.text);
  w.attr("manifest", m.resolved());
  w.attr("manifest_sha256", sha256_hex(m.resolved()));
  w.attr("manifest_path", m.path);
  w.attr("model", mc.name);
  w.attr("model_sha256", id.model_sha256);
  w.attr("recipe", recipe.name);
  w.attr("recipe_resolved", recipe.to_toml());
  w.attr("recipe_sha256", id.recipe_sha256);
  w.attr("data_path", data.dir);
  w.attr("data_manifest_sha256", data.manifest_sha256);
  w.attr("data_train_tokens", train.tokens());
  w.attr("seed", static_cast<int64_t>(m.seed));
  w.attr("deterministic", static_cast<int64_t>(m.deterministic));
  w.attr("utc_start", info.utc_start);
  w.attr("utc_end", utc_now());
  w.attr("device_name", info.device_name);
  w.attr("weights_sha256", info.weights_sha256);
  const int64_t n = static_cast<int64_t>(c.step.size());
  auto put = [&](const std::string& name, const std::vector<double>& v, const std::string& unit) {
    w.write_f64(name, v.data(), {static_cast<int64_t>(v.size())});
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
  put("train/time", c.time_s, "seconds of training since the run started, summed over resumed processes");
  std::vector<int64_t> es(c.eval_step.begin(), c.eval_step.end());
  w.write_i64("eval/step", es.data(), {static_cast<int64_t>(es.size())});
  put("eval/loss", c.eval_loss, "nats per token on the validation split");
  if (!c.alpha.empty()) {
    std::vector<double> a;
    for (const auto& row : c.alpha) a.insert(a.end(), row.begin(), row.end());
    w.write_f64("telemetry/alpha", a.data(), {static_cast<int64_t>(c.alpha.size()), static_cast<int64_t>(c.alpha_keys.size())});
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
  w.attr("diverged", static_cast<int64_t>(info.diverged));
  w.attr("diverged_step", info.diverged_step);
  w.attr("steps_done", n);
  const double tokens_done = n ? c.tokens.back() : 0.0;
  w.attr("epochs", train.tokens() > 0 ? tokens_done / static_cast<double>(train.tokens()) : 0.0);
  w.attr("tokens_per_s", info.tokens_per_s);
  w.attr("mfu", info.mfu);
  w.attr("flops_per_token", train_flops_per_token(mc));
  w.attr("peak_memory_gb", info.peak_mem_gb);
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

void record_step(Curves& c, const QuantContext& ctx, int64_t step, int64_t tokens, double lr, const StepStats& st, double elapsed) {
  c.step.push_back(static_cast<double>(step));
  c.tokens.push_back(static_cast<double>(tokens));
  c.loss.push_back(st.loss);
  c.lr.push_back(lr);
  c.grad_norm.push_back(st.grad_norm);
  c.time_s.push_back(c.elapsed_before + elapsed);
  if (!ctx.telemetry || ctx.alpha.empty()) return;
  if (c.alpha_keys.empty())
    for (const auto& kv : ctx.alpha) c.alpha_keys.push_back(kv.first);
  std::vector<double> row;
  for (const auto& k : c.alpha_keys) row.push_back(ctx.alpha.count(k) ? ctx.alpha.at(k) : NAN);
  c.alpha.push_back(row);
  c.alpha_step.push_back(static_cast<double>(step));
}

}  // namespace

RunResult run_training(const RunManifest& m, const RunOptions& opt) {
  if (const int n = remove_stale_temporaries(m.out_dir)) log_info("run " + m.name + ": removed " + std::to_string(n) + " temporary file(s) left by a killed process");
  ensure_data(m);
  const RunIdentity id = m.identity();
  const std::string run_id = sha256_hex(id.text).substr(0, 16);
  const std::string out = results_path(m, run_id), ckpt = checkpoint_path(m, run_id);
  const std::string existing = find_results(m, run_id);
  if (!existing.empty() && !opt.force) {
    log_info("run " + m.name + ": results exist (" + existing + "), skipped");
    return {RunStatus::kSkipped, existing, 0};
  }
  ModelConfig mc = model_config(m.model);
  if (m.seq_len > 0) mc.seq_len = m.seq_len;
  Recipe recipe = Recipe::load(m.recipe);
  DataInfo data = load_data_info(m.data_path);
  if (data.vocab > mc.vocab && data.tokenizer != "external (llm.c shards)")
    throw Error(m.path + ": data vocabulary " + std::to_string(data.vocab) + " exceeds model " + mc.name + "'s " + std::to_string(mc.vocab));
  make_dirs(m.out_dir);

  std::string device_name;
  const torch::Device device = choose_device(m, opt, device_name);
  set_deterministic(m.deterministic);
  torch::manual_seed(static_cast<uint64_t>(m.seed));
  auto ctx = std::make_shared<QuantContext>();
  ctx->recipe = recipe;
  ctx->run_seed = static_cast<uint64_t>(m.seed);
  if (!m.capture_steps.empty())
    ctx->capture = std::make_shared<CaptureSink>(m.out_dir + "/" + m.name + "-" + run_id + ".capture",
                                                 std::set<int64_t>(m.capture_steps.begin(), m.capture_steps.end()), m.capture_layers,
                                                 m.capture_tokens);
  Transformer model(mc, ctx);
  model->to(device);
  model->set_compute_dtype(device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  std::unique_ptr<torch::optim::AdamW> opt_ptr = make_optimizer(model, m);
  torch::optim::AdamW& optimizer = *opt_ptr;

  m.check_epochs(count_train_tokens(data));
  TokenStream train(data.train_shards, mc.seq_len, static_cast<uint64_t>(m.seed));
  const int64_t tokens_per_step = m.batch * mc.seq_len;
  const double epochs = static_cast<double>(m.steps) * tokens_per_step / static_cast<double>(train.tokens());
  Curves curves;
  int64_t start = 0;
  if (file_exists(ckpt)) {
    start = load_checkpoint(ckpt, model, optimizer, train, curves, device);
    log_info("run " + m.name + ": resumed from " + ckpt + " at step " + std::to_string(start));
  }
  char intro[256];
  std::snprintf(intro, sizeof intro, "run %s: %lld steps x %lld tokens = %.3g tokens, %.3g epochs of %lld training tokens; %s, %s", m.name.c_str(),
                static_cast<long long>(m.steps), static_cast<long long>(tokens_per_step), static_cast<double>(m.steps * tokens_per_step),
                epochs, static_cast<long long>(train.tokens()), device_name.c_str(), m.deterministic ? "deterministic" : "not deterministic");
  log_info(intro);
  RunInfo info;
  info.utc_start = utc_now();
  info.device_name = device_name;
  SignalScope signals;

  const int64_t accum = m.batch / m.micro_batch;
  const double flops_per_token = train_flops_per_token(mc);
  Progress progress("run " + m.name, m.steps, 5.0);
  progress.resume_from(start, start * tokens_per_step);
  auto t0 = std::chrono::steady_clock::now();
  double best = std::numeric_limits<double>::infinity(), smooth = NAN;
  int64_t step = start;
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
    // This step's values only: an operand that saw no tokens (an idle expert) reads NaN, not the value
    // of an earlier step, which a resumed process would not have.
    if (ctx->telemetry) ctx->alpha.clear();
    const StepStats st = train_step(model, optimizer, [&] { return train.next(m.micro_batch).to(device); }, accum, mc.seq_len, m.grad_clip);
    if (ctx->capture) ctx->capture->flush(step);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    record_step(curves, *ctx, step, (step + 1) * tokens_per_step, lr, st, elapsed);
    info.tokens_per_s = elapsed > 0 ? (step + 1 - start) * tokens_per_step / elapsed : 0;  // this process's steps only
    info.mfu = peak_flops(device) > 0 ? info.tokens_per_s * flops_per_token / peak_flops(device) : 0;
    char extra[96];
    if (device.is_cuda()) std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f | MFU %.1f%%", lr, st.grad_norm, 100 * info.mfu);
    else std::snprintf(extra, sizeof extra, "lr %.2e | gnorm %.3f", lr, st.grad_norm);
    progress.update(step + 1, (step + 1) * tokens_per_step, st.loss, extra);
    // Divergence: a non-finite loss, or one far above the best smoothed loss once past warmup.
    smooth = std::isnan(smooth) ? st.loss : 0.9 * smooth + 0.1 * st.loss;
    if (step >= m.warmup) best = std::min(best, smooth);
    if (!std::isfinite(st.loss) || !std::isfinite(st.grad_norm) || (step >= m.warmup && st.loss > m.divergence_factor * best)) {
      info.diverged = true;
      info.diverged_step = step;
      log_warn("run " + m.name + ": diverged at step " + std::to_string(step) + " (loss " + std::to_string(st.loss) + ")");
      ++step;
      break;
    }
    if (m.eval_every > 0 && ((step + 1) % m.eval_every == 0 || step + 1 == m.steps)) {
      curves.eval_step.push_back(static_cast<double>(step));
      curves.eval_loss.push_back(evaluate());
      log_info("run " + m.name + ": step " + std::to_string(step + 1) + " validation loss " + std::to_string(curves.eval_loss.back()));
    }
    const bool stop = g_signal != 0 || (opt.stop_after >= 0 && step + 1 >= opt.stop_after && step + 1 < m.steps);
    if ((m.checkpoint_every > 0 && (step + 1) % m.checkpoint_every == 0 && step + 1 < m.steps) || stop)
      save_checkpoint(ckpt, model, optimizer, train, step + 1, curves);
    if (stop) {
      log_info("run " + m.name + ": stopped after step " + std::to_string(step + 1) + "; checkpoint " + ckpt + " (ufp4 run resumes it)");
      return {RunStatus::kStopped, "", step + 1};
    }
  }
  info.peak_mem_gb = peak_memory_gb(device);
  info.weights_sha256 = weights_sha256(model);
  write_results(out, m, id, mc, recipe, data, train, curves, info);
  remove_tree(ckpt);  // only once the results are in place
  log_info("run " + m.name + ": " + (info.diverged ? "diverged" : "done") + " -> " + out);
  return {info.diverged ? RunStatus::kDiverged : RunStatus::kCompleted, out, step};
}

}  // namespace ufp4
