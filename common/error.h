// Error convention: library code throws ufp4::Error (bad input: exit 2) or ufp4::RuntimeError
// (runtime failure: exit 1) with a one-line message naming file, key and value; only main()
// turns them into exit codes.
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

}  // namespace ufp4
