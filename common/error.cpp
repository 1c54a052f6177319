#include "common/error.h"

namespace ufp4 {

std::string one_line(const std::string& msg) {
  std::string out;
  out.reserve(msg.size());
  for (unsigned char c : msg) {
    if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += ' ';
    else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace ufp4
