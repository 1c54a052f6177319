// The data tool's side of `ufp4 data prepare`: corpus, SentencePiece tokenizer, shards, data.toml.
// It runs in its own process (ufp4-data) because SentencePiece's bundled protobuf-lite and the
// protobuf inside some LibTorch builds cannot share one process.
#include <glob.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness/data.h"
#include "harness/error.h"
#include "harness/fs.h"
#include "harness/log.h"
#include "harness/sha256.h"
#include "kernels/philox.h"

namespace ufp4 {

namespace {

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs, const std::string& ext) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    if (is_dir(in)) {
      walk_files(in, ext, files);
    } else if (in.find_first_of("*?[") != std::string::npos) {
      glob_t g;
      if (glob(in.c_str(), 0, nullptr, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc; ++i) files.push_back(g.gl_pathv[i]);
      globfree(&g);
    } else if (access(in.c_str(), R_OK) == 0) {
      files.push_back(in);
    } else {
      throw Error("data prepare: input '" + in + "' not found (give files, directories or globs)");
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

bool is_validation(const std::string& name, double fraction) {
  std::string h = sha256_hex(name).substr(0, 8);
  return static_cast<double>(std::stoul(h, nullptr, 16) % 100000) < fraction * 100000;
}

}  // namespace

std::vector<std::string> default_corpus_files() {
  FILE* p = popen("python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"stdlib\"])' 2>/dev/null", "r");
  char buf[4096] = {0};
  std::string dir;
  if (p) {
    if (fgets(buf, sizeof buf, p)) dir = buf;
    pclose(p);
  }
  while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
  if (dir.empty() || !is_dir(dir)) throw Error("data prepare: no default corpus: python3 was not found (name a corpus with --input)");
  std::vector<std::string> files;
  walk_files(dir, ".py", files);
  std::sort(files.begin(), files.end());
  return files;
}

std::string prepare_data(const DataPrepareOptions& opt) {
  if (opt.out_dir.empty()) throw Error("data prepare: --out is required");
  if (opt.tokenizer != "bpe" && opt.tokenizer != "byte") throw Error("--tokenizer: '" + opt.tokenizer + "' (allowed: bpe, byte)");
  if (opt.tokenizer == "bpe" && (opt.vocab_size < 300 || opt.vocab_size > 65536))
    throw Error("--vocab-size: " + std::to_string(opt.vocab_size) + " (allowed: 300 to 65536, tokens are stored as uint16)");
  make_dirs(opt.out_dir);

  // Documents: (name, text), in a fixed order.
  std::vector<std::pair<std::string, std::string>> docs;
  Sha256 inputs_hash;
  std::string corpus_desc;
  if (opt.ci_corpus) {
    std::string text = ci_corpus_text(1 << 21);
    for (size_t i = 0, k = 0; i < text.size(); i += 8192, ++k) docs.emplace_back("ci/" + std::to_string(k), text.substr(i, 8192));
    corpus_desc = "ci (synthetic, 2 MiB)";
  } else {
    std::vector<std::string> files = opt.inputs.empty() ? default_corpus_files() : expand_inputs(opt.inputs, opt.extension);
    if (files.empty()) throw Error("data prepare: the inputs hold no files ending in " + opt.extension);
    uint64_t total = 0;
    for (const auto& f : files) {
      if (total >= opt.max_bytes) break;
      std::string t = read_text_file(f);
      total += t.size();
      docs.emplace_back(f, std::move(t));
    }
    corpus_desc = opt.inputs.empty() ? "python3 standard library sources" : "user inputs";
  }
  for (const auto& d : docs) {
    inputs_hash.update(d.first);
    inputs_hash.update(sha256_hex(d.second));
  }
  std::string inputs_sha = inputs_hash.hex();
  log_info("data: " + std::to_string(docs.size()) + " documents from " + corpus_desc);

  // Tokenizer.
  std::string tok_path, tok_sha;
  sentencepiece::SentencePieceProcessor sp;
  int vocab = 256;
  if (opt.tokenizer == "bpe") {
    const std::string train_txt = opt.out_dir + "/tokenizer_train.txt";
    {
      std::ofstream t(train_txt, std::ios::binary);
      for (const auto& d : docs)
        if (!is_validation(d.first, opt.val_fraction)) t << d.second << "\n";
    }
    const std::string prefix = opt.out_dir + "/tokenizer";
    std::ostringstream args;
    args << "--input=" << train_txt << " --model_prefix=" << prefix << " --vocab_size=" << opt.vocab_size
         << " --model_type=bpe --byte_fallback=true --normalization_rule_name=identity --remove_extra_whitespaces=false"
         << " --split_digits=true --allow_whitespace_only_pieces=true --max_sentence_length=65536 --input_sentence_size=0"
         << " --seed_sentencepiece_size=1000000 --num_threads=" << std::max(1u, std::thread::hardware_concurrency())
         << " --minloglevel=2";
    log_info("data: training a " + std::to_string(opt.vocab_size) + "-token SentencePiece BPE tokenizer");
    auto st = sentencepiece::SentencePieceTrainer::Train(args.str());
    std::remove(train_txt.c_str());
    if (!st.ok()) throw RuntimeError("SentencePiece training failed: " + st.ToString());
    tok_path = prefix + ".model";
    auto ls = sp.Load(tok_path);
    if (!ls.ok()) throw RuntimeError(tok_path + ": " + ls.ToString());
    vocab = sp.GetPieceSize();
    tok_sha = sha256_file(tok_path);
  }

  // Tokenize; documents are separated by EOS (bpe) or byte 0 (byte).
  std::vector<uint16_t> train, val;
  for (const auto& d : docs) {
    std::vector<uint16_t>& dst = is_validation(d.first, opt.val_fraction) ? val : train;
    if (opt.tokenizer == "bpe") {
      std::vector<int> ids;
      sp.Encode(d.second, &ids);
      for (int id : ids) dst.push_back(static_cast<uint16_t>(id));
      dst.push_back(static_cast<uint16_t>(sp.eos_id() >= 0 ? sp.eos_id() : 0));
    } else {
      for (unsigned char c : d.second) dst.push_back(c);
      dst.push_back(0);
    }
  }
  if (val.empty()) {  // guarantee a validation split: the last document
    const auto& d = docs.back();
    for (unsigned char c : d.second) val.push_back(c);
    if (opt.tokenizer == "bpe") {
      val.clear();
      std::vector<int> ids;
      sp.Encode(d.second, &ids);
      for (int id : ids) val.push_back(static_cast<uint16_t>(id));
    }
  }
  const std::string train_path = opt.out_dir + "/train_000.bin", val_path = opt.out_dir + "/val_000.bin";
  write_shard(train_path, train);
  write_shard(val_path, val);

  std::ostringstream m;
  m << "# written by ufp4 data prepare\ncorpus = \"" << corpus_desc << "\"\ndocuments = " << docs.size()
    << "\ninputs_sha256 = \"" << inputs_sha << "\"\ntokenizer = \"" << opt.tokenizer << "\"\nvocab = " << vocab << "\n";
  if (!tok_path.empty()) m << "tokenizer_model = \"tokenizer.model\"\ntokenizer_sha256 = \"" << tok_sha << "\"\n";
  m << "val_fraction = " << opt.val_fraction << "\n\n[shards]\ntrain = [\"train_000.bin\"]\nval = [\"val_000.bin\"]\ntrain_tokens = "
    << train.size() << "\nval_tokens = " << val.size() << "\ntrain_sha256 = [\"" << sha256_file(train_path) << "\"]\nval_sha256 = [\""
    << sha256_file(val_path) << "\"]\n";
  const std::string manifest = opt.out_dir + "/data.toml";
  write_text_atomically(manifest, m.str());
  log_info("data: " + std::to_string(train.size()) + " train and " + std::to_string(val.size()) + " validation tokens, vocab " +
           std::to_string(vocab) + " -> " + manifest);
  return manifest;
}

}  // namespace ufp4
