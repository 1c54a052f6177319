// The data tool's side of `ufp4 data prepare`: corpus, SentencePiece tokenizer, shards, data.toml.
// It runs in its own process (ufp4-data) because SentencePiece's bundled protobuf-lite and the
// protobuf inside some LibTorch builds cannot share one process.
//
// Memory stays bounded: documents are read and tokenised a batch at a time on every core, and token
// shards are written as they fill. The tokens do not depend on the thread count or the shard size
// (documents are concatenated in name order, each followed by EOS).
#include <glob.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "common/sha256.h"
#include "harness/data/corpus.h"
#include "harness/data/data.h"

namespace ufp4 {

namespace {

// --input: folders (walked for the extensions), files and globs, each a root labelled as given.
std::vector<CorpusRoot> input_roots(const std::vector<std::string>& inputs) {
  std::vector<CorpusRoot> roots;
  for (std::string in : inputs) {
    while (in.size() > 1 && in.back() == '/') in.pop_back();
    if (is_dir(in) || access(in.c_str(), R_OK) == 0) {
      roots.push_back({in, in});
    } else if (in.find_first_of("*?[") != std::string::npos) {
      glob_t g;
      if (glob(in.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) roots.push_back({g.gl_pathv[i], g.gl_pathv[i]});
      globfree(&g);
    } else {
      throw Error("data prepare: input '" + in + "' not found (give files, directories or globs)");
    }
  }
  return roots;
}

bool is_validation(const std::string& name, double fraction) {
  std::string h = sha256_hex(name).substr(0, 8);
  return static_cast<double>(std::stoul(h, nullptr, 16) % 100000) < fraction * 100000;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string toml_list(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}

// Appends tokens and writes "<prefix>_NNN.bin" whenever `shard_tokens` have gathered (at a
// document's end, so no document is split between shards).
struct ShardWriter {
  std::string dir, prefix;
  uint64_t shard_tokens;
  std::vector<uint16_t> buf;
  std::vector<std::string> names, sha;
  uint64_t total = 0;
  void add(const std::vector<uint16_t>& doc) {
    buf.insert(buf.end(), doc.begin(), doc.end());
    total += doc.size();
    if (buf.size() >= shard_tokens) flush();
  }
  void flush() {
    if (buf.empty() && !names.empty()) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%03zu.bin", prefix.c_str(), names.size());
    write_shard(dir + "/" + name, buf);
    names.push_back(name);
    sha.push_back(sha256_file(dir + "/" + name));
    buf.clear();
    buf.shrink_to_fit();
  }
};

void check_options(const DataPrepareOptions& opt) {
  if (opt.out_dir.empty()) throw Error("data prepare: --out is required");
  if (opt.tokenizer != "bpe" && opt.tokenizer != "byte") throw Error("--tokenizer: '" + opt.tokenizer + "' (allowed: bpe, byte)");
  if (opt.tokenizer == "bpe" && (opt.vocab_size < 300 || opt.vocab_size > 65536))
    throw Error("--vocab-size: " + std::to_string(opt.vocab_size) + " (allowed: 300 to 65536, tokens are stored as uint16)");
  if (opt.shard_tokens < 1024) throw Error("--shard-tokens: " + std::to_string(opt.shard_tokens) + " (allowed: at least 1024)");
}

// Documents, in a fixed order. The CI corpus lives in memory; files are read again when tokenised.
struct Documents {
  Corpus corpus;
  bool in_memory = false;
  std::vector<std::string> ci_texts;
  std::string desc, extensions;  // what data.toml says of the corpus; extensions only for files from folders
  std::string text(size_t i) const { return in_memory ? ci_texts[i] : read_text_file(corpus.documents[i].path); }
};

Documents ci_documents() {
  Documents d;
  d.in_memory = true;
  const std::string text = ci_corpus_text(1 << 21);
  for (size_t i = 0, k = 0; i < text.size(); i += 8192, ++k) {
    d.ci_texts.push_back(text.substr(i, 8192));
    d.corpus.documents.push_back({"ci/" + std::to_string(k), "", d.ci_texts.back().size(), sha256_hex(d.ci_texts.back())});
    d.corpus.bytes += d.ci_texts.back().size();
  }
  d.desc = "ci (synthetic, 2 MiB)";
  return d;
}

Documents file_documents(const DataPrepareOptions& opt, int threads) {
  Documents d;
  CorpusOptions co;
  co.extensions = parse_extensions(opt.extension);
  co.max_file_bytes = opt.max_file_bytes;
  co.max_bytes = opt.max_bytes;
  co.threads = threads;
  const std::vector<CorpusRoot> roots = opt.inputs.empty() ? default_corpus_roots() : input_roots(opt.inputs);
  for (const auto& r : roots) log_info("data: root " + r.label + " = " + r.dir);
  d.corpus = collect_corpus(roots, co);
  if (d.corpus.documents.empty()) throw Error("data prepare: the inputs hold no files ending in " + opt.extension);
  d.desc = opt.inputs.empty() ? "python3 installation sources (stdlib, site-packages, headers) and CUDA headers" : "user inputs";
  d.extensions = opt.extension;
  return d;
}

// Which documents are held out for validation, the hash naming the inputs, and documents.tsv's text.
struct DocumentSplit {
  std::vector<bool> val_doc;
  std::string inputs_sha, listing;
};

DocumentSplit split_documents(const DataPrepareOptions& opt, const Corpus& corpus) {
  const size_t n = corpus.documents.size();
  DocumentSplit s;
  s.val_doc.resize(n);
  Sha256 inputs_hash;
  for (size_t i = 0; i < n; ++i) {
    s.val_doc[i] = is_validation(corpus.documents[i].name, opt.val_fraction);
    inputs_hash.update(corpus.documents[i].name);
    inputs_hash.update(corpus.documents[i].sha256);
  }
  s.inputs_sha = inputs_hash.hex();
  s.listing = corpus_listing(corpus, s.val_doc);
  return s;
}

// The tokenizer the shards are written with: SentencePiece BPE trained here, or bytes.
struct Tokenizer {
  bool bpe = false;
  sentencepiece::SentencePieceProcessor sp;
  std::string path, sha;      // the .model file and the hash of its vocabulary (bpe only)
  uint64_t sample_bytes = 0;  // of training text it was trained on
  int vocab = 256;
  uint16_t eos = 0;
  std::vector<uint16_t> encode(const std::string& text) const {  // thread-safe: SentencePiece's Encode is const
    std::vector<uint16_t> out;
    if (bpe) {
      std::vector<int> ids;
      sp.Encode(text, &ids);
      out.assign(ids.begin(), ids.end());
    } else {
      out.assign(reinterpret_cast<const unsigned char*>(text.data()), reinterpret_cast<const unsigned char*>(text.data()) + text.size());
    }
    return out;
  }
};

// The tokenizer's fixed sample of the training documents: those whose names hash lowest, up to
// tokenizer_sample_bytes.
std::vector<size_t> tokenizer_sample(const DataPrepareOptions& opt, const Corpus& corpus, const std::vector<bool>& val_doc, uint64_t& sample_bytes) {
  std::vector<std::pair<std::string, size_t>> order;
  for (size_t i = 0; i < corpus.documents.size(); ++i)
    if (!val_doc[i]) order.emplace_back(sha256_hex(corpus.documents[i].name), i);
  std::sort(order.begin(), order.end());
  std::vector<size_t> chosen;  // written in document order: a small corpus gives its whole text as is
  for (const auto& [key, i] : order) {
    if (sample_bytes >= opt.tokenizer_sample_bytes) break;
    chosen.push_back(i);
    sample_bytes += corpus.documents[i].bytes + 1;
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

// The vocabulary's hash, not the file's: the .model file also records the trainer's arguments
// (the sample's temporary path, the thread count), which differ between two preparations of
// the same corpus. Pieces, scores and types are what tokenisation depends on (with the fixed
// normaliser set in train_tokenizer).
std::string vocab_sha256(const sentencepiece::SentencePieceProcessor& sp) {
  Sha256 vocab_hash;
  for (int id = 0; id < sp.GetPieceSize(); ++id) {
    char score[32];
    std::snprintf(score, sizeof score, "%.9g", sp.GetScore(id));
    vocab_hash.update(sp.IdToPiece(id) + "\t" + score + "\t" + (sp.IsControl(id) ? "c" : sp.IsUnknown(id) ? "u" : sp.IsByte(id) ? "b" : "n") + "\n");
  }
  return vocab_hash.hex();
}

// Tokenizer, trained on a fixed sample of the training documents (tokenizer_sample); its path,
// vocabulary hash and size into `tok`.
void train_tokenizer(const DataPrepareOptions& opt, const Documents& docs, const std::vector<bool>& val_doc, int threads,
                     std::chrono::steady_clock::time_point t0, Tokenizer& tok) {
  tok.bpe = true;
  const std::vector<size_t> chosen = tokenizer_sample(opt, docs.corpus, val_doc, tok.sample_bytes);
  const std::string train_txt = opt.out_dir + "/tokenizer_train.txt" + temporary_suffix();
  {
    AtomicFile t(train_txt);  // removed below; a temporary name so a kill leaves nothing that looks finished
    for (size_t i : chosen) {
      const std::string text = docs.text(i) + "\n";
      t.write(text.data(), text.size());
    }
    t.commit();
  }
  const std::string prefix = opt.out_dir + "/tokenizer";
  std::ostringstream args;
  args << "--input=" << train_txt << " --model_prefix=" << prefix << " --vocab_size=" << opt.vocab_size
       << " --model_type=bpe --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false"
       << " --split_digits=true --allow_whitespace_only_pieces=true --max_sentence_length=65536 --input_sentence_size=0"
       << " --seed_sentencepiece_size=1000000 --num_threads=" << threads << " --minloglevel=2";
  log_info("data: training a " + std::to_string(opt.vocab_size) + "-token SentencePiece BPE tokenizer on " +
           std::to_string(tok.sample_bytes >> 20) + " MiB");
  auto st = sentencepiece::SentencePieceTrainer::Train(args.str());
  std::remove(train_txt.c_str());
  if (!st.ok()) throw RuntimeError("SentencePiece training failed: " + st.ToString());
  tok.path = prefix + ".model";
  auto ls = tok.sp.Load(tok.path);
  if (!ls.ok()) throw RuntimeError(tok.path + ": " + ls.ToString());
  tok.vocab = tok.sp.GetPieceSize();
  tok.sha = vocab_sha256(tok.sp);
  log_info("data: tokenizer ready, " + std::to_string(seconds_since(t0)).substr(0, 5) + " s");
}

// Documents [begin, end) tokenised on every thread, each followed by EOS.
std::vector<std::vector<uint16_t>> tokenise_batch(const Documents& docs, const Tokenizer& tok, size_t begin, size_t end, int threads) {
  std::vector<std::vector<uint16_t>> tokens(end - begin);
  std::atomic<size_t> next{begin};
  std::atomic<bool> failed{false};
  std::string failure;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < end;) {
      try {
        tokens[i - begin] = tok.encode(docs.text(i));
        tokens[i - begin].push_back(tok.eos);
      } catch (const std::exception& e) {
        if (!failed.exchange(true)) failure = e.what();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failed) throw RuntimeError("data prepare: " + failure);
  return tokens;
}

// Tokenise a batch of documents at a time on every thread; append them in order.
void tokenise_documents(const DataPrepareOptions& opt, const Documents& docs, const std::vector<bool>& val_doc, const Tokenizer& tok, int threads,
                        std::chrono::steady_clock::time_point t0, ShardWriter& train, ShardWriter& val) {
  const size_t n = docs.corpus.documents.size();
  uint64_t done_bytes = 0;
  for (size_t begin = 0; begin < n;) {
    size_t end = begin;
    for (uint64_t b = 0; end < n && (end == begin || b + docs.corpus.documents[end].bytes <= opt.batch_bytes); ++end) b += docs.corpus.documents[end].bytes;
    const std::vector<std::vector<uint16_t>> tokens = tokenise_batch(docs, tok, begin, end, threads);
    for (size_t i = begin; i < end; ++i) {
      (val_doc[i] ? val : train).add(tokens[i - begin]);
      done_bytes += docs.corpus.documents[i].bytes;
    }
    const double s = seconds_since(t0);
    log_info("data: tokenised " + std::to_string(end) + "/" + std::to_string(n) + " documents, " + std::to_string(done_bytes >> 20) + "/" +
             std::to_string(docs.corpus.bytes >> 20) + " MiB, " + std::to_string(train.total + val.total) + " tokens, " +
             std::to_string(s).substr(0, 5) + " s");
    begin = end;
  }
}

// data.toml's text.
std::string data_toml(const DataPrepareOptions& opt, const Documents& docs, const DocumentSplit& split, const Tokenizer& tok, const ShardWriter& train,
                      const ShardWriter& val) {
  const Corpus& corpus = docs.corpus;
  std::ostringstream m;
  m << "# written by ufp4 data prepare\ncorpus = \"" << docs.desc << "\"\ndocuments = " << corpus.documents.size() << "\nbytes = " << corpus.bytes
    << "\nduplicates = " << corpus.duplicates << "\nskipped = " << corpus.skipped << "\n";
  if (!docs.extensions.empty()) m << "extensions = \"" << docs.extensions << "\"\nmax_file_bytes = " << opt.max_file_bytes << "\n";
  m << "documents_file = \"documents.tsv\"\ndocuments_sha256 = \"" << sha256_hex(split.listing) << "\"\ninputs_sha256 = \"" << split.inputs_sha
    << "\"\ntokenizer = \"" << opt.tokenizer << "\"\nvocab = " << tok.vocab << "\n";
  if (!tok.path.empty())
    m << "tokenizer_model = \"tokenizer.model\"\ntokenizer_vocab_sha256 = \"" << tok.sha << "\"\ntokenizer_sample_bytes = " << tok.sample_bytes << "\n";
  m << "val_fraction = " << opt.val_fraction << "\n\n[shards]\ntrain = " << toml_list(train.names) << "\nval = " << toml_list(val.names)
    << "\ntrain_tokens = " << train.total << "\nval_tokens = " << val.total << "\ntrain_sha256 = " << toml_list(train.sha)
    << "\nval_sha256 = " << toml_list(val.sha) << "\n";
  return m.str();
}

}  // namespace

std::string prepare_data(const DataPrepareOptions& opt) {
  check_options(opt);
  make_dirs(opt.out_dir);
  remove_stale_temporaries(opt.out_dir);
  const auto t0 = std::chrono::steady_clock::now();
  const int threads = opt.threads > 0 ? opt.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  const Documents docs = opt.ci_corpus ? ci_documents() : file_documents(opt, threads);
  const Corpus& corpus = docs.corpus;
  const size_t n = corpus.documents.size();
  const DocumentSplit split = split_documents(opt, corpus);
  write_text_atomically(opt.out_dir + "/documents.tsv", split.listing);
  log_info("data: " + std::to_string(n) + " documents, " + std::to_string(corpus.bytes >> 20) + " MiB from " + docs.desc + " (" +
           std::to_string(corpus.duplicates) + " duplicates and " + std::to_string(corpus.skipped) + " large or binary files left out), " +
           std::to_string(seconds_since(t0)).substr(0, 5) + " s");

  Tokenizer tok;
  if (opt.tokenizer == "bpe") train_tokenizer(opt, docs, split.val_doc, threads, t0, tok);
  tok.eos = opt.tokenizer == "bpe" ? static_cast<uint16_t>(tok.sp.eos_id() >= 0 ? tok.sp.eos_id() : 0) : 0;

  ShardWriter train{opt.out_dir, "train", opt.shard_tokens, {}, {}, {}, 0}, val{opt.out_dir, "val", opt.shard_tokens, {}, {}, {}, 0};
  tokenise_documents(opt, docs, split.val_doc, tok, threads, t0, train, val);
  if (val.total == 0) val.add(tok.encode(docs.text(n - 1)));  // guarantee a validation split: the last document, again
  train.flush();
  val.flush();

  const std::string manifest = opt.out_dir + "/data.toml";
  write_text_atomically(manifest, data_toml(opt, docs, split, tok, train, val));
  verify_data(opt.out_dir, DataCheck::kFull);  // what is on disk, read back against the hashes just written
  log_info("data: " + std::to_string(train.total) + " train and " + std::to_string(val.total) + " validation tokens in " +
           std::to_string(train.names.size()) + "+" + std::to_string(val.names.size()) + " shards, vocab " + std::to_string(tok.vocab) + ", " +
           std::to_string(seconds_since(t0)).substr(0, 5) + " s -> " + manifest);
  return manifest;
}

}  // namespace ufp4
