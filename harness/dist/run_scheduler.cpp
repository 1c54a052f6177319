#include "harness/dist/run_scheduler.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/fs.h"
#include "common/log.h"
#include "harness/dist/mps.h"

namespace ufp4 {

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_stop{0};
void on_stop(int s) { g_stop = s; }

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

// The device a job on slot `gpu` sees: the gpu-th of this process's CUDA_VISIBLE_DEVICES when it
// names devices, else that index.
std::string device_of(int gpu) {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!visible || !*visible) return std::to_string(gpu);
  std::vector<std::string> ids;
  std::stringstream ss(visible);
  for (std::string id; std::getline(ss, id, ',');) ids.push_back(id);
  return gpu < static_cast<int>(ids.size()) ? ids[static_cast<size_t>(gpu)] : std::to_string(gpu);
}

// `sh -c 'exec env ENV CMD >> LOG 2>&1'`, ENV naming the job's GPU (and its MPS daemon): the shell sets
// up the redirection, then becomes the job, so the pid is the job's.
pid_t spawn(const ScheduledJob& job, const std::string& env) {
  const std::string cmd = "exec env " + env + " " + job.command + " >> " + shell_quote(job.log) + " 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  if (pid < 0) throw RuntimeError("run: cannot start a process for " + job.name);
  return pid;
}

void append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

std::string read_small(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

// With o.mps, one MPS control daemon for each GPU slot (harness/dist/mps.h), else none.
std::unique_ptr<MpsDaemons> start_mps(const ScheduleOptions& o) {
  if (!o.mps) return nullptr;
  std::vector<std::string> devices;
  for (int g = 0; g < o.gpus; ++g) devices.push_back(device_of(g));
  char dir[] = "/tmp/ufp4-mps-XXXXXX";  // short: a UNIX socket's path has a limit of about 100 bytes
  if (!::mkdtemp(dir)) throw RuntimeError(std::string("run: --mps: cannot make a folder for the MPS daemons in /tmp: ") + std::strerror(errno));
  auto mps = std::make_unique<MpsDaemons>(devices, dir);
  log_info("run: CUDA MPS: " + mps->describe());
  return mps;
}

struct Running {
  size_t job;
  pid_t pid;
  int gpu;
  int64_t log_size;
  Clock::time_point started, last_growth;
  bool timed;                    // started with an empty log, not resuming, not after a stall: its time is a whole job's
  bool stalled = false;          // SIGTERM sent for a stall; restart once it is gone
  Clock::time_point term_sent{};
};

// One running job's stall watch: no log growth for o.stall_seconds (and no stop asked for) logs its state,
// asks its main thread for its stack, and stops it (the loop starts it again once); a stalled job still
// there o.stop_grace_seconds after that is killed.
void watch_for_stall(Running& r, const ScheduledJob& job, int restarts, const ScheduleOptions& o, Clock::time_point now, bool forwarded) {
  const int64_t size = file_size(job.log);
  if (size != r.log_size) {
    r.log_size = size;
    r.last_growth = now;
  }
  if (!r.stalled && !forwarded && seconds(now - r.last_growth) > o.stall_seconds) {
    r.stalled = true;
    r.term_sent = now;
    log_warn("run " + job.name + ": no progress for " + std::to_string(static_cast<int>(o.stall_seconds)) + " s (its log has not grown); " +
             "its state goes to " + job.log + "; stopping it" + (restarts == 0 ? " and starting it again once" : ""));
    append(job.log, "=== ufp4 run: no progress for " + std::to_string(static_cast<int>(o.stall_seconds)) + " s; its state:\n" + describe_process(r.pid, o.thread_stacks));
    // Its main thread (the process's own id) prints its stack into the log (common/stack_dump.h).
    ::syscall(SYS_tgkill, r.pid, r.pid, SIGUSR1);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ::kill(r.pid, SIGTERM);
    r.term_sent = Clock::now();  // the grace counts from the signal, not from before the state was read
  } else if (r.stalled && seconds(now - r.term_sent) > o.stop_grace_seconds) {
    ::kill(r.pid, SIGKILL);
    r.term_sent = now;
  }
}

}  // namespace

