#include "kvtool/canonical.h"

namespace kvtool {

namespace {
void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
}  // namespace

CanonicalHasher::CanonicalHasher(std::string_view domain) { str(0, domain); }

void CanonicalHasher::header(uint16_t tag, FieldType t, uint64_t len) {
  uint8_t hdr[11];
  put_le(hdr, tag, 2);
  hdr[2] = static_cast<uint8_t>(t);
  put_le(hdr + 3, len, 8);
  h_.update(hdr, sizeof hdr);
}

void CanonicalHasher::str(uint16_t tag, std::string_view s) {
  header(tag, FieldType::utf8, s.size());
  h_.update(s);
}

void CanonicalHasher::u64(uint16_t tag, uint64_t v) {
  uint8_t b[8];
  put_le(b, v, 8);
  header(tag, FieldType::u64, 8);
  h_.update(b, 8);
}

void CanonicalHasher::i64(uint16_t tag, int64_t v) {
  uint8_t b[8];
  put_le(b, static_cast<uint64_t>(v), 8);
  header(tag, FieldType::i64, 8);
  h_.update(b, 8);
}

void CanonicalHasher::i32_array(uint16_t tag, const std::vector<int32_t>& v) {
  header(tag, FieldType::i32_array, 4 * v.size());
  for (int32_t x : v) {
    uint8_t b[4];
    put_le(b, static_cast<uint32_t>(x), 4);
    h_.update(b, 4);
  }
}

void CanonicalHasher::digest(uint16_t tag, const Digest& d) {
  header(tag, FieldType::digest, d.size());
  h_.update(d.data(), d.size());
}

}  // namespace kvtool
