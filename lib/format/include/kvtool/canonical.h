// Canonical typed, length-prefixed encoding used for every digest (formats/kvi-v1.md §Digests).
// Each field is: u16 tag, u8 type, u64 length, then `length` bytes, all little-endian. Fields are
// fed straight into a SHA-256 so large payloads never need to be buffered.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "kvtool/sha256.h"

namespace kvtool {

enum class FieldType : uint8_t { utf8 = 1, u64 = 2, i64 = 3, i32_array = 4, digest = 5, bytes = 6 };

class CanonicalHasher {
 public:
  explicit CanonicalHasher(std::string_view domain);  // domain separation string, e.g. "kvtool.content.v1"
  void str(uint16_t tag, std::string_view s);
  void u64(uint16_t tag, uint64_t v);
  void i64(uint16_t tag, int64_t v);
  void i32_array(uint16_t tag, const std::vector<int32_t>& v);
  void digest(uint16_t tag, const Digest& d);
  Digest finish() { return h_.finish(); }

 private:
  void header(uint16_t tag, FieldType t, uint64_t len);
  Sha256 h_;
};

}  // namespace kvtool