std::string describe_process(int pid, bool thread_stacks) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ostringstream os;
  std::istringstream status(read_small(proc + "/status"));
  for (std::string l; std::getline(status, l);)
    if (l.rfind("State:", 0) == 0 || l.rfind("Threads:", 0) == 0) os << l << "\n";
  if (DIR* d = ::opendir((proc + "/task").c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') os << "thread " << e->d_name << " waits in " << read_small(proc + "/task/" + e->d_name + "/wchan") << "\n";
    ::closedir(d);
  }
  if (!thread_stacks) return os.str();
  if (std::system("command -v gdb > /dev/null 2>&1") == 0) {
    const std::string cmd = "timeout 20 gdb -p " + std::to_string(pid) + " -batch -ex 'thread apply all bt 25' 2>&1 | grep -E '^(Thread|#)'";
    if (FILE* p = ::popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) os << buf;
      ::pclose(p);
    }
  } else {
    os << "(gdb not installed: no thread stacks)\n";
  }
  return os.str();
}

namespace {

// The time limit's rule for starting a job: its kind's estimate must fit in the time left. The estimate is
// the longer of the caller's prior and the longest job of the kind finished here, so that neither a prior
// from slower runs nor a job that ended early (a run copied from an identical one exits in seconds) leaves
// runs that cannot end in time; it only grows. A kind with neither, and a job that resumes, always start.
class TimeLimit {
 public:
  TimeLimit(Clock::time_point deadline, std::shared_ptr<std::map<std::string, double>> longest, std::map<std::string, double> prior)
      : deadline_(deadline), longest_(std::move(longest)), prior_(std::move(prior)) {}
  bool reached(Clock::time_point now) const { return now >= deadline_; }
  void finished(const std::string& kind, double took) { (*longest_)[kind] = std::max((*longest_)[kind], took); }
  // "" when `job` may start now, else why not.
  std::string refuses(const ScheduledJob& job, Clock::time_point now) const {
    if (deadline_ == Clock::time_point::max() || job.resumes) return "";
    const auto measured = longest_->find(job.kind);
    const auto prior = prior_.find(job.kind);
    const double took = measured == longest_->end() ? 0 : measured->second, expected = prior == prior_.end() ? 0 : prior->second;
    if (measured == longest_->end() && prior == prior_.end()) return "";
    const double left = seconds(deadline_ - now);
    if (std::max(took, expected) <= left) return "";
    // Whole seconds, the estimate rounded up and the time left down: a refusal never reads "148 s ... 148 s left".
    const auto up = [](double s) { return std::to_string(static_cast<int64_t>(std::ceil(s))); };
    const std::string why = took >= expected ? "the longest finished run of " + job.kind + " took " + up(took) + " s"
                                             : "a run of " + job.kind + " is expected to take " + up(expected) + " s";
    return "not started: " + why + ", and " + std::to_string(static_cast<int64_t>(std::floor(std::max(0.0, left)))) + " s of the time limit are left";
  }

 private:
  Clock::time_point deadline_;
  std::shared_ptr<std::map<std::string, double>> longest_;  // seconds of the longest finished job, by kind
  std::map<std::string, double> prior_;                     // the caller's estimates, by kind
};

}  // namespace

