// fuzz_import: bytes as a tensor file of `kvtool import` (.npy, .npz, safetensors; recognised by
// content) through TensorFile's header checks, then a bounded read of every listed tensor and the
// `query --vector` reader. The bytes go to a file in /dev/shm because the readers take a path.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/tensor_file.h"

namespace {

struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

// A read of the first and last few elements of each tensor; a refused dtype is a correct rejection.
void read_some(const kvtool::TensorFile& f) {
  const auto& ts = f.tensors();
  for (size_t i = 0; i < std::min<size_t>(ts.size(), 8); ++i) {
    const int64_t n = std::min<int64_t>(ts[i].elements, 1024);
    std::vector<float> x(static_cast<size_t>(std::max<int64_t>(n, 1)));
    std::vector<int64_t> y(x.size());
    for (int64_t first : {int64_t(0), ts[i].elements - n}) {
      try {
        f.read_f32(static_cast<int64_t>(i), first, n, x.data());
      } catch (const kvtool::Error& e) {
        if (e.reason() != kvtool::Reason::UNSUPPORTED_DTYPE) throw;
        try {
          f.read_i64(static_cast<int64_t>(i), first, n, y.data());
        } catch (const kvtool::Error& e2) {
          if (e2.reason() != kvtool::Reason::UNSUPPORTED_DTYPE) throw;
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempPath tmp("/dev/shm/kvtool-fuzz-import-" + std::to_string(getpid()) + ".bin");
  FILE* f = std::fopen(tmp.path.c_str(), "wb");
  if (!f) return 0;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!ok) return 0;
  try {
    kvtool::TensorFile t(tmp.path);
    read_some(t);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  try {
    kvtool::read_npy_vector(tmp.path, 8);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
