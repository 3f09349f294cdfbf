// A read-only memory map of a whole regular file (the GGUF reader's tensor data, as llama.cpp maps
// a model): every view is bounds-checked against the size the file had when it was opened, and
// copy() turns the one hazard of a map — the file made shorter by someone else while kvtool reads
// it, which the kernel reports as SIGBUS — into an error instead of a crash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "kvtool/random_access_file.h"

namespace kvtool {

class MappedFile {
 public:
  // Maps `file` (its size at open; a 0-byte file maps nothing). IO_ERROR "cannot map NAME: <strerror>".
  explicit MappedFile(const RandomAccessFile& file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  uint64_t size() const { return size_; }

  // Runs `use` on the n bytes at `offset`. TRUNCATED "NAME is shorter than its headers say (SIZE
  // bytes)" when [offset, offset + n) passes size(); TRUNCATED "NAME became shorter while it was
  // read" when the file shrank under the map while `use` read it. `use` must not own anything a
  // destructor frees (it is left by a jump when the read faults): plain loops over the bytes.
  void read(uint64_t offset, size_t n, const std::function<void(const uint8_t*)>& use) const;

 private:
  std::string name_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

}  // namespace kvtool
