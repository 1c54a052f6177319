// A data folder checked by its content against data.toml: every shard's header, size and token count,
// and its SHA-256 (a full check) or a sampled hash recorded by the last full check (a quick check).
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <sstream>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/toml_util.h"
#include "harness/data/data.h"

namespace ufp4 {

namespace {

constexpr int64_t kHeaderBytes = 256 * 4;
constexpr int kSampleBlocks = 32;
constexpr int64_t kSampleBytes = 64 << 10;
const char* const kSidecar = "data.verified";

struct ShardEntry {
  std::string name, path, sha256;
  bool train = true;
};

struct DataManifest {
  std::vector<ShardEntry> shards;
  int64_t train_tokens = 0, val_tokens = 0;
};

// [shards] of data.toml: names, hashes and token counts, each checked for its type.
DataManifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/data.toml";
  const toml::table t = toml_parse(path);
  const toml::table* s = t["shards"].as_table();
  if (!s) throw Error(path + ": missing table [shards]");
  DataManifest m;
  for (const bool train : {true, false}) {
    const std::string split = train ? "train" : "val";
    const toml::array* names = (*s)[split].as_array();
    const toml::array* hashes = (*s)[split + "_sha256"].as_array();
    if (!names || names->empty()) throw Error(path + ": shards." + split + ": expected a non-empty list of shard files");
    if (!hashes || hashes->size() != names->size())
      throw Error(path + ": shards." + split + "_sha256: expected one SHA-256 for each of the " + std::to_string(names->size()) + " shards");
    for (size_t i = 0; i < names->size(); ++i) {
      const auto n = (*names)[i].value<std::string>();
      const auto h = (*hashes)[i].value<std::string>();
      if (!n || !h) throw Error(path + ": shards." + split + ": expected strings");
      m.shards.push_back({*n, dir + "/" + *n, *h, train});
    }
    const auto tokens = (*s)[split + "_tokens"].value<int64_t>();
    if (!tokens || *tokens < 0) throw Error(path + ": shards." + split + "_tokens: expected a non-negative integer");
    (train ? m.train_tokens : m.val_tokens) = *tokens;
  }
  return m;
}

// The header's token count, checked against the file's size.
int64_t shard_tokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(path + ": shard missing or unreadable (named in data.toml)");
  const int64_t size = static_cast<int64_t>(in.tellg());
  in.seekg(0);
  const int64_t tokens = read_shard_header(in, path);
  const int64_t expected = kHeaderBytes + 2 * tokens;
  if (size != expected)
    throw Error(path + ": " + std::to_string(size) + " bytes, but its header's " + std::to_string(tokens) + " tokens make " + std::to_string(expected) +
                ": a damaged or truncated shard");
  return tokens;
}

// SHA-256 of kSampleBlocks evenly spaced blocks (the first and the last among them) and the size.
std::string sampled_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const int64_t size = static_cast<int64_t>(in.tellg());
  Sha256 h;
  h.update(std::to_string(size));
  std::vector<char> buf(static_cast<size_t>(kSampleBytes));
  for (int b = 0; b < kSampleBlocks; ++b) {
    const int64_t span = std::max<int64_t>(0, size - kSampleBytes);
    const int64_t at = span * b / (kSampleBlocks - 1);
    in.seekg(at);
    in.read(buf.data(), static_cast<std::streamsize>(std::min<int64_t>(kSampleBytes, size - at)));
    h.update(buf.data(), static_cast<size_t>(in.gcount()));
    in.clear();
  }
  return h.hex();
}

std::string sidecar_text(const std::string& dir, const DataManifest& m) {
  std::ostringstream os;
  os << "# written by a full check of the shards against data.toml (ufp4 data verify); read by the quick check at every run start\n"
     << "data_toml_sha256 " << sha256_hex(read_text_file(dir + "/data.toml")) << "\n";
  for (const auto& s : m.shards) os << "shard " << s.name << " " << sampled_sha256(s.path) << "\n";
  return os.str();
}

// The sidecar's sampled hashes, when it was written for this data.toml.
std::map<std::string, std::string> read_sidecar(const std::string& dir) {
  std::map<std::string, std::string> out;
  const std::string path = dir + "/" + kSidecar;
  if (!file_exists(path)) return out;
  std::istringstream in(read_text_file(path));
  std::string word, a, b;
  bool current = false;
  while (in >> word) {
    if (word == "data_toml_sha256" && in >> a) current = a == sha256_hex(read_text_file(dir + "/data.toml"));
    else if (word == "shard" && in >> a >> b) out[a] = b;
    else std::getline(in, a);
  }
  if (!current) out.clear();
  return out;
}

}  // namespace

DataVerification verify_data(const std::string& dir, DataCheck check) {
  if (!file_exists(dir + "/data.toml")) throw Error(dir + ": no data.toml to verify against (llm.c shards are named by their contents' hash)");
  const DataManifest m = read_manifest(dir);
  std::map<std::string, std::string> sampled = check == DataCheck::kQuick ? read_sidecar(dir) : std::map<std::string, std::string>{};
  bool full = check == DataCheck::kFull || sampled.size() != m.shards.size();
  for (const auto& s : m.shards) full = full || !sampled.count(s.name);  // a shard the last full check did not see
  DataVerification v;
  v.full = full;
  int64_t train = 0, val = 0;
  for (const auto& s : m.shards) {
    const int64_t n = shard_tokens(s.path);
    (s.train ? train : val) += n;
    v.bytes += kHeaderBytes + 2 * n;
    ++v.shards;
    if (full) {
      log_info("data: checking " + s.path + " against data.toml (" + std::to_string((kHeaderBytes + 2 * n) >> 20) + " MiB)");
      const std::string sha = sha256_file(s.path);
      if (sha != s.sha256)
        throw Error(s.path + ": SHA-256 " + sha.substr(0, 16) + "… does not match data.toml's " + s.sha256.substr(0, 16) +
                    "…: the shard changed after preparation; prepare the data again (ufp4 data prepare)");
    } else if (sampled[s.name] != sampled_sha256(s.path)) {
      throw Error(s.path + ": sampled content differs from the last full check of this data.toml: the shard changed after preparation; "
                           "ufp4 data verify " + dir + " checks it in full");
    }
  }
  if (train != m.train_tokens || val != m.val_tokens)
    throw Error(dir + "/data.toml: shards hold " + std::to_string(train) + " train and " + std::to_string(val) + " validation tokens, data.toml says " +
                std::to_string(m.train_tokens) + " and " + std::to_string(m.val_tokens));
  if (full) write_text_atomically(dir + "/" + kSidecar, sidecar_text(dir, m));
  return v;
}

}  // namespace ufp4
