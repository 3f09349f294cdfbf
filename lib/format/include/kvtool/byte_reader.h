// A sequential little-endian reader over one regular file that knows the file's size: every read
// is checked against what is left before it happens, so a header's claim can never make kvtool
// read past the end or allocate more than the file holds. Used by the GGUF and llama.cpp state
// readers (formats/llama-state.md, formats/gguf.md).
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/random_access_file.h"

namespace kvtool {

class ByteReader {
 public:
  // `what` names the file in messages ("the GGUF file 'm.gguf'").
  ByteReader(const std::string& path, std::string what) : what_(std::move(what)), file_(path, named(what_)) {}

  uint64_t size() const { return file_.size(); }
  uint64_t offset() const { return off_; }
  uint64_t remaining() const { return size() - off_; }
  const std::string& what() const { return what_; }

  // Throws TRUNCATED unless `n` more bytes are in the file; `field` says what was being read.
  void need(uint64_t n, const char* field) const {
    KVT_CHECK(n <= remaining(), TRUNCATED,
              what_ << " ends inside " << field << " at offset " << off_ << " (" << n << " bytes needed, "
                    << remaining() << " left)");
  }
  void read(void* out, uint64_t n, const char* field) {
    need(n, field);
    const RandomAccessFile::Read r = file_.pread_upto(off_, static_cast<size_t>(n), out);
    KVT_CHECK(r.got == n, IO_ERROR,
              "cannot read " << what_ << ": " << (r.error ? std::strerror(r.error) : "short read"));
    off_ += n;
  }
  void skip(uint64_t n, const char* field) {
    need(n, field);
    off_ += n;
  }
  void seek(uint64_t off) {
    KVT_CHECK(off <= size(), INTERNAL, "seek beyond the end of " << what_);
    off_ = off;
  }
  template <typename T>
  T get(const char* field) {
    uint8_t b[sizeof(T)];
    read(b, sizeof(T), field);
    T v;
    std::memcpy(&v, b, sizeof(T));  // the formats are little-endian, as is every host kvtool builds on
    return v;
  }
  uint32_t u32(const char* field) { return get<uint32_t>(field); }
  int32_t i32(const char* field) { return get<int32_t>(field); }
  uint64_t u64(const char* field) { return get<uint64_t>(field); }

 private:
  static RandomAccessFile::Options named(const std::string& what) {
    RandomAccessFile::Options o;
    o.name = what;
    return o;
  }
  std::string what_;
  RandomAccessFile file_;
  uint64_t off_ = 0;
};

}  // namespace kvtool
