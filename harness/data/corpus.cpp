// Corpus collection for `ufp4 data prepare` (see corpus.h).
#include "harness/data/corpus.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_set>

#include "common/error.h"
#include "common/fs.h"
#include "common/sha256.h"

namespace ufp4 {

const char* const kSourceExtensions = ".py,.pyi,.c,.h,.cc,.cpp,.cu,.cuh";

namespace {

bool has_extension(const std::string& name, const std::vector<std::string>& exts) {
  for (const auto& e : exts)
    if (ends_with(name, e)) return true;
  return false;
}

struct Found {
  std::string name, path;
  uint64_t bytes;
};

// Files under `dir` whose names end in one of `exts`; folders that are other roots are left to them.
void walk(const std::string& dir, const std::string& prefix, const std::vector<std::string>& exts,
          const std::set<std::string>& other_roots, const CorpusOptions& opt, std::vector<Found>& out, int64_t& skipped) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    const std::string p = dir + "/" + n;
    struct stat st;
    if (lstat(p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (n == "__pycache__" || n == ".git" || other_roots.count(real_path(p))) continue;
      walk(p, prefix + n + "/", exts, other_roots, opt, out, skipped);
    } else if ((S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) && has_extension(n, exts)) {
      if (S_ISLNK(st.st_mode) && stat(p.c_str(), &st) != 0) continue;  // a dangling link
      if (!S_ISREG(st.st_mode)) continue;
      if (static_cast<uint64_t>(st.st_size) > opt.max_file_bytes) {
        ++skipped;
        continue;
      }
      out.push_back({prefix + n, p, static_cast<uint64_t>(st.st_size)});
    }
  }
}

}  // namespace

std::vector<std::string> parse_extensions(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  std::string e;
  while (std::getline(in, e, ',')) {
    e.erase(0, e.find_first_not_of(' '));
    e.erase(e.find_last_not_of(' ') + 1);
    if (!e.empty()) out.push_back(e);
  }
  if (out.empty()) throw Error("--extension: '" + list + "' names no file ending (e.g. .py,.c)");
  return out;
}

std::vector<CorpusRoot> default_corpus_roots() {
  // One "label<TAB>folder" line per root; sysconfig and site agree on most and realpath merges them.
  const char* query =
      "python3 -c 'import sysconfig, site, os\n"
      "p = sysconfig.get_paths()\n"
      "for k in (\"stdlib\", \"platstdlib\"): print(\"stdlib\\t\" + p[k])\n"
      "for k in (\"purelib\", \"platlib\"): print(\"site\\t\" + p[k])\n"
      "for d in site.getsitepackages(): print(\"site\\t\" + d)\n"
      "u = site.getusersitepackages()\n"
      "if isinstance(u, str) and os.path.isdir(u): print(\"site\\t\" + u)\n"
      "print(\"include\\t\" + p[\"include\"])' 2>/dev/null";
  std::vector<CorpusRoot> roots;
  std::set<std::string> seen;
  auto add = [&](const std::string& label, const std::string& dir) {
    const std::string r = real_path(dir);
    if (r.empty() || !is_dir(r) || !seen.insert(r).second) return;
    roots.push_back({label, r});
  };
  if (FILE* p = popen(query, "r")) {
    char buf[8192];
    while (fgets(buf, sizeof buf, p)) {
      std::string line = buf;
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
      const size_t tab = line.find('\t');
      if (tab != std::string::npos) add(line.substr(0, tab), line.substr(tab + 1));
    }
    pclose(p);
  }
  if (roots.empty()) throw Error("data prepare: no default corpus: python3 was not found (name a corpus with --input)");
  const char* cuda_home = std::getenv("CUDA_HOME");
  add("cuda", (cuda_home && *cuda_home ? std::string(cuda_home) : std::string("/usr/local/cuda")) + "/include");
  return roots;
}

Corpus collect_corpus(const std::vector<CorpusRoot>& roots, const CorpusOptions& opt) {
  Corpus c;
  std::vector<Found> found;
  std::set<std::string> root_dirs;
  for (const auto& r : roots) root_dirs.insert(real_path(r.dir));
  for (const auto& r : roots) {
    struct stat st;
    if (stat(r.dir.c_str(), &st) != 0) throw Error("data prepare: input '" + r.dir + "' not found (give files, directories or globs)");
    if (S_ISDIR(st.st_mode)) {
      std::set<std::string> others = root_dirs;
      others.erase(real_path(r.dir));
      walk(r.dir, r.label + "/", opt.extensions, others, opt, found, c.skipped);
    } else {
      found.push_back({r.label, r.dir, static_cast<uint64_t>(st.st_size)});  // a file: named as given
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.name < b.name; });
  found.erase(std::unique(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.name == b.name; }), found.end());

  // Read and hash on every thread; a file with a NUL byte is not text.
  std::vector<std::string> sha(found.size());
  std::vector<char> ok(found.size(), 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < found.size();) {
      try {
        const std::string text = read_text_file(found[i].path);
        if (text.find('\0') != std::string::npos) continue;
        found[i].bytes = text.size();
        sha[i] = sha256_hex(text);
        ok[i] = 1;
      } catch (const Error&) {
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, opt.threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();

  std::unordered_set<std::string> contents;
  for (size_t i = 0; i < found.size(); ++i) {
    if (!ok[i]) {
      ++c.skipped;
      continue;
    }
    if (!contents.insert(sha[i]).second) {
      ++c.duplicates;
      continue;
    }
    if (opt.max_bytes && c.bytes + found[i].bytes > opt.max_bytes) break;
    c.bytes += found[i].bytes;
    c.documents.push_back({found[i].name, found[i].path, found[i].bytes, sha[i]});
  }
  return c;
}

std::string corpus_listing(const Corpus& c, const std::vector<bool>& is_val) {
  std::string out = "# name\tbytes\tsha256\tsplit\n";
  for (size_t i = 0; i < c.documents.size(); ++i) {
    const auto& d = c.documents[i];
    std::string name = d.name;
    for (auto& ch : name)
      if (static_cast<unsigned char>(ch) < 0x20) ch = '?';  // one line per document
    out += name + "\t" + std::to_string(d.bytes) + "\t" + d.sha256 + "\t" + (is_val[i] ? "val" : "train") + "\n";
  }
  return out;
}

}  // namespace ufp4
