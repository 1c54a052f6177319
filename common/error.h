// Error convention: library code throws ufp4::Error (bad input: exit 2) or ufp4::RuntimeError
// (runtime failure: exit 1) with a one-line message naming file, key and value; only main()
// turns them into exit codes. UFP4_CHECK adds the source location for internal invariants.
#pragma once
#include <stdexcept>
#include <string>

namespace ufp4 {

enum ExitCode { kExitOk = 0, kExitRuntime = 1, kExitUsage = 2 };

// `msg` on one line: control characters (a newline in a user's value, bytes of a broken file) as
// escapes such as \n or \x01, so every error stays the one line the CLI promises.
std::string one_line(const std::string& msg);

// Bad usage or bad input (manifest, CLI, file contents).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(one_line(msg)) {}
};

// A failure while doing valid work (I/O, CUDA, numerical divergence).
class RuntimeError : public std::runtime_error {
 public:
  explicit RuntimeError(const std::string& msg) : std::runtime_error(one_line(msg)) {}
};

[[noreturn]] void fail_check(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace ufp4

#define UFP4_CHECK(cond, msg)                                                   \
  do {                                                                          \
    if (!(cond)) ::ufp4::fail_check(#cond, __FILE__, __LINE__, (msg));          \
  } while (0)
