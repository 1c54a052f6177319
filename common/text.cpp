#include "common/text.h"

#include <cstdio>
#include <sstream>

namespace ufp4 {

std::vector<std::string> split(const std::string& s, char sep, bool skip_empty) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, sep);)
    if (!skip_empty || !item.empty()) out.push_back(item);
  return out;
}

std::string all_digits(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

}  // namespace ufp4
