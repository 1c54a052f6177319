// Logging and progress lines for long work. Messages go to stderr so stdout stays parseable.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace ufp4 {

enum class LogLevel { kQuiet = 0, kInfo = 1, kDebug = 2 };
void set_log_level(LogLevel level);
LogLevel log_level();
void log_info(const std::string& msg);
void log_debug(const std::string& msg);
void log_warn(const std::string& msg);

// Progress of a loop of known length: prints step, tokens, loss, tokens/s and ETA at most
// every `min_interval_s` seconds, on one line per report.
class Progress {
 public:
  Progress(std::string label, int64_t total_steps, double min_interval_s = 2.0);
  // A resumed loop starts at `step` with `tokens` already seen: tokens/s and the ETA count only the
  // work of this process from here on.
  void resume_from(int64_t step, int64_t tokens);
  // Returns the line it printed, or "" when the interval has not passed (final step always prints).
  std::string update(int64_t step, int64_t tokens, double loss, const std::string& extra = "");
  static std::string format_duration(double seconds);

 private:
  std::string label_;
  int64_t total_, start_step_ = 0, start_tokens_ = 0;
  double min_interval_;
  std::chrono::steady_clock::time_point start_, last_;
  bool printed_ = false;
};

}  // namespace ufp4
