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
    } catch (...) {}
    copy_release(h_);
  }
  bool ready() override { return copy_ready(h_); }
  void wait() override {
    try {
      copy_wait(h_);
    } catch (const std::runtime_error& e) {
      KVT_THROW(INTERNAL, e.what());
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
      KVT_THROW(INTERNAL, e.what());
    }
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    try {
      cuda::copy_to_host(dst, src, bytes);
    } catch (const std::runtime_error& e) {
      KVT_THROW(INTERNAL, e.what());
    }
  }
  void dot_scores(const float* centroids, int64_t count, int64_t d, const float* q, float* out) override {
    run([&] { return dot_scores_device(centroids, count, d, q, out); });
  }
  void dot_scores_f64(const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                      const float* q, double* out) override {
    run([&] { return dot_scores_f64_device(centroids, rows, count, d, scale, q, out); });
  }
  void simhash_collisions(const float* w, const uint32_t* offsets, const void* ids, int id_bytes, int64_t d,
                          int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, uint32_t* codes,
                          uint16_t* count) override {
    run([&] {
      return simhash_collisions_device(w, offsets, ids, id_bytes, d, bits, tables, n, base, q, codes, count);
    });
  }
  void product_code_top_k(const ProductCodes& p, const float* q, int64_t k, std::vector<int64_t>& ids,
                          std::vector<float>& scores) override {
    run([&] {
      return pq_top_k_device(static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k, p.dsub, p.n, q, k,
                             ids, scores);
    });
  }

 private:
  // Kernel failures become Error INTERNAL; a device gone since the pool started, DEVICE_UNAVAILABLE.
  template <typename F>
  static void run(F&& f) {
    bool ok = false;
    try {
      ok = f();
    } catch (const std::runtime_error& e) {
      KVT_THROW(INTERNAL, e.what());
    }
    KVT_CHECK(ok, DEVICE_UNAVAILABLE, "the CUDA device is no longer usable");
  }
};

}  // namespace

std::shared_ptr<DeviceBackend> make_backend() {
  if (device_count() == 0) return nullptr;
  return std::make_shared<CudaBackend>();
}

}  // namespace kvtool::cuda
