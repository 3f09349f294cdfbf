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

void read_some(const kvtool::DumpReader& d) {
  const kvtool::DumpInfo& in = d.info();
  const int64_t dim = in.geo.head_dim, rows = std::min<int64_t>(in.geo.tokens, 4);
  std::vector<float> buf(static_cast<size_t>(std::max<int64_t>(rows * dim, 1)));
  for (int64_t l = 0; l < std::min<int64_t>(in.geo.layers, 3); ++l)
    for (int64_t h = 0; h < std::min<int64_t>(in.geo.kv_heads, 3); ++h) {
      d.read_k(l, h, 0, rows, buf.data());
      d.read_v(l, h, in.geo.tokens - rows, in.geo.tokens, buf.data());
    }
  if (in.has_q && in.geo.q_heads > 0 && in.geo.q_tokens * dim <= (int64_t(1) << 22)) {
    std::vector<float> q(static_cast<size_t>(std::max<int64_t>(in.geo.q_tokens * dim, 1)));
    d.read_q(0, in.geo.q_heads - 1, q.data());
    d.q_positions();
  }
  if (in.geo.tokens <= (int64_t(1) << 22)) {
    if (in.has_tokens) d.tokens();
    d.positions();
  }
}

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
    read_some(d);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
