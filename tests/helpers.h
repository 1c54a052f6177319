// Shared test helpers: GPU detection, the CLI and shell in tests, temporary folders, training fixtures.
// No LibTorch here, so that a test file without tensors compiles without it (tests/tensor_helpers.h
// holds the tensor helpers).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ufp4::test {

bool gpu_available();

// The message of the exception f throws, "" when it throws none (for CHECK(contains(...)) under Catch2 v2
// and v3 alike, whose matchers differ).
std::string thrown_message(const std::function<void()>& f);
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

struct CliResult {
  int code;
  std::string out;  // stdout and stderr
};
// The CLI (cli_main, what the ufp4 binary's main() calls) in this process, from the repository root:
// its exit code and output. `args`: words separated by spaces, '...' quoting. In-process because a
// LibTorch process takes ~0.7 s to start, and the suite makes hundreds of these calls.
enum class CliOutput { kBoth, kStderr };
CliResult run_cli(const std::string& args, CliOutput which = CliOutput::kBoth);
// The same from the folder `dir` (a checkout of a test's own), as `cd dir && ufp4 args` runs it.
CliResult run_cli_in(const std::string& dir, const std::string& args);
// The built ufp4 binary, spawned from the repository root with `args` (a shell fragment).
CliResult run_binary(const std::string& args);
// Runs `command` (a shell command line) and sends it `sig` once a line of its output (stdout and
// stderr) contains `trigger`: a signal that lands at a known point on any machine, however fast.
struct SignalledRun {
  int code;         // exit code, or 128 + the signal that ended it
  std::string out;  // stdout and stderr
  bool signalled;   // the trigger appeared and the signal was sent
};
SignalledRun run_and_signal(const std::string& command, const std::string& trigger, int sig);
// Runs a shell command line; its exit code (128 + signal when killed) and stdout + stderr.
struct Shell {
  int code;
  std::string out;
};
Shell sh(const std::string& cmd);
// A fresh folder under /tmp.
std::string temp_dir();

// Training fixtures: a byte-level CI data folder prepared once per test binary (through the data
// tool), a manifest file written into `dir`, and a tiny-model CPU manifest (`extra`: more [train] lines).
const std::string& ci_data();
// build/ci/<sub> (runs, analysis) of the CTest fixture ci-train (cmake/ci_train.cmake), which trains the
// CI-scale runs once per test run; throws, saying how to make it, when it is missing.
std::string ci_fixture(const std::string& sub);
std::string write_manifest(const std::string& dir, const std::string& name, const std::string& body);
std::string tiny_manifest(const std::string& dir, const std::string& recipe, int steps, const std::string& extra = "",
                          const std::string& model = "tiny");

}  // namespace ufp4::test
