// SHA-256 (FIPS 180-4), for content hashes of manifests, data, checkpoints and results. Whole blocks go
// through the x86 SHA extensions where the CPU has them (about ten times the portable code: a checkpoint
// or a model's final weights are tens of GB), else through the portable rounds; both give the same digest.
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
  void blocks(const uint8_t* p, size_t n);  // n whole 64-byte blocks
  uint32_t h_[8];
  uint8_t buf_[64];
  uint64_t len_ = 0;
  size_t used_ = 0;
};

std::string sha256_hex(const std::string& data);
// Whether whole blocks use the CPU's SHA extensions; `allow` false forces the portable rounds (tests compare them).
bool sha256_hardware();
void sha256_allow_hardware(bool allow);
std::string sha256_file(const std::string& path);  // throws ufp4::Error if unreadable

}  // namespace ufp4
