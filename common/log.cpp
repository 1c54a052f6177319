#include "common/log.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>


namespace ufp4 {

namespace {
LogLevel g_level = LogLevel::kInfo;
}

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }
void log_info(const std::string& msg) { if (g_level >= LogLevel::kInfo) std::cerr << msg << '\n'; }
void log_debug(const std::string& msg) { if (g_level >= LogLevel::kDebug) std::cerr << "[debug] " << msg << '\n'; }
void log_warn(const std::string& msg) { std::cerr << "warning: " << msg << '\n'; }

Progress::Progress(std::string label, int64_t total_steps, double min_interval_s)
    : label_(std::move(label)), total_(total_steps), min_interval_(min_interval_s),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void Progress::resume_from(int64_t step, int64_t tokens) {
  start_step_ = step;
  start_tokens_ = tokens;
}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  long t = static_cast<long>(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string Progress::update(int64_t step, int64_t tokens, double loss, const std::string& extra) {
  auto now = std::chrono::steady_clock::now();
  double since_last = std::chrono::duration<double>(now - last_).count();
  bool final_step = step >= total_;
  if (printed_ && since_last < min_interval_ && !final_step) return "";
  printed_ = true;
  last_ = now;
  double elapsed = std::chrono::duration<double>(now - start_).count();
  const double done = static_cast<double>(step - start_step_);
  double tps = elapsed > 0 ? static_cast<double>(tokens - start_tokens_) / elapsed : 0;
  double eta = done > 0 ? elapsed * static_cast<double>(total_ - step) / done : NAN;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s step %lld/%lld | tokens %lld | loss %.4f | %.0f tok/s | ETA %s",
                label_.c_str(), static_cast<long long>(step), static_cast<long long>(total_),
                static_cast<long long>(tokens), loss, tps, format_duration(eta).c_str());
  std::string line = buf;
  if (!extra.empty()) line += " | " + extra;
  log_info(line);
  return line;
}

}  // namespace ufp4
