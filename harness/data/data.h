// Data: `ufp4 data prepare` turns a text corpus into token shards (llm.c's .bin format: a 256 x int32
// header with magic 20240520, version 1 and the token count, then uint16 tokens) plus a data.toml
// manifest with the SHA-256 of inputs, tokenizer and shards. No LibTorch here: the preparing side runs
// in its own process (ufp4-data, see data_prepare.cpp).
#pragma once
#include <cstdint>
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

// Training tokens of a data folder, from the shards' headers (nothing else is read).
int64_t count_train_tokens(const DataInfo& info);

std::vector<uint16_t> read_shard(const std::string& path);
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

}  // namespace ufp4
