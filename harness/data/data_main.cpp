// ufp4-data: the data tool behind `ufp4 data prepare` (no LibTorch in this process).
#include <iostream>

#include <boost/program_options.hpp>

#include "common/error.h"
#include "harness/data/data.h"

namespace po = boost::program_options;

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty() || args[0] != "prepare") throw ufp4::Error("usage: ufp4-data prepare --out DIR [options] (see ufp4 data prepare --help)");
    ufp4::DataPrepareOptions o;
    po::options_description d("options");
    d.add_options()
        ("help,h", "show this help")
        ("input", po::value(&o.inputs)->multitoken(),
         "files, directories or globs (default: this machine's Python installation, stdlib, site-packages and headers, plus CUDA's include folder)")
        ("out", po::value(&o.out_dir), "output folder (required)")
        ("tokenizer", po::value(&o.tokenizer)->default_value("bpe"), "bpe (SentencePiece, trained here) or byte")
        ("vocab-size", po::value(&o.vocab_size)->default_value(32768), "BPE vocabulary size")
        ("val-fraction", po::value(&o.val_fraction)->default_value(0.01), "fraction of documents held out")
        ("extension", po::value(&o.extension)->default_value(o.extension), "file endings taken from folders, comma-separated")
        ("max-bytes", po::value(&o.max_bytes)->default_value(0), "take documents (in name order) up to this many bytes (0: all)")
        ("max-file-bytes", po::value(&o.max_file_bytes)->default_value(o.max_file_bytes), "leave out larger files (generated tables)")
        ("tokenizer-sample-bytes", po::value(&o.tokenizer_sample_bytes)->default_value(o.tokenizer_sample_bytes),
         "SentencePiece trains on this much of the training documents (a fixed sample)")
        ("shard-tokens", po::value(&o.shard_tokens)->default_value(o.shard_tokens), "tokens per shard (shards end at documents)")
        ("batch-bytes", po::value(&o.batch_bytes)->default_value(o.batch_bytes), "bytes of documents tokenised at a time (bounds memory)")
        ("threads", po::value(&o.threads)->default_value(0), "threads for reading and tokenising (0: every core)")
        ("ci", po::bool_switch(&o.ci_corpus), "the fixed synthetic CI corpus instead of files");
    po::variables_map vm;
    try {
      po::store(po::command_line_parser(std::vector<std::string>(args.begin() + 1, args.end())).options(d).run(), vm);
      po::notify(vm);
    } catch (const po::error& e) {
      throw ufp4::Error(std::string("data prepare: ") + e.what());
    }
    if (vm.count("help")) {
      std::cout << "usage: ufp4 data prepare --out DIR [options]\n\n" << d << "\n";
      return 0;
    }
    if (o.out_dir.empty()) throw ufp4::Error("data prepare: --out is required");
    std::cout << ufp4::prepare_data(o) << "\n";
    return 0;
  } catch (const ufp4::Error& e) {
    std::cerr << "ufp4: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "ufp4: failed: " << e.what() << "\n";
    return 1;
  }
}
