#include "harness/train/run_files.h"

#include <set>

#include "common/error.h"
#include "common/fs.h"
#include "harness/io/run_results.h"

namespace ufp4 {

std::string results_path(const RunManifest& m, const std::string& run_id) { return m.out_dir + "/" + m.name + "-" + run_id + ".h5"; }
std::string results_path(const RunManifest& m) { return results_path(m, m.run_id()); }

std::string find_results(const RunManifest& m, const std::string& run_id, std::vector<std::string>* rejected) {
  std::vector<std::string> files;
  const std::string own = results_path(m, run_id);
  if (file_exists(own)) files.push_back(own);
  walk_files(m.out_dir, "-" + run_id + ".h5", files);
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
std::string find_results(const RunManifest& m) { return find_results(m, m.run_id()); }

std::string checkpoint_path(const RunManifest& m, const std::string& run_id) { return m.out_dir + "/" + m.name + "-" + run_id + ".ckpt"; }
std::string checkpoint_path(const RunManifest& m) { return checkpoint_path(m, m.run_id()); }

std::string lock_path(const RunManifest& m, const std::string& run_id) { return m.out_dir + "/" + m.name + "-" + run_id + ".lock"; }

}  // namespace ufp4
