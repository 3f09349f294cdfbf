// A sequential little-endian reader over one regular file that knows the file's size: every read
// is checked against what is left before it happens, so a header's claim can never make kvtool
// read past the end or allocate more than the file holds. Used by the GGUF and llama.cpp state
// readers (formats/llama-state.md).
#pragma once
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kvtool/error.h"

namespace kvtool::impl {

class ByteReader {
 public:
  // `what` names the file in messages ("the GGUF file 'm.gguf'").
  ByteReader(const std::string& path, std::string what) : what_(std::move(what)) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    KVT_CHECK(fd_ >= 0, IO_ERROR, "cannot open " << what_ << ": " << std::strerror(errno));
    struct stat st {};
    if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd_);
      KVT_THROW(IO_ERROR, what_ << " is not a regular file");
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~ByteReader() { ::close(fd_); }
  ByteReader(const ByteReader&) = delete;
  ByteReader& operator=(const ByteReader&) = delete;

  uint64_t size() const { return size_; }
  uint64_t offset() const { return off_; }
  uint64_t remaining() const { return size_ - off_; }
  const std::string& what() const { return what_; }

  // Throws TRUNCATED unless `n` more bytes are in the file; `field` says what was being read.
  void need(uint64_t n, const char* field) const {
    KVT_CHECK(n <= remaining(), TRUNCATED,
              what_ << " ends inside " << field << " at offset " << off_ << " (" << n << " bytes needed, "
                    << remaining() << " left)");
  }
  void read(void* out, uint64_t n, const char* field) {
    need(n, field);
    auto* p = static_cast<uint8_t*>(out);
    uint64_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, p + done, static_cast<size_t>(n - done), static_cast<off_t>(off_ + done));
      if (r < 0 && errno == EINTR) continue;
      KVT_CHECK(r > 0, IO_ERROR, "cannot read " << what_ << ": " << (r < 0 ? std::strerror(errno) : "short read"));
      done += static_cast<uint64_t>(r);
    }
    off_ += n;
  }
  void skip(uint64_t n, const char* field) {
    need(n, field);
    off_ += n;
  }
  void seek(uint64_t off) {
    KVT_CHECK(off <= size_, INTERNAL, "seek beyond the end of " << what_);
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
  int fd_ = -1;
  uint64_t size_ = 0, off_ = 0;
  std::string what_;
};

}  // namespace kvtool::impl
