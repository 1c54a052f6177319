#include "harness/train/checkpoint.h"

#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"

namespace ufp4 {

namespace {

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

// The curve columns a checkpoint keeps: the one list that saving and loading both walk.
template <class Curves>
std::vector<std::pair<const char*, decltype(&std::declval<Curves&>().step)>> columns(Curves& c) {
  return {{"c_step", &c.step},           {"c_tokens", &c.tokens},       {"c_loss", &c.loss},
          {"c_lr", &c.lr},               {"c_grad_norm", &c.grad_norm}, {"c_time", &c.time_s},
          {"c_eval_step", &c.eval_step}, {"c_eval_loss", &c.eval_loss}, {"c_alpha_step", &c.alpha_step}};
}

}  // namespace

void write_archive(const std::string& path, torch::serialize::OutputArchive& archive) {
  AtomicFile f(path);
  archive.save_to([&f](const void* p, size_t n) {
    f.write(p, n);
    return n;  // a failure is reported by commit(), after LibTorch's writer has finished
  });
  f.commit();
}

void read_archive(const std::string& path, torch::serialize::InputArchive& archive, const torch::Device& device, const std::string& what) {
  try {
    archive.load_from(path, device);
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    throw RuntimeError(path + ": not a readable " + what + " (" + msg.substr(0, msg.find('\n')) + "); remove it to start over");
  }
}

void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const LoopState& s) {
  torch::serialize::OutputArchive root, model_ar, opt_ar, state;
  model->save(model_ar);
  opt.save(opt_ar);
  state.write("step", torch::tensor(s.step, torch::kInt64));
  state.write("epoch", torch::tensor(s.cursor.epoch, torch::kInt64));
  state.write("index", torch::tensor(s.cursor.index, torch::kInt64));
  for (const auto& col : columns(s.curves)) state.write(col.first, vec(*col.second));
  std::string keys;
  for (const auto& k : s.curves.alpha_keys) keys += k + "\n";
  state.write("alpha_keys", text_tensor(keys));
  std::vector<double> flat;
  for (const auto& row : s.curves.alpha) flat.insert(flat.end(), row.begin(), row.end());
  state.write("alpha", vec(flat));
  state.write("elapsed", torch::tensor(s.curves.time_s.empty() ? s.elapsed_before : s.curves.time_s.back(), torch::kFloat64));
  state.write("world_size", torch::tensor(s.world_size, torch::kInt64));
  state.write("sharded_optimizer", torch::tensor(static_cast<int64_t>(s.sharded_optimizer), torch::kInt64));
  root.write("model", model_ar);
  root.write("optimizer", opt_ar);
  root.write("state", state);
  write_archive(path, root);
}

LoopState load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const torch::Device& device) {
  torch::serialize::InputArchive root, model_ar, opt_ar, state;
  read_archive(path, root, device, "checkpoint");
  try {
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
  LoopState s;
  s.step = read("step").item<int64_t>();
  s.cursor.epoch = read("epoch").item<int64_t>();
  s.cursor.index = read("index").item<int64_t>();
  RunCurves& c = s.curves;
  for (auto& col : columns(c)) *col.second = unvec(read(col.first));
  std::string keys = tensor_text(read("alpha_keys"));
  for (size_t at = 0, nl; (nl = keys.find('\n', at)) != std::string::npos; at = nl + 1) c.alpha_keys.push_back(keys.substr(at, nl - at));
  const std::vector<double> flat = unvec(read("alpha"));
  const size_t width = c.alpha_keys.size();
  for (size_t r = 0; width && r < c.alpha_step.size(); ++r) c.alpha.emplace_back(flat.begin() + r * width, flat.begin() + (r + 1) * width);
  s.elapsed_before = read("elapsed").item<double>();
  torch::Tensor t;
  if (state.try_read("world_size", t)) s.world_size = t.item<int64_t>();
  torch::Tensor sh;
  if (state.try_read("sharded_optimizer", sh)) s.sharded_optimizer = sh.item<int64_t>() != 0;
  return s;
}

}  // namespace ufp4
