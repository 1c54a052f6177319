#include "harness/log.h"
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
