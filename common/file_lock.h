// An exclusive lock on a file (flock): held while an object lives, released by the kernel when the
// process ends however it ends, so a killed process never leaves a run locked. The file names the
// holder's pid and host for the message a second process prints.
#pragma once
#include <string>

#include "common/non_copyable.h"

namespace ufp4 {

class FileLock : NonCopyable {
 public:
  // Takes the lock without waiting: locked() tells whether it was free. Throws RuntimeError when the
  // file cannot be created.
  explicit FileLock(const std::string& path);
  ~FileLock();
  bool locked() const { return fd_ >= 0 && held_; }
  // Waits until the lock is free and takes it (after a failed try).
  void wait();
  // "pid N on HOST" of the process that holds it (as it wrote it), or "" when unknown.
  std::string holder() const;
  const std::string& path() const { return path_; }

 private:
  void stamp();
  std::string path_;
  int fd_ = -1;
  bool held_ = false;
};

}  // namespace ufp4
