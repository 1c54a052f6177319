// SHA-256 (FIPS 180-4), for content hashes of manifests, data and results.
#pragma once
#include <cstdint>
#include <string>

namespace ufp4 {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(const std::string& s) { update(s.data(), s.size()); }
  std::string hex();  // finalizes
 private:
  void block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t len_ = 0;
  size_t used_ = 0;
};

std::string sha256_hex(const std::string& data);
std::string sha256_file(const std::string& path);  // throws ufp4::Error if unreadable

}  // namespace ufp4
