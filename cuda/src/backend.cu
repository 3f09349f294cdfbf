#include <stdexcept>

#include "kvtool/cuda_backend.h"
#include "kvtool/cuda_kernels.h"
#include "kvtool/error.h"

namespace kvtool::cuda {

namespace {

class CudaTransfer : public Transfer {
 public:
  explicit CudaTransfer(CopyHandle* h) : h_(h) {}
  ~CudaTransfer() override {
    try {
      copy_wait(h_);  // never release a stream with a copy still reading or writing
    } catch (...) {
    }
    copy_release(h_);
  }
  bool ready() override { return copy_ready(h_); }
  void wait() override {
    try {
      copy_wait(h_);
    } catch (const std::runtime_error& e) {
      KVT_THROW("INTERNAL", e.what());
    }
  }

 private:
  CopyHandle* h_;
};

class CudaBackend : public DeviceBackend {
 public:
  std::string name() const override { return "cuda"; }
  void* host_alloc(size_t bytes) override { return pinned_alloc(bytes); }
  void host_free(void* p) override { pinned_free(p); }
  void* device_alloc(size_t bytes) override { return cuda::device_alloc(bytes); }
  void device_free(void* p) override { cuda::device_free(p); }
  std::unique_ptr<Transfer> copy_to_device(void* dst, const void* src, size_t bytes) override {
    try {
      return std::make_unique<CudaTransfer>(copy_async(dst, src, bytes));
    } catch (const std::runtime_error& e) {
      KVT_THROW("INTERNAL", e.what());
    }
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    try {
      cuda::copy_to_host(dst, src, bytes);
    } catch (const std::runtime_error& e) {
      KVT_THROW("INTERNAL", e.what());
    }
  }
  void pq_top_k(const PqDevicePart& p, const float* q, int64_t k, std::vector<int64_t>& ids,
                std::vector<float>& scores) override {
    try {
      KVT_CHECK(pq_top_k_device(static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k, p.dsub, p.n, q, k,
                                ids, scores),
                "DEVICE_UNAVAILABLE", "the CUDA device is no longer usable");
    } catch (const std::runtime_error& e) {
      KVT_THROW("INTERNAL", e.what());
    }
  }
};

}  // namespace

std::shared_ptr<DeviceBackend> make_backend() {
  if (device_count() == 0) return nullptr;
  return std::make_shared<CudaBackend>();
}

}  // namespace kvtool::cuda
