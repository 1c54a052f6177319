// Progress lines: step, tokens, loss, tokens/s and ETA, also after a resume.
#include <chrono>
#include <string>
#include <thread>

#include "common/log.h"
#include "tests/catch.h"

using namespace ufp4;

TEST_CASE("progress lines carry step, tokens, loss, tokens/s and ETA", "[io]") {
  set_log_level(LogLevel::kQuiet);
  Progress p("train", 100, 3600.0);
  std::string first = p.update(10, 10240, 3.25);
  CHECK(first.find("step 10/100") != std::string::npos);
  CHECK(first.find("tokens 10240") != std::string::npos);
  CHECK(first.find("loss 3.2500") != std::string::npos);
  CHECK(first.find("tok/s") != std::string::npos);
  CHECK(first.find("ETA") != std::string::npos);
  CHECK(p.update(11, 11264, 3.2).empty());      // within the interval: nothing printed
  CHECK(!p.update(100, 102400, 3.0).empty());   // the final step always prints
  CHECK(Progress::format_duration(59) == "59s");
  CHECK(Progress::format_duration(61) == "1m01s");
  CHECK(Progress::format_duration(3725) == "1h02m");
  set_log_level(LogLevel::kInfo);
}

TEST_CASE("a resumed loop's tokens/s and ETA count only this process's work", "[io]") {
  set_log_level(LogLevel::kQuiet);
  Progress p("train", 100, 0.0);
  p.resume_from(50, 5000000000LL);  // five billion tokens seen before the resume
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string line = p.update(51, 5000000000LL + 1000, 3.0);
  const size_t at = line.find(" tok/s");
  REQUIRE(at != std::string::npos);
  const double tps = std::stod(line.substr(line.rfind(' ', at - 1) + 1));
  CHECK(tps < 1e6);   // 1,000 tokens in >= 20 ms; counting the resumed tokens would give > 1e11
  CHECK(tps > 0);
  CHECK(line.find("ETA ?") == std::string::npos);  // 49 steps left at this process's pace
  set_log_level(LogLevel::kInfo);
}
