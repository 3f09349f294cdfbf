#include <cuda_runtime.h>

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <string>

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
  // One batch workspace (cuda_kernels.h), grown at publish to the largest shape reserved; batches
  // take turns on it. The batch is synchronous for the pool: its stream is synchronized before the
  // answers are read (the kernel-level API leaves that to the caller, for CUDA graphs).
  void reserve_pq_batches(const PqBatchLimits& l) override {
    std::lock_guard<std::mutex> g(batch_mu_);
    const PqBatchLimits want = shape_.merged(l);
    if (ws_ && shape_.covers(want)) return;
    try {
      PqBatchWorkspace* next = pq_batch_workspace_create(want);
      pq_batch_workspace_destroy(ws_);
      ws_ = next;
      shape_ = want;
    } catch (const std::exception&) {
      // No batch buffers: batches then go query by query (pq_batch_capacity is 0).
    }
  }
  int64_t pq_batch_capacity(const ProductCodes& p, int64_t top) override {
    std::lock_guard<std::mutex> g(batch_mu_);
    return ws_ && shape_.covers(PqBatchLimits::of(p, 1, top)) ? shape_.max_queries : 0;
  }
  bool product_code_top_k_batch(const ProductCodes& p, const float* q, int64_t count, int64_t top, void* stream,
                                int64_t* ids, float* scores) override {
    std::lock_guard<std::mutex> g(batch_mu_);
    const int64_t per = std::min(top, p.n), d = p.m * p.dsub;
    if (!ws_ || !shape_.covers(PqBatchLimits::of(p, count, top))) return false;
    // The pool's batch is synchronous: on a stream being captured into a graph its synchronization
    // would break the capture (capture the kernel-level API of cuda_kernels.h instead).
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    KVT_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capturing) == cudaSuccess &&
                  capturing == cudaStreamCaptureStatusNone,
              USAGE,
              "QueryBatch::stream is being captured: the pool's batch synchronizes it; capture "
              "pq_top_k_batch_enqueue (kvtool/cuda_kernels.h) instead");
    std::copy(q, q + count * d, pq_batch_queries(ws_));
    run([&] {
      pq_top_k_batch_enqueue(ws_, static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k, p.dsub, p.n,
                             count, per, stream);
      check_stream(static_cast<cudaStream_t>(stream));
      return true;
    });
    std::copy(pq_batch_ids(ws_), pq_batch_ids(ws_) + count * per, ids);
    std::copy(pq_batch_scores(ws_), pq_batch_scores(ws_) + count * per, scores);
    return true;
  }
  ~CudaBackend() override { pq_batch_workspace_destroy(ws_); }
  void product_code_top_k(const ProductCodes& p, const float* q, int64_t k, std::vector<int64_t>& ids,
                          std::vector<float>& scores) override {
    run([&] {
      return pq_top_k_device(static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k, p.dsub, p.n, q, k,
                             ids, scores);
    });
  }

 private:
  static void check_stream(cudaStream_t st) {
    const cudaError_t e = cudaStreamSynchronize(st);
    if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA batch failed: ") + cudaGetErrorString(e));
  }
  std::mutex batch_mu_;
  PqBatchLimits shape_;
  PqBatchWorkspace* ws_ = nullptr;
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
