// Token shards (llm.c format) and data folders.
#include <map>

#include "harness/data/data.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"
#include "common/toml_util.h"
#include "kernels/numerics/philox.h"

namespace ufp4 {

namespace {
constexpr int32_t kMagic = 20240520;
}  // namespace

std::string ci_corpus_text(size_t bytes) {
  // Pseudo-words from syllables, Zipf-like word choice, simple sentences: fixed for every machine.
  static const char* syl[] = {"ka", "lo", "mi", "ter", "an", "su", "ri", "po", "del", "va", "ne", "os", "tu", "gra", "fen", "li"};
  std::vector<std::string> words;
  for (int i = 0; i < 600; ++i) {
    U32x4 r = philox4x32_10(static_cast<uint32_t>(i), 0, 0, 0, 0xc1c0, 0);
    std::string w;
    int n = 1 + r.v[0] % 3;
    for (int k = 0; k < n; ++k) w += syl[(r.v[1 + k % 3] >> (4 * k)) % 16];
    words.push_back(w);
  }
  std::string out;
  uint64_t ctr = 0;
  while (out.size() < bytes) {
    U32x4 r = philox4x32_10(static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 1, 0, 0xc1c0, 0);
    ++ctr;
    int len = 4 + r.v[0] % 9;
    for (int k = 0; k < len; ++k) {
      U32x4 q = philox4x32_10(static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 2, 0, 0xc1c0, 0);
      ++ctr;
      double u = (q.v[0] >> 8) / 16777216.0;
      size_t idx = static_cast<size_t>(words.size() * u * u * u);  // skewed towards frequent words
      std::string w = words[std::min(idx, words.size() - 1)];
      if (k == 0) w[0] = static_cast<char>(w[0] - 32);
      out += w;
      out += k + 1 == len ? ".\n" : " ";
    }
  }
  out.resize(bytes);
  return out;
}

void write_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  int32_t header[256] = {0};
  header[0] = kMagic;
  header[1] = 1;
  header[2] = static_cast<int32_t>(tokens.size());
  AtomicFile out(path);
  out.write(header, sizeof header);
  out.write(tokens.data(), tokens.size() * 2);
  out.commit();
}

int64_t read_shard_header(std::istream& in, const std::string& path) {
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  if (!in || header[0] != kMagic || header[1] != 1)
    throw Error(path + ": not a token shard (expected llm.c format: magic 20240520, version 1)");
  if (header[2] < 0) throw Error(path + ": header says " + std::to_string(header[2]) + " tokens (allowed: 0 to 2147483647): a damaged shard");
  return header[2];
}

std::vector<uint16_t> read_shard(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open token shard");
  std::vector<uint16_t> t(static_cast<size_t>(read_shard_header(in, path)));
  in.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.size() * 2));
  if (!in) throw Error(path + ": truncated token shard (header says " + std::to_string(t.size()) + " tokens)");
  return t;
}

int64_t count_train_tokens(const DataInfo& info) {
  int64_t n = 0;
  for (const auto& path : info.train_shards) {
    std::ifstream in(path, std::ios::binary);
    n += read_shard_header(in, path);
  }
  return n;
}

bool data_ready(const std::string& dir) {
  if (file_exists(dir + "/data.toml")) return true;
  std::vector<std::string> files;
  walk_files(dir, ".bin", files);
  bool train = false, val = false;
  for (const auto& f : files) {
    const std::string base = f.substr(f.find_last_of('/') + 1);
    val = val || base.find("val") != std::string::npos;
    train = train || base.find("train") != std::string::npos;
  }
  return train && val;
}

namespace {
std::map<std::string, std::string>& pins() {
  static std::map<std::string, std::string> p;
  return p;
}
std::string folder_key(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  while (dir.rfind("./", 0) == 0) dir = dir.substr(2);
  return dir;
}
}  // namespace

void pin_data_manifest(const std::string& dir, const std::string& data_toml) {
  if (!file_exists(data_toml)) throw Error(data_toml + ": the data manifest pinned for " + dir + " does not exist");
  pins()[folder_key(dir)] = data_toml;
}

std::string pinned_data_manifest(const std::string& dir) {
  const auto it = pins().find(folder_key(dir));
  return it == pins().end() ? "" : it->second;
}

std::string data_identity(const std::string& dir) {
  if (file_exists(dir + "/data.toml")) return sha256_hex(read_text_file(dir + "/data.toml"));
  return load_data_info(dir).manifest_sha256;
}

DataInfo load_data_info(const std::string& dir) {
  DataInfo info;
  info.dir = dir;
  const std::string manifest = dir + "/data.toml";
  if (file_exists(manifest)) {
    info.manifest_sha256 = sha256_hex(read_text_file(manifest));
    const toml::table t = toml_parse(manifest);
    auto where = [&](const toml::node* n) { return manifest + ":" + std::to_string(n ? n->source().begin.line : 1); };
    const toml::node* tok = t.get("tokenizer");
    if (!tok || !tok->is_string()) throw Error(where(tok) + ": tokenizer: expected a string (allowed: bpe, byte)");
    info.tokenizer = *tok->value<std::string>();
    const toml::node* vocab = t.get("vocab");
    if (!vocab || !vocab->is_integer() || *vocab->value<int64_t>() < 1 || *vocab->value<int64_t>() > 65536)
      throw Error(where(vocab) + ": vocab: expected an integer (allowed: 1 to 65536, tokens are stored as uint16)");
    info.vocab = static_cast<int>(*vocab->value<int64_t>());
    const toml::table* shards = t["shards"].as_table();
    if (!shards) throw Error(manifest + ": missing table [shards]");
    // [shards] train = ["train_000.bin", ...] and val = [...] (data.toml as prepare_data writes it).
    auto list = [&](const std::string& key) {
      std::vector<std::string> out;
      const toml::node* n = shards->get(key);
      if (!n || !n->is_array()) throw Error(where(n) + ": shards." + key + ": expected a list of shard files");
      for (const auto& e : *n->as_array()) {
        if (!e.is_string()) throw Error(where(&e) + ": shards." + key + ": expected shard file names (strings)");
        out.push_back(dir + "/" + *e.value<std::string>());
      }
      if (out.empty()) throw Error(where(n) + ": shards." + key + " names no shard");
      return out;
    };
    info.train_shards = list("train");
    info.val_shards = list("val");
    return info;
  }
  std::vector<std::string> files;
  walk_files(dir, ".bin", files);
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string base = f.substr(f.find_last_of('/') + 1);
    if (base.find("val") != std::string::npos) info.val_shards.push_back(f);
    else if (base.find("train") != std::string::npos) info.train_shards.push_back(f);
  }
  if (info.train_shards.empty())
    throw Error(dir + ": no data.toml and no *train*.bin shards (run `ufp4 data prepare --out " + dir + "`)");
  if (info.val_shards.empty()) throw Error(dir + ": no *val*.bin shard for evaluation");
  info.tokenizer = "external (llm.c shards)";
  info.vocab = 65536;
  // The shards' contents, hashed once per process and folder: shard folders can hold gigabytes, and
  // plan, run and the trainer each ask.
  static std::map<std::string, std::string> hashed;
  auto it = hashed.find(dir);
  if (it == hashed.end()) {
    Sha256 h;
    for (const auto& f : files) h.update(sha256_file(f));
    it = hashed.emplace(dir, h.hex()).first;
  }
  info.manifest_sha256 = it->second;
  return info;
}

}  // namespace ufp4
