// Text split at a separator and joined with one: the one form the command line's lists, reports'
// rows, HDF5 string attributes and "allowed: ..." messages share; and a double with every digit.
#pragma once
#include <string>
#include <vector>

namespace ufp4 {

// The pieces between separators, as std::getline reads them: "a|b|" -> {"a", "b"}, "a||b" -> {"a", "", "b"},
// "" -> {}. `skip_empty`: empty pieces left out ("a,,b" -> {"a", "b"}).
std::vector<std::string> split(const std::string& s, char sep, bool skip_empty = false);

// Every digit of a double (%.17g): two values that differ print differently, as an error naming both must.
std::string all_digits(double v);

// The items with `sep` between them: join({"a", "b"}, ", ") -> "a, b".
template <class Items>
std::string join(const Items& items, const std::string& sep) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    out += (first ? "" : sep) + std::string(item);
    first = false;
  }
  return out;
}

}  // namespace ufp4
