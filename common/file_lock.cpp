#include "common/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.h"

namespace ufp4 {

FileLock::FileLock(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeError(path + ": cannot create the run's lock (" + std::strerror(errno) + ")");
  held_ = ::flock(fd_, LOCK_EX | LOCK_NB) == 0;
  if (held_) stamp();
}

FileLock::~FileLock() {
  if (fd_ < 0) return;
  // The file stays: removing it while another process waits on it would let a third lock a new file.
  if (held_) ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

void FileLock::wait() {
  while (!held_) {
    if (::flock(fd_, LOCK_EX) == 0) held_ = true;
    else if (errno != EINTR) throw RuntimeError(path_ + ": cannot lock (" + std::strerror(errno) + ")");
  }
  stamp();
}

void FileLock::stamp() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  const std::string who = "pid " + std::to_string(::getpid()) + " on " + host + "\n";
  if (::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, who.data(), who.size(), 0) < 0) {
    // The stamp only feeds a message; the lock itself holds without it.
  }
}

std::string FileLock::holder() const {
  char buf[300] = {0};
  const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace ufp4
