#include <cuda_runtime.h>

#include "kvtool/cuda_convert.h"
#include "kvtool/error.h"
#include "kvtool/half.h"

namespace kvtool::cuda {

namespace {

__global__ void to_f32_kernel(int kind, const void* in, float* out, size_t n) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (; i < n; i += stride) {
    if (kind == 0) {
      out[i] = static_cast<const float*>(in)[i];
    } else {
      uint16_t b = static_cast<const uint16_t*>(in)[i];
      out[i] = kind == 1 ? __uint_as_float(f16_bits_to_f32_bits(b)) : __uint_as_float(static_cast<uint32_t>(b) << 16);
    }
  }
}

void check(cudaError_t e, const char* what) {
  KVT_CHECK(e == cudaSuccess, "INTERNAL", "CUDA " << what << " failed: " << cudaGetErrorString(e));
}

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

bool convert_to_f32(DType t, const void* in, float* out, size_t n) {
  if (device_count() == 0) return false;
  size_t in_bytes = n * dtype_size(t);
  void* din = nullptr;
  float* dout = nullptr;
  check(cudaMalloc(&din, in_bytes ? in_bytes : 1), "cudaMalloc");
  cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&dout), n ? n * sizeof(float) : 1);
  if (e != cudaSuccess) {
    cudaFree(din);
    check(e, "cudaMalloc");
  }
  int kind = t == DType::f32 ? 0 : t == DType::f16 ? 1 : 2;
  e = cudaMemcpy(din, in, in_bytes, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && n > 0) {
    unsigned blocks = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 65535));
    to_f32_kernel<<<blocks, 256>>>(kind, din, dout, n);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) e = cudaMemcpy(out, dout, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(din);
  cudaFree(dout);
  check(e, "conversion");
  return true;
}

}  // namespace kvtool::cuda
