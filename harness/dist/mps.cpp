#include "harness/dist/mps.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"

namespace ufp4 {

namespace {

// The GPU's UUID ("GPU-…"), from nvidia-smi when `device` is an index.
std::string uuid_of(const std::string& device) {
  if (device.rfind("GPU-", 0) == 0) return device;
  const std::string uuid = first_output_line("nvidia-smi --query-gpu=uuid --format=csv,noheader -i " + shell_quote(device) + " 2>/dev/null");
  if (uuid.rfind("GPU-", 0) != 0) throw RuntimeError("run: --mps: nvidia-smi gives no UUID for GPU " + device + " (got '" + uuid + "')");
  return uuid;
}

// `echo WHAT | nvidia-cuda-mps-control` to the daemon of these pipes; true when it answered.
bool tell(const std::string& pipes, const std::string& what) {
  return std::system(("echo " + what + " | env CUDA_MPS_PIPE_DIRECTORY=" + shell_quote(pipes) + " nvidia-cuda-mps-control > /dev/null 2>&1").c_str()) == 0;
}

}  // namespace

bool mps_available() { return std::system("command -v nvidia-cuda-mps-control > /dev/null 2>&1") == 0; }

MpsDaemons::MpsDaemons(const std::vector<std::string>& devices, const std::string& dir) : dir_(dir) {
  try {
    for (size_t i = 0; i < devices.size(); ++i) {
      const std::string slot = dir + "/" + std::to_string(i);
      Daemon d{uuid_of(devices[i]), slot + "/pipes", slot + "/log"};
      make_dirs(d.pipes);
      make_dirs(d.log);
      const std::string env = "env CUDA_VISIBLE_DEVICES=" + shell_quote(d.uuid) + " CUDA_MPS_PIPE_DIRECTORY=" + shell_quote(d.pipes) +
                              " CUDA_MPS_LOG_DIRECTORY=" + shell_quote(d.log);
      const bool started = std::system((env + " nvidia-cuda-mps-control -d > /dev/null 2>&1").c_str()) == 0;
      if (started) daemons_.push_back(d);
      // The daemon forks away at once; it answers once its pipes are open.
      bool answers = false;
      for (int t = 0; started && !answers && t < 100; ++t) {
        answers = tell(d.pipes, "get_server_list");
        if (!answers) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      if (!answers)
        throw RuntimeError("run: --mps: the MPS control daemon of GPU " + devices[i] + " (" + d.uuid + ") " + (started ? "does not answer" : "did not start") +
                           "; its log: " + first_output_line("tail -n 1 " + shell_quote(d.log + "/control.log") + " 2>/dev/null") +
                           " (--mps off trains without it)");
    }
  } catch (...) {
    quit_all();
    throw;
  }
}

MpsDaemons::~MpsDaemons() { quit_all(); }

void MpsDaemons::quit_all() noexcept {
  bool all_quit = true;
  for (const Daemon& d : daemons_) {
    if (tell(d.pipes, "quit")) continue;
    all_quit = false;
    log_warn("run: the MPS control daemon of " + d.uuid + " did not take 'quit'; its pipes and log stay in " + dir_ +
             " (stop it with: echo quit | CUDA_MPS_PIPE_DIRECTORY=" + d.pipes + " nvidia-cuda-mps-control)");
  }
  daemons_.clear();
  // Not std::filesystem::remove_all: LibTorch 2.11's library exports its own copy of it, which the
  // dynamic linker may bind instead, and that copy crashed here on the H200 (a jump to address 0).
  if (all_quit) remove_tree(dir_);
}

std::string MpsDaemons::client_env(int slot) const {
  const Daemon& d = daemons_.at(static_cast<size_t>(slot));
  return "CUDA_VISIBLE_DEVICES=" + shell_quote(d.uuid) + " CUDA_MPS_PIPE_DIRECTORY=" + shell_quote(d.pipes) + " CUDA_MPS_LOG_DIRECTORY=" + shell_quote(d.log);
}

std::string MpsDaemons::describe() const {
  std::string s;
  for (const Daemon& d : daemons_) s += (s.empty() ? "" : ", ") + d.uuid;
  return std::to_string(daemons_.size()) + " MPS control daemon(s), one a GPU (" + s + ")";
}

}  // namespace ufp4
