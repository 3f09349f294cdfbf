#include "kvtool/cuda_convert.h"
#include "kvtool/cuda_kernels.h"
#include "kvtool/error.h"

namespace kvtool::cuda {

bool convert_to_f32(DType t, const void* in, float* out, size_t n) {
  try {
    return convert_to_f32(t == DType::f32 ? 0 : t == DType::f16 ? 1 : 2, in, out, n);
  } catch (const std::exception& e) {
    KVT_THROW(INTERNAL, e.what());
  }
}

}  // namespace kvtool::cuda
