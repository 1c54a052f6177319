#include "harness/error.h"

namespace ufp4 {

void fail_check(const char* expr, const char* file, int line, const std::string& msg) {
  throw RuntimeError(std::string(file) + ":" + std::to_string(line) + ": check failed (" + expr + "): " + msg);
}

}  // namespace ufp4
