// fuzz_dump: bytes as a kvdump v1 file (formats/kvdump-v1.md) through DumpReader's structure
// checks, then a few rows of every array inside the geometry the reader validated. The bytes go
// to a file in /dev/shm because HDF5 reads files.
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/dump.h"

namespace {

// The per-process scratch file, removed when libFuzzer exits normally.
struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempPath tmp("/dev/shm/kvtool-fuzz-dump-" + std::to_string(getpid()) + ".h5");
  const std::string& path = tmp.path;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!ok) return 0;
  try {
    kvtool::DumpReader d(path);
    kvtool::fuzz::read_dump_rows(d);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
