#include "harness/plan/run_files.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/run_results.h"

namespace ufp4 {

std::string run_file_stem(const std::string& out_dir, const std::string& name, const std::string& run_id) { return out_dir + "/" + name + "-" + run_id; }

std::string find_results(const std::string& out_dir, const std::string& name, const std::string& run_id, std::vector<std::string>* rejected) {
  std::vector<std::string> files;
  const std::string own = run_file_stem(out_dir, name, run_id) + ".h5";
  if (file_exists(own)) files.push_back(own);
  walk_files(out_dir, "-" + run_id + ".h5", files);
  std::set<std::string> seen;
  for (const auto& f : files) {
    if (!seen.insert(f).second) continue;
    try {
      if (read_run_results(f, /*with_curves=*/false).run_id == run_id) return f;
      if (rejected) rejected->push_back(f + ": holds another run");
    } catch (const Error& e) {
      if (rejected) rejected->push_back(e.what());
    }
  }
  return "";
}

std::string find_results(const RunPlan& p, std::vector<std::string>* rejected) { return find_results(p.out_dir, p.name, p.run_id, rejected); }

namespace {

std::vector<std::string> reuse_roots() {
  std::vector<std::string> roots;
  const char* env = std::getenv("UFP4_REUSE");
  if (env && std::string(env) == "off") return roots;
  if (env)
    for (std::string rest = env; !rest.empty();) {
      const size_t colon = rest.find(':');
      if (colon) roots.push_back(rest.substr(0, colon));
      rest = colon == std::string::npos ? "" : rest.substr(colon + 1);
    }
  const std::string root = repository_root();
  if (root.empty()) return roots;
  roots.push_back(root + "/results");
  if (DIR* d = ::opendir(root.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name).rfind("build", 0) == 0 && is_dir(root + "/" + e->d_name)) roots.push_back(root + "/" + e->d_name);
    ::closedir(d);
  }
  return roots;
}

std::string resolved(const std::string& p) {
  const std::string r = real_path(p);
  return r.empty() ? p : r;
}

}  // namespace

std::string find_identical_run(const std::string& run_id, const std::string& except_dir, const std::string& device) {
  const std::string except = resolved(except_dir) + "/", root = repository_root();
  const std::string references = root.empty() ? std::string() : resolved(root + "/results/reference") + "/";
  std::vector<std::string> files;
  for (const auto& r : reuse_roots()) {
    std::vector<std::string> found;
    walk_files(r, "-" + run_id + ".h5", found);
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  for (const auto& f : files) {
    const std::string real = resolved(f);
    if (real.rfind(except, 0) == 0 || (!references.empty() && real.rfind(references, 0) == 0)) continue;
    try {
      const RunResults r = read_run_results(f, /*with_curves=*/false);
      if (r.run_id == run_id && (device.empty() || r.device_name == device)) return f;
    } catch (const Error&) {
      // damaged or another run's: not this run's result
    }
  }
  return "";
}

}  // namespace ufp4
