// The CUDA device tier of the runtime pool: cudaMalloc memory, cudaHostAlloc staging, async H2D
// copies on a stream with an event, and the scoring kernels of cuda_kernels.h (every kind's device path).
#pragma once
#include <memory>

#include "kvtool/device.h"

namespace kvtool::cuda {

// nullptr when no CUDA device is usable.
std::shared_ptr<DeviceBackend> make_backend();

}  // namespace kvtool::cuda
