// Crash-safe file writes. Every file ufp4 writes (results, checkpoints, captures, .npy, reports)
// goes through AtomicFile: bytes go to "<path>.tmp-<pid>", which is synced and renamed onto <path>
// only when complete, so a full disk, a write error or a kill leaves the previous file intact.
// Failures throw RuntimeError("<path>: <cause>"), e.g. "no space left on device", and remove the
// temporary; a temporary left by a killed process is removed at the next start
// (remove_stale_temporaries).
//
// Fault injection for tests (no root needed): UFP4_FAIL_WRITE=N makes the N-th AtomicFile of the
// process fail with ENOSPC part-way through its bytes (after 4 KiB, or at its sync when smaller).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/non_copyable.h"

namespace ufp4 {

class AtomicFile : NonCopyable {
 public:
  explicit AtomicFile(const std::string& path);  // creates the temporary; throws RuntimeError
  ~AtomicFile();                                 // removes the temporary unless committed

  // Appends bytes. The first failure is remembered and later writes are skipped, so writers that
  // cannot take an error mid-stream (LibTorch's serializer) run to their end; commit() reports it.
  void write(const void* data, size_t n);
  // Syncs, closes and renames onto the path, then syncs the folder. Throws RuntimeError naming the
  // path and the cause of the first failure; the temporary is gone either way.
  void commit();
  const std::string& path() const { return path_; }
  const std::string& temporary() const { return tmp_; }

 private:
  void fail(int err);
  std::string path_, tmp_;
  int fd_ = -1;
  int error_ = 0;
  bool committed_ = false;
  uint64_t written_ = 0;
  bool inject_ = false;  // this file is the one UFP4_FAIL_WRITE names
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomically(const std::string& path, const std::string& bytes);

// The suffix of a temporary of this process (".tmp-<pid>").
std::string temporary_suffix();

// Removes, directly inside `dir`, files and folders named "*.tmp-<pid>" whose process no longer
// runs (left by a kill). Returns how many it removed; a missing folder is not an error.
int remove_stale_temporaries(const std::string& dir);

// rm -rf of one path, without a shell. Missing paths are fine.
void remove_tree(const std::string& path);

}  // namespace ufp4
