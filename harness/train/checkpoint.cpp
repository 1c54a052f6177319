#include "harness/train/checkpoint.h"

#include <utility>
#include <vector>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/sha256.h"

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

namespace {

// The file: the archive's bytes, then the stamp as "key value" lines, then the stamp's length (8 bytes,
// little-endian) and the magic. The archive stays a plain zip in front, so LibTorch reads it in place.
constexpr char kMagic[9] = "UFP4ARC1";

std::string stamp_text(const ArchiveStamp& s, uint64_t bytes, const std::string& sha) {
  return "\nufp4-archive 1\nwhat " + s.what + "\nrun_id " + s.run_id + "\nstep " + std::to_string(s.step) + "\npayload_bytes " + std::to_string(bytes) +
         "\npayload_sha256 " + sha + "\n";
}

struct StampRead {
  ArchiveStamp stamp;
  uint64_t payload_bytes = 0;
  std::string payload_sha256;
};

// The stamp at the end of `path`; Error when there is none.
StampRead read_stamp(std::ifstream& in, const std::string& path, uint64_t size) {
  const std::string unstamped = path + ": not a stamped ufp4 archive (written before checkpoints carried their run id and checksum, or "
                                       "not a checkpoint at all); remove it to start the run over";
  if (size < 16) throw Error(unstamped);
  char tail[16];
  in.seekg(static_cast<std::streamoff>(size - 16));
  in.read(tail, 16);
  if (!in || std::memcmp(tail + 8, kMagic, 8) != 0) throw Error(unstamped);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = len << 8 | static_cast<unsigned char>(tail[i]);
  if (len > size - 16 || len > 4096) throw Error(path + ": damaged archive stamp (length " + std::to_string(len) + "); remove it to start the run over");
  std::string text(len, '\0');
  in.seekg(static_cast<std::streamoff>(size - 16 - len));
  in.read(&text[0], static_cast<std::streamsize>(len));
  StampRead r;
  std::istringstream lines(text);
  std::map<std::string, std::string> kv;
  for (std::string l; std::getline(lines, l);)
    if (const size_t sp = l.find(' '); sp != std::string::npos) kv[l.substr(0, sp)] = l.substr(sp + 1);
  try {
    r.stamp.what = kv.at("what");
    r.stamp.run_id = kv.at("run_id");
    r.stamp.step = std::stoll(kv.at("step"));
    r.payload_bytes = std::stoull(kv.at("payload_bytes"));
    r.payload_sha256 = kv.at("payload_sha256");
  } catch (const std::exception&) {
    throw Error(path + ": damaged archive stamp; remove it to start the run over");
  }
  if (r.payload_bytes != size - 16 - len) throw Error(path + ": damaged archive (its stamp says " + std::to_string(r.payload_bytes) + " bytes of archive, the file holds " +
                                                      std::to_string(size - 16 - len) + "); remove it to start the run over");
  return r;
}

}  // namespace

void write_archive(const std::string& path, torch::serialize::OutputArchive& archive, const ArchiveStamp& stamp) {
  AtomicFile f(path);
  Sha256 h;
  uint64_t bytes = 0;
  archive.save_to([&](const void* p, size_t n) {
    f.write(p, n);
    h.update(p, n);
    bytes += n;
    return n;  // a failure is reported by commit(), after LibTorch's writer has finished
  });
  const std::string text = stamp_text(stamp, bytes, h.hex());
  f.write(text.data(), text.size());
  char tail[16];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) tail[i] = static_cast<char>(len >> (8 * i) & 0xff);
  std::memcpy(tail + 8, kMagic, 8);
  f.write(tail, 16);
  f.commit();
}

ArchiveStamp read_archive(const std::string& path, torch::serialize::InputArchive& archive, const torch::Device& device, const ArchiveStamp& expected) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path + ": cannot open the " + expected.what);
  const uint64_t size = static_cast<uint64_t>(in.tellg());
  const StampRead r = read_stamp(in, path, size);
  if (r.stamp.what != expected.what) throw Error(path + ": a " + r.stamp.what + ", not a " + expected.what + "; remove it to start the run over");
  if (r.stamp.run_id != expected.run_id)
    throw Error(path + ": " + expected.what + " of run " + r.stamp.run_id + ", not of this run (" + expected.run_id +
                "): another run's file under this run's name; remove it to start the run over");
  if (expected.step >= 0 && r.stamp.step != expected.step)
    throw Error(path + ": " + expected.what + " of step " + std::to_string(r.stamp.step) + ", expected step " + std::to_string(expected.step) +
                "; remove the run's checkpoint files to start the run over");
  // The archive's bytes against their hash, read once, before LibTorch sees them.
  Sha256 h;
  std::vector<char> buf(1 << 20);
  in.seekg(0);
  for (uint64_t left = r.payload_bytes; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    if (!in) throw Error(path + ": cannot read the " + expected.what);
    h.update(buf.data(), n);
    left -= n;
  }
  if (h.hex() != r.payload_sha256)
    throw Error(path + ": damaged " + expected.what + " (its bytes do not match the SHA-256 it was written with); remove it to start the run over");
  in.clear();
  auto read_at = [&in](uint64_t pos, void* out, size_t n) -> size_t {
    in.clear();
    in.seekg(static_cast<std::streamoff>(pos));
    in.read(static_cast<char*>(out), static_cast<std::streamsize>(n));
    return static_cast<size_t>(in.gcount());
  };
  const uint64_t payload = r.payload_bytes;
  try {
    archive.load_from(read_at, [payload] { return static_cast<size_t>(payload); }, device);
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    throw Error(path + ": not a readable " + expected.what + " (" + msg.substr(0, msg.find('\n')) + "); remove it to start over");
  }
  return r.stamp;
}

void save_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const LoopState& s, const std::string& run_id) {
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
  state.write("expert_parallel", torch::tensor(s.expert_parallel, torch::kInt64));
  root.write("model", model_ar);
  root.write("optimizer", opt_ar);
  root.write("state", state);
  write_archive(path, root, {"checkpoint", run_id, s.step});
}

LoopState load_checkpoint(const std::string& path, Transformer& model, torch::optim::Optimizer& opt, const torch::Device& device,
                          const std::string& run_id) {
  torch::serialize::InputArchive root, model_ar, opt_ar, state;
  const ArchiveStamp stamp = read_archive(path, root, device, {"checkpoint", run_id, -1});
  try {
    root.read("model", model_ar);
    root.read("optimizer", opt_ar);
    root.read("state", state);
    model->load(model_ar);
    opt.load(opt_ar);
  } catch (const c10::Error& e) {
    std::string msg = e.what();
    throw Error(path + ": its model or optimizer does not fit this run's (" + msg.substr(0, msg.find('\n')) + "); remove it to start over");
  }
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
  torch::Tensor ep;
  if (state.try_read("expert_parallel", ep)) s.expert_parallel = ep.item<int64_t>();
  if (s.step != stamp.step) throw Error(path + ": damaged checkpoint (stamped step " + std::to_string(stamp.step) + ", holds step " + std::to_string(s.step) + ")");
  return s;
}

}  // namespace ufp4