std::vector<JobResult> run_scheduled_jobs(const std::vector<ScheduledJob>& jobs, const ScheduleOptions& o) {
  if (o.gpus < 1 || o.per_gpu < 1) throw Error("run: --gpus and --per-gpu must be >= 1");
  TimeLimit limit(o.deadline, o.longest_by_kind ? o.longest_by_kind : std::make_shared<std::map<std::string, double>>(), o.prior_by_kind);
  std::vector<JobResult> results(jobs.size());
  std::vector<int> load(static_cast<size_t>(o.gpus), 0);
  std::unique_ptr<MpsDaemons> mps;  // declared before the cleanup below: it outlives every job it serves
  std::vector<Running> running;
  size_t next = 0;
  g_stop = 0;
  auto old_int = std::signal(SIGINT, on_stop), old_term = std::signal(SIGTERM, on_stop);
  // Whatever ends the loop (an exception too): the handlers restored, no child left running unwatched.
  struct Cleanup {
    std::vector<Running>& running;
    void (*old_int)(int);
    void (*old_term)(int);
    ~Cleanup() {
      for (auto& r : running) ::kill(r.pid, SIGKILL);
      for (auto& r : running) ::waitpid(r.pid, nullptr, 0);
      std::signal(SIGINT, old_int);
      std::signal(SIGTERM, old_term);
    }
  } cleanup{running, old_int, old_term};
  mps = start_mps(o);  // after the handlers: a signal while the daemons start still ends in their cleanup
  Clock::time_point stop_seen{};
  bool forwarded = false, killed = false;
  auto start = [&](size_t j) {
    const int gpu = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    ++load[static_cast<size_t>(gpu)];
    const int64_t log_size = file_size(jobs[j].log);  // before the job writes to it
    const pid_t pid = spawn(jobs[j], mps ? mps->client_env(gpu) : "CUDA_VISIBLE_DEVICES=" + shell_quote(device_of(gpu)));
    running.push_back({j, pid, gpu, log_size, Clock::now(), Clock::now(), log_size <= 0 && !jobs[j].resumes && results[j].restarts == 0});
    log_info("run " + jobs[j].name + ": started on GPU " + std::to_string(gpu) + " (log " + jobs[j].log + ")");
  };
  while (true) {
    const Clock::time_point now = Clock::now();
    if ((g_stop != 0 || limit.reached(now)) && !forwarded) {
      stop_seen = now;
      forwarded = true;
      log_info("run: " + (g_stop != 0 ? "signal " + std::to_string(g_stop.load()) : std::string("the time limit")) +
               ": stopping " + std::to_string(running.size()) + " run(s) at their next step (each checkpoints; the same command resumes them)");
      for (auto& r : running) ::kill(r.pid, SIGTERM);
    }
    if (forwarded && !killed && seconds(now - stop_seen) > o.stop_grace_seconds && !running.empty()) {
      killed = true;
      log_warn("run: " + std::to_string(running.size()) + " run(s) still running " + std::to_string(static_cast<int>(o.stop_grace_seconds)) +
               " s after the signal: killed (each resumes from its last checkpoint)");
      // Their state without thread stacks (gdb could take a minute a process), then the kill.
      for (auto& r : running) {
        append(jobs[r.job].log, "=== ufp4 run: still running " + std::to_string(static_cast<int>(o.stop_grace_seconds)) + " s after a stop signal; its state:\n" +
                                    describe_process(r.pid, /*thread_stacks=*/false));
        ::kill(r.pid, SIGKILL);
      }
    }
    // Starts, while slots are free and no stop was asked for; a job the time limit refuses is left for the
    // next command (the time left only shrinks and the estimates only grow, so it would not fit later).
    while (!forwarded && next < jobs.size() && static_cast<int>(running.size()) < o.gpus * o.per_gpu) {
      const size_t j = next++;
      if (const std::string why = limit.refuses(jobs[j], now); why.empty()) {
        start(j);
      } else {
        results[j].detail = why;
        log_info("run " + jobs[j].name + ": " + why);
      }
    }
    // Ended jobs.
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      int status = 0;
      const pid_t w = ::waitpid(r.pid, &status, WNOHANG);
      if (w == 0) {
        ++i;
        continue;
      }
      --load[static_cast<size_t>(r.gpu)];
      JobResult& res = results[r.job];
      const ScheduledJob& job = jobs[r.job];
      if (w < 0) {  // the child cannot be waited for (it was reaped elsewhere): its outcome is unknown
        res.status = JobStatus::kFailed;
        res.detail = std::string("lost track of the process (") + std::strerror(errno) + "), see " + job.log;
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        continue;
      }
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (ok && r.timed) limit.finished(job.kind, seconds(Clock::now() - r.started));
      // A stalled job that ended some other way than by finishing is started again, once.
      if (r.stalled && !forwarded && res.restarts == 0 && !ok) {
        const size_t again = r.job;  // `r` goes with the erase
        res.restarts = 1;
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        log_info("run " + job.name + ": started again after the stall; it resumes from its checkpoint");
        start(again);
        continue;
      }
      const bool stopped = (WIFEXITED(status) && WEXITSTATUS(status) == 130) || (forwarded && WIFSIGNALED(status));
      res.status = ok ? JobStatus::kDone : stopped ? JobStatus::kStopped : JobStatus::kFailed;
      if (r.stalled && !forwarded && !ok) {  // a second stall: failed, whether or not it checkpointed on the way out
        res.status = JobStatus::kFailed;
        res.detail = "stalled twice (no output for " + std::to_string(static_cast<int>(o.stall_seconds)) + " s), see " + job.log;
      } else if (!ok && !stopped)
        res.detail = (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status))) + ", see " + job.log;
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
    if (running.empty() && (forwarded || next >= jobs.size())) break;
    // Stalls: no log growth for stall_seconds.
    for (auto& r : running) watch_for_stall(r, jobs[r.job], results[r.job].restarts, o, now, forwarded);
    std::this_thread::sleep_for(std::chrono::duration<double>(o.poll_seconds));
  }
  return results;
}

}  // namespace ufp4
