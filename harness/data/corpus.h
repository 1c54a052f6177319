// The documents `ufp4 data prepare` tokenises: which files, in which order, each named by where it
// came from (a root's label and the path under it, never a machine's absolute path), deduplicated by
// content. The default corpus is every source file of this machine's Python installation (standard
// library, site-packages, headers) plus CUDA's include folder when present: on a GPU node with
// PyTorch that is hundreds of MB of code, enough for proxies that see their data about once.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ufp4 {

// The extensions the default corpus takes.
extern const char* const kSourceExtensions;  // ".py,.pyi,.c,.h,.cc,.cpp,.cu,.cuh"

struct CorpusRoot {
  std::string label;  // names the root in document names: "stdlib", "site", "include", "cuda", "input"
  std::string dir;    // a folder (walked recursively) or a single file
};

struct CorpusDocument {
  std::string name;  // "<label>/<path under the root>"
  std::string path;  // where it is read from on this machine
  uint64_t bytes = 0;
  std::string sha256;  // of the content
};

struct CorpusOptions {
  std::vector<std::string> extensions;  // file name endings taken from folders
  uint64_t max_file_bytes = 4ull << 20;  // larger files are generated tables, not code: skipped
  uint64_t max_bytes = 0;                // 0: no limit; otherwise stop after this many bytes (in name order)
  int threads = 1;
};

struct Corpus {
  std::vector<CorpusDocument> documents;  // sorted by name, each content once
  uint64_t bytes = 0;
  int64_t duplicates = 0;  // files whose content an earlier document already holds
  int64_t skipped = 0;     // too large, binary (a NUL byte) or unreadable
};

// This machine's Python installation (asked of python3's sysconfig and site) and CUDA's include
// folder ($CUDA_HOME/include, else /usr/local/cuda/include), as labelled roots. Throws Error when
// python3 is missing.
std::vector<CorpusRoot> default_corpus_roots();
// Splits ".py,.c" into its endings; throws Error on an empty list.
std::vector<std::string> parse_extensions(const std::string& list);
// Walks the roots (symbolic links to folders are not followed; __pycache__ is skipped), reads and
// hashes every file on `threads` threads, and keeps each content once, in name order.
Corpus collect_corpus(const std::vector<CorpusRoot>& roots, const CorpusOptions& opt);
// The document list as written beside the shards: "name<TAB>bytes<TAB>sha256<TAB>split" per line.
std::string corpus_listing(const Corpus& c, const std::vector<bool>& is_val);

}  // namespace ufp4
