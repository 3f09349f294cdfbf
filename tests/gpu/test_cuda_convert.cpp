// Device conversion kernels against the host conversion, bit for bit, on every half / bfloat16 value.
// Exit 0 with a note when no GPU is present (the CPU CI machine); KVTOOL_REQUIRE_GPU=1 makes that
// a failure (tests/gpu/run.sh sets it on the device machine).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kvtool/cuda_convert.h"
#include "kvtool/half.h"

using namespace kvtool;

int main() {
  int n = cuda::device_count();
  if (n == 0) {
    bool require = std::getenv("KVTOOL_REQUIRE_GPU") && std::string(std::getenv("KVTOOL_REQUIRE_GPU")) == "1";
    std::printf("no CUDA device: device comparison skipped%s\n", require ? " (but KVTOOL_REQUIRE_GPU=1)" : "");
    return require ? 1 : 0;
  }
  std::vector<uint16_t> all(65536);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> dev(all.size());
  int bad = 0;
  for (DType t : {DType::f16, DType::bf16}) {
    if (!cuda::convert_to_f32(t, all.data(), dev.data(), all.size())) return 1;
    for (size_t i = 0; i < all.size(); ++i) {
      float h = t == DType::f16 ? f16_to_f32(all[i]) : bf16_to_f32(all[i]);
      if (std::memcmp(&h, &dev[i], 4) != 0 && ++bad < 10)
        std::printf("mismatch %s 0x%04zx: host %g device %g\n", dtype_name(t), i, h, dev[i]);
    }
  }
  std::vector<float> f(1 << 20), g(f.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::sin(static_cast<float>(i));
  cuda::convert_to_f32(DType::f32, f.data(), g.data(), f.size());
  if (f != g) ++bad;
  std::printf("%d CUDA device(s); conversion kernels %s the host path\n", n, bad ? "DIFFER FROM" : "match");
  return bad ? 1 : 0;
}
