#include "harness/dist/local_launch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "common/error.h"
#include "common/log.h"

namespace ufp4 {

namespace {

std::atomic<int> g_launch_signal{0};
void on_launch_signal(int s) { g_launch_signal = s; }

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw RuntimeError("launch: no socket for a free port");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd);
    throw RuntimeError("launch: could not find a free port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

int launch_local_ranks(int nproc, const std::vector<std::string>& argv, std::chrono::seconds grace) {
  if (nproc < 1) throw Error("--nproc-per-node must be >= 1");
  const std::string port = std::to_string(free_local_port());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  auto old_int = std::signal(SIGINT, on_launch_signal), old_term = std::signal(SIGTERM, on_launch_signal);
  g_launch_signal = 0;
  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  std::vector<int> status(static_cast<size_t>(nproc), 0);
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::signal(SIGINT, SIG_DFL);
      ::signal(SIGTERM, SIG_DFL);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  log_info("launch: " + std::to_string(nproc) + " ranks on this machine, store 127.0.0.1:" + port);
  int running = nproc, first_failed = -1;
  bool forwarded = false;
  std::chrono::steady_clock::time_point kill_at{};
  while (running > 0) {
    if (g_launch_signal != 0 && !forwarded) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
      forwarded = true;
    }
    int st = 0;
    const pid_t done = ::waitpid(-1, &st, WNOHANG);
    if (done < 0 && errno != EINTR) break;
    if (done <= 0) {
      if (kill_at != std::chrono::steady_clock::time_point{} && std::chrono::steady_clock::now() >= kill_at)
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (int r = 0; r < nproc; ++r) {
      if (pids[static_cast<size_t>(r)] != done) continue;
      pids[static_cast<size_t>(r)] = -1;
      status[static_cast<size_t>(r)] = st;
      --running;
      const bool ok = WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 130);  // 130: stopped with a checkpoint
      if (!ok && first_failed < 0) {
        first_failed = r;
        log_warn("launch: rank " + std::to_string(r) + " " + how_it_ended(st) + "; stopping the other ranks");
        for (pid_t p : pids)
          if (p > 0) ::kill(p, SIGTERM);
        kill_at = std::chrono::steady_clock::now() + grace;
      }
    }
  }
  std::signal(SIGINT, old_int);
  std::signal(SIGTERM, old_term);
  if (first_failed >= 0) {
    std::fprintf(stderr, "ufp4 run: rank %d of %d %s (the other ranks were stopped)\n", first_failed, nproc,
                 how_it_ended(status[static_cast<size_t>(first_failed)]).c_str());
    const int st = status[static_cast<size_t>(first_failed)];
    return WIFEXITED(st) && WEXITSTATUS(st) == kExitUsage ? kExitUsage : kExitRuntime;  // bad input stays exit 2
  }
  bool all_stopped = true, any_stopped = false;
  for (int st : status) {
    const bool stopped = WIFEXITED(st) && WEXITSTATUS(st) == 130;
    all_stopped = all_stopped && stopped;
    any_stopped = any_stopped || stopped;
  }
  if (any_stopped && !all_stopped) {
    std::fprintf(stderr, "ufp4 run: some ranks stopped (130) and others finished: the ranks disagree\n");
    return kExitRuntime;
  }
  return all_stopped ? 130 : 0;
}

}  // namespace ufp4
