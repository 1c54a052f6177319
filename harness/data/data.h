// Data: `ufp4 data prepare` turns a text corpus into token shards (llm.c's .bin format: a 256 x int32
// header with magic 20240520, version 1 and the token count, then uint16 tokens) plus a data.toml
// manifest with the SHA-256 of inputs, tokenizer and shards. No LibTorch here: the preparing side runs
// in its own process (ufp4-data, see data_prepare.cpp).
#pragma once
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace ufp4 {

struct DataPrepareOptions {
  std::vector<std::string> inputs;  // files, directories (recursive) or globs; empty: the default corpus
  std::string out_dir;
  std::string tokenizer = "bpe";    // bpe (SentencePiece, trained here) | byte
  int vocab_size = 32768;           // bpe only
  double val_fraction = 0.01;       // of documents (files), chosen by a hash of the document's name
  uint64_t max_bytes = 0;           // 0: every document; otherwise the first documents (in name order) up to this
  uint64_t max_file_bytes = 4ull << 20;  // larger files are generated tables: left out
  std::string extension = ".py,.pyi,.c,.h,.cc,.cpp,.cu,.cuh";  // file endings taken from folders
  uint64_t tokenizer_sample_bytes = 32ull << 20;  // SentencePiece trains on this much of the training documents
  uint64_t shard_tokens = 100000000;  // a shard is written once this many tokens have gathered (llm.c's size)
  uint64_t batch_bytes = 64ull << 20;  // documents tokenised at a time (bounds memory)
  int threads = 0;                  // 0: every core
  bool ci_corpus = false;           // the fixed, machine-independent synthetic corpus
};

// Returns the data.toml path. Throws ufp4::Error for bad inputs. Only in the ufp4-data tool.
std::string prepare_data(const DataPrepareOptions& opt);
// Runs `ufp4-data prepare` (next to the running executable, or next to `sibling`) with these
// options; throws on failure.
// data_tool_path: the tool in `dir`, or an error saying it is missing.
std::string data_tool_path(const std::string& dir);
void run_data_tool(const DataPrepareOptions& opt);
void run_data_tool_from(const std::string& sibling, const DataPrepareOptions& opt);
// A run's data folder and how to prepare it when the folder holds no data yet.
struct DataSource {
  std::string path;
  std::string prepare;  // "": never here; "ci": the synthetic CI corpus; "default": the default corpus
  std::string tokenizer = "bpe";
  int64_t vocab_size = 32768;
};
// Prepares the folder (with the ufp4-data tool) when it holds no data and `prepare` says how.
void ensure_data(const DataSource& s);
// The CI corpus: deterministic pseudo-English text of about `bytes` bytes.
std::string ci_corpus_text(size_t bytes);

struct DataInfo {
  std::string dir, tokenizer, manifest_sha256;
  int vocab = 0;
  std::vector<std::string> train_shards, val_shards;
};
// A directory holding data.toml, or one of llm.c-style *train*.bin / *val*.bin shards.
DataInfo load_data_info(const std::string& dir);

// Whether `dir` holds data (data.toml, or llm.c train and val shards).
bool data_ready(const std::string& dir);
// The SHA-256 that names the data of `dir` in run ids: of its data.toml (which holds the shards'
// hashes), or of the shards' contents (load_data_info's, computed once per process and folder).
std::string data_identity(const std::string& dir);

// A data folder that is not prepared here can stand for the data a committed campaign trained on: its
// data.toml, committed beside the results (results/data/), gives the folder its identity, so that the
// campaign's run ids can be recomputed on any machine (reports, checks, CI). A prepared folder is
// always named by its own data.toml.
void pin_data_manifest(const std::string& dir, const std::string& data_toml);
std::string pinned_data_manifest(const std::string& dir);  // "" when none

// Training tokens of a data folder, from the shards' headers (nothing else is read).
int64_t count_train_tokens(const DataInfo& info);

// The shards of a data folder checked against its data.toml: headers, sizes, token counts and
// content. kFull hashes every byte (ufp4 data prepare, ufp4 data verify); kQuick (every run start)
// checks sizes and counts and a sampled hash recorded by the last full check, and falls back to a
// full check when there is none for this data.toml. Throws Error naming the shard that differs.
enum class DataCheck { kQuick, kFull };
struct DataVerification {
  int shards = 0;
  int64_t bytes = 0;
  bool full = false;  // every byte was hashed
};
DataVerification verify_data(const std::string& dir, DataCheck check);

std::vector<uint16_t> read_shard(const std::string& path);
// A shard's header from `in` (at its start): its token count. Throws Error naming `path` when it is not
// an llm.c shard (magic 20240520, version 1) or the count is negative.
int64_t read_shard_header(std::istream& in, const std::string& path);
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace ufp4
