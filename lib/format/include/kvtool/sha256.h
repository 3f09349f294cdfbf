// Incremental SHA-256 (OpenSSL EVP) and hex helpers.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvtool {

using Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  Digest finish();

 private:
  void* ctx_;
};

Digest sha256(const void* data, size_t n);
inline Digest sha256(std::string_view s) { return sha256(s.data(), s.size()); }
std::string to_hex(const uint8_t* data, size_t n);
inline std::string to_hex(const Digest& d) { return to_hex(d.data(), d.size()); }
// Parses 64 lowercase/uppercase hex characters; returns false on anything else.
bool from_hex(std::string_view hex, Digest& out);
// SHA-256 of a whole file, streamed.
Digest sha256_file(const std::string& path);

}  // namespace kvtool
