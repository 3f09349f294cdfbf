// Device mirror of kvtool/half.h (lib/format): converts stored K/V rows (float16 / bfloat16 / float32) to float32 on
// the GPU. Tested element for element against the host conversion (tests/gpu).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kvtool/identity.h"

namespace kvtool::cuda {

// Number of usable CUDA devices; 0 when there is no GPU or no driver (never throws).
int device_count();
// Converts n stored elements to float32 through device memory. Returns false (and leaves `out`
// untouched) when no device is usable; throws Error(INTERNAL) on a CUDA failure mid-way.
bool convert_to_f32(DType t, const void* in, float* out, size_t n);

}  // namespace kvtool::cuda
