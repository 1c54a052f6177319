// A base for the owners of one resource each (a file being written, a lock, a communicator's
// buckets, a captured graph): copies are forbidden, so no second owner can release it.
#pragma once

namespace ufp4 {

class NonCopyable {
 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;

 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;
};

}  // namespace ufp4
