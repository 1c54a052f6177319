#include "common/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/error.h"

namespace ufp4 {

namespace {

std::atomic<int64_t> g_files_opened{0};

// The 1-based index of the file UFP4_FAIL_WRITE names, or 0.
int64_t injected_failure_index() {
  static const int64_t n = [] {
    const char* e = std::getenv("UFP4_FAIL_WRITE");
    if (!e || !*e) return int64_t(0);
    char* end = nullptr;
    const long long v = std::strtoll(e, &end, 10);
    return (end && *end == '\0' && v > 0) ? static_cast<int64_t>(v) : int64_t(0);
  }();
  return n;
}

constexpr uint64_t kInjectAfterBytes = 4096;

std::string dir_part(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}

// Whether a process runs: a zombie (killed, not yet reaped by its parent or by init) counts as gone.
bool process_runs(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  const std::string stat = "/proc/" + std::to_string(pid) + "/stat";
  FILE* f = std::fopen(stat.c_str(), "r");
  if (!f) return true;  // no /proc: trust kill()
  char buf[512] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const char* close = std::strrchr(buf, ')');  // "pid (name) S ...": the state follows the name
  if (n == 0 || !close || close[1] != ' ') return true;
  return close[2] != 'Z' && close[2] != 'X';
}

}  // namespace

std::string temporary_suffix() { return ".tmp-" + std::to_string(::getpid()); }

AtomicFile::AtomicFile(const std::string& path) : path_(path), tmp_(path + temporary_suffix()) {
  inject_ = injected_failure_index() > 0 && ++g_files_opened == injected_failure_index();
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw RuntimeError(path_ + ": cannot create (" + std::strerror(errno) + ")");
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::fail(int err) {
  if (!error_) error_ = err;
}

void AtomicFile::write(const void* data, size_t n) {
  if (error_ || fd_ < 0) return;
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    size_t chunk = n;
    if (inject_) {
      if (written_ >= kInjectAfterBytes) return fail(ENOSPC);
      chunk = std::min<uint64_t>(chunk, kInjectAfterBytes - written_);
    }
    const ssize_t w = ::write(fd_, p, chunk);
    if (w < 0) {
      if (errno == EINTR) continue;
      return fail(errno);
    }
    if (w == 0) return fail(EIO);
    p += w;
    n -= static_cast<size_t>(w);
    written_ += static_cast<uint64_t>(w);
  }
}

void AtomicFile::commit() {
  if (committed_) return;
  if (inject_ && !error_) fail(ENOSPC);  // a small file fails at its sync
  if (!error_ && ::fsync(fd_) != 0) fail(errno);
  if (::close(fd_) != 0) fail(errno);
  fd_ = -1;
  if (error_) {
    ::unlink(tmp_.c_str());
    committed_ = true;  // nothing left to remove
    throw RuntimeError(path_ + ": " + std::strerror(error_));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    committed_ = true;
    throw RuntimeError(path_ + ": cannot rename into place (" + std::strerror(e) + ")");
  }
  committed_ = true;
  // The rename is durable once the folder is synced; a failure here leaves a complete file.
  const int dfd = ::open(dir_part(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

void remove_tree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    if (DIR* d = ::opendir(path.c_str())) {
      while (dirent* e = ::readdir(d)) {
        const std::string n = e->d_name;
        if (n != "." && n != "..") remove_tree(path + "/" + n);
      }
      ::closedir(d);
    }
    ::rmdir(path.c_str());
  } else {
    ::unlink(path.c_str());
  }
}

int remove_stale_temporaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    const size_t at = n.rfind(".tmp-");
    if (at == std::string::npos || at + 5 >= n.size()) continue;
    const std::string digits = n.substr(at + 5);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid()) continue;
    if (process_runs(pid)) continue;
    stale.push_back(dir + "/" + n);
  }
  ::closedir(d);
  for (const auto& p : stale) remove_tree(p);
  return static_cast<int>(stale.size());
}

}  // namespace ufp4
