#include "common/sha256.h"

#include <atomic>
#include <cstring>
#include <fstream>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define UFP4_SHA_X86 1
#endif

#include "common/error.h"

namespace ufp4 {

namespace {
const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be,
    0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa,
    0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85,
    0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3,
    0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
    0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

void portable_block(uint32_t* h_, const uint8_t* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) w[i] = (uint32_t(p[4 * i]) << 24) | (uint32_t(p[4 * i + 1]) << 16) | (uint32_t(p[4 * i + 2]) << 8) | p[4 * i + 3];
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
    uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
  }
  h_[0] += a; h_[1] += b; h_[2] += c; h_[3] += d; h_[4] += e; h_[5] += f; h_[6] += g; h_[7] += h;
}

#ifdef UFP4_SHA_X86
bool cpu_has_sha() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSSE3) || !(c & bit_SSE4_1)) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (b & bit_SHA) != 0;
}

// n blocks through SHA256RNDS2 / SHA256MSG1 / SHA256MSG2. The state lives as ABEF and CDGH; each group of
// four rounds adds K to four message words, and rounds 16-63 extend the schedule from the four groups before:
// W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16].
__attribute__((target("sha,sse4.1,ssse3"))) void hardware_blocks(uint32_t* state, const uint8_t* p, size_t n) {
  const __m128i swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);  // big-endian words
  __m128i dcba = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state)), 0xB1);  // CDAB
  __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(state + 4)), 0x1B);
  __m128i abef = _mm_alignr_epi8(dcba, efgh, 8);
  __m128i cdgh = _mm_blend_epi16(efgh, dcba, 0xF0);
  for (; n > 0; --n, p += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4];
    for (int g = 0; g < 16; ++g) {
      __m128i& x = w[g % 4];
      if (g < 4) {
        x = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * g)), swap);
      } else {
        const __m128i &prev = w[(g + 3) % 4], &prev2 = w[(g + 2) % 4], &prev3 = w[(g + 1) % 4];
        x = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32(x, prev3), _mm_alignr_epi8(prev, prev2, 4)), prev);
      }
      __m128i m = _mm_add_epi32(x, _mm_loadu_si128(reinterpret_cast<const __m128i*>(K + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
      m = _mm_shuffle_epi32(m, 0x0E);
      std::swap(abef, cdgh);  // after two rounds the old AB and EF are the new CD and GH
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, m);
      std::swap(abef, cdgh);
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}
#endif

std::atomic<bool> g_allow_hardware{true};

bool hardware_present() {
#ifdef UFP4_SHA_X86
  static const bool present = cpu_has_sha();
  return present;
#else
  return false;
#endif
}
}  // namespace

Sha256::Sha256() : h_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

bool sha256_hardware() { return hardware_present() && g_allow_hardware.load(); }
void sha256_allow_hardware(bool allow) { g_allow_hardware.store(allow); }

void Sha256::blocks(const uint8_t* p, size_t n) {
#ifdef UFP4_SHA_X86
  if (sha256_hardware()) return hardware_blocks(h_, p, n);
#endif
  for (; n > 0; --n, p += 64) portable_block(h_, p);
}

void Sha256::update(const void* data, size_t n) {
  if (n == 0) return;  // an empty tensor's data pointer may be null: nothing to copy
  const uint8_t* p = static_cast<const uint8_t*>(data);
  len_ += n;
  if (used_ > 0) {  // complete the buffered block first
    const size_t take = std::min(n, 64 - used_);
    std::memcpy(buf_ + used_, p, take);
    used_ += take; p += take; n -= take;
    if (used_ < 64) return;
    blocks(buf_, 1);
    used_ = 0;
  }
  blocks(p, n / 64);  // whole blocks straight from the input
  p += n / 64 * 64;
  n %= 64;
  std::memcpy(buf_, p, n);
  used_ = n;
}

std::string Sha256::hex() {
  uint64_t bits = len_ * 8;
  uint8_t pad = 0x80;
  update(&pad, 1);
  uint8_t zero = 0;
  while (used_ != 56) update(&zero, 1);
  uint8_t lenb[8];
  for (int i = 0; i < 8; ++i) lenb[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
  update(lenb, 8);
  static const char* hexd = "0123456789abcdef";
  std::string out;
  for (uint32_t v : h_)
    for (int i = 7; i >= 0; --i) out += hexd[(v >> (4 * i)) & 0xf];
  return out;
}

std::string sha256_hex(const std::string& data) {
  Sha256 s;
  s.update(data);
  return s.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot open for reading");
  Sha256 s;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    s.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return s.hex();
}

}  // namespace ufp4
