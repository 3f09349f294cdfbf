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

// A decode step's PQ selection on the device (DeviceBackend::make_pq_step): a workspace of its own
// (a graph replaying the step must not share intermediates with the pool's batches) and the groups'
// member lists in device memory, made once; enqueue() only launches kernels.
class CudaPqStep : public DeviceStep {
 public:
  CudaPqStep(int device, const std::vector<PqStepGroup>& groups, int64_t top, int64_t stride)
      : device_(device), groups_(groups), top_(top), stride_(stride) {
    PqBatchLimits shape;
    std::vector<int64_t> all;
    for (const PqStepGroup& g : groups) {
      shape = shape.merged(PqBatchLimits::of(g.part, static_cast<int64_t>(g.members.size()), top));
      offsets_.push_back(static_cast<int64_t>(all.size()));
      all.insert(all.end(), g.members.begin(), g.members.end());
    }
    ws_ = pq_batch_workspace_create(shape);
    if (!ws_) throw std::runtime_error("no usable CUDA device");
    members_ = static_cast<int64_t*>(cuda::device_alloc(all.size() * sizeof(int64_t)));
    // A pageable copy may return before it lands, and the caller's stream need not wait for it.
    if (!members_ ||
        cudaMemcpy(members_, all.data(), all.size() * sizeof(int64_t), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess) {
      cudaGetLastError();
      release();
      throw std::runtime_error("CUDA: the device step's member lists could not be placed in device memory");
    }
  }
  ~CudaPqStep() override {
    if (cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
    release();
  }
  // Launches on the step's device and leaves the caller's current device as it was.
  void enqueue(const float* q, int64_t* ids, float* scores, void* stream) override {
    int caller = device_;
    if (cudaGetDevice(&caller) != cudaSuccess || cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();
    struct Restore {
      int device;
      ~Restore() {
        if (cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
      }
    } restore{caller};
    try {
      for (size_t i = 0; i < groups_.size(); ++i) {
        const PqStepGroup& g = groups_[i];
        const ProductCodes& p = g.part;
        pq_top_k_batch_enqueue_on_device(ws_, static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k,
                                         p.dsub, p.n, static_cast<int64_t>(g.members.size()), top_, q,
                                         {members_ + offsets_[i], g.row_base, ids, scores, stride_}, stream);
      }
    } catch (const std::runtime_error& e) {
      KVT_THROW(INTERNAL, e.what());
    }
  }

 private:
  void release() {
    pq_batch_workspace_destroy(ws_);
    ws_ = nullptr;
    cuda::device_free(members_);
    members_ = nullptr;
  }
  int device_;
  std::vector<PqStepGroup> groups_;
  int64_t top_, stride_;
  std::vector<int64_t> offsets_;  // each group's first entry in members_
  PqBatchWorkspace* ws_ = nullptr;
  int64_t* members_ = nullptr;
};

// Every entry point first makes the backend's device current on the calling thread: the pool calls
// it from its own worker threads too, whose current device is otherwise 0.
class CudaBackend : public DeviceBackend {
 public:
  CudaBackend() {
    if (cudaGetDevice(&device_) != cudaSuccess) cudaGetLastError();
  }
  std::string name() const override { return "cuda"; }
  void* host_alloc(size_t bytes) override {
    bind();
    return pinned_alloc(bytes);
  }
  void host_free(void* p) override {
    bind();
    pinned_free(p);
  }
  void* device_alloc(size_t bytes) override {
    bind();
    return cuda::device_alloc(bytes);
  }
  void device_free(void* p) override {
    bind();
    cuda::device_free(p);
  }
  std::unique_ptr<Transfer> copy_to_device(void* dst, const void* src, size_t bytes) override {
    bind();
    try {
      return std::make_unique<CudaTransfer>(copy_async(dst, src, bytes));
    } catch (const std::runtime_error& e) {
      KVT_THROW(INTERNAL, e.what());
    }
  }
  void copy_to_host(void* dst, const void* src, size_t bytes) override {
    bind();
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
    grow(shape_, ws_, l, pq_batch_workspace_create, pq_batch_workspace_destroy);
  }
  int64_t pq_batch_capacity(const ProductCodes& p, int64_t top) override {
    std::lock_guard<std::mutex> g(batch_mu_);
    return ws_ ? shape_.capacity_for(p, top) : 0;
  }
  bool product_code_top_k_batch(const ProductCodes& p, const float* q, int64_t count, int64_t top, void* stream,
                                int64_t* ids, float* scores) override {
    std::lock_guard<std::mutex> g(batch_mu_);
    const int64_t per = std::min(top, p.n), d = p.m * p.dsub;
    if (!ws_ || !shape_.covers(PqBatchLimits::of(p, count, top))) return false;
    refuse_capture(stream);
    std::copy(q, q + count * d, pq_batch_queries(ws_));
    run_batch(stream, [&] {
      pq_top_k_batch_enqueue(ws_, static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k, p.dsub, p.n,
                             count, per, stream);
    });
    std::copy(pq_batch_ids(ws_), pq_batch_ids(ws_) + count * per, ids);
    std::copy(pq_batch_scores(ws_), pq_batch_scores(ws_) + count * per, scores);
    return true;
  }
  std::unique_ptr<DeviceStep> make_pq_step(const std::vector<PqStepGroup>& groups, int64_t top,
                                           int64_t stride) override {
    bind();
    try {
      return std::make_unique<CudaPqStep>(device_, groups, top, stride);
    } catch (const std::runtime_error& e) {
      KVT_THROW(INTERNAL, e.what());
    }
  }
  void prepare_stream(void* stream) override {
    refuse_capture(stream);
    run_batch(stream, [] {});  // waits for the caller's queued work
  }
  // The scoring primitives' batches: one more workspace, the same rules.
  void reserve_score_batches(const ScoreBatchLimits& l) override {
    grow(score_shape_, score_ws_, l, score_batch_workspace_create, score_batch_workspace_destroy);
  }
  int64_t batch_buffer_bytes() override {
    std::lock_guard<std::mutex> g(batch_mu_);
    return static_cast<int64_t>((ws_ ? pq_batch_workspace_bytes(shape_) : 0) +
                                (score_ws_ ? score_batch_workspace_bytes(score_shape_) : 0));
  }
  int64_t score_batch_capacity(const ScoreBatchLimits& one) override {
    std::lock_guard<std::mutex> g(batch_mu_);
    return score_ws_ ? score_shape_.capacity_for(one) : 0;
  }
  bool dot_scores_batch(const float* centroids, int64_t rows, int64_t d, const float* q, int64_t count, void* stream,
                        float* out) override {
    return score_batch<float>({count, d, rows, 0}, q, stream, out, rows, rows,
                              [&] { dot_scores_batch_enqueue(score_ws_, centroids, rows, d, count, stream); });
  }
  bool dot_scores_f64_batch(const float* centroids, int64_t rows, int64_t d, double scale, const float* q,
                            int64_t count, void* stream, double* out) override {
    return score_batch<double>({count, d, rows, 0}, q, stream, out, rows, rows, [&] {
      dot_scores_f64_batch_enqueue(score_ws_, centroids, rows, d, scale, count, stream);
    });
  }
  bool simhash_collisions_batch(const float* w, const uint32_t* offsets, const void* ids, int id_bytes, int64_t d,
                                int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, int64_t count,
                                void* stream, uint16_t* counts, int64_t stride) override {
    return score_batch<uint16_t>({count, d, n, bits * tables}, q, stream, counts, n, stride, [&] {
      simhash_collisions_batch_enqueue(score_ws_, w, offsets, ids, id_bytes, d, bits, tables, n, base, count, stream);
    });
  }
  ~CudaBackend() override {
    pq_batch_workspace_destroy(ws_);
    score_batch_workspace_destroy(score_ws_);
  }
  void product_code_top_k(const ProductCodes& p, const float* q, int64_t k, std::vector<int64_t>& ids,
                          std::vector<float>& scores) override {
    run([&] {
      return pq_top_k_device(static_cast<const float*>(p.centroids), p.codes, p.code_bytes, p.m, p.k, p.dsub, p.n, q, k,
                             ids, scores);
    });
  }

 private:
  void bind() const {
    if (cudaSetDevice(device_) != cudaSuccess) cudaGetLastError();  // a lost device fails the call itself
  }
  // Enqueues a batch on `stream` and waits for it. On a failure it still waits for whatever was
  // queued, so that no copy or kernel of the batch is left reading buffers the next batch reuses.
  template <typename Enqueue>
  void run_batch(void* stream, Enqueue&& enqueue) {
    const auto st = static_cast<cudaStream_t>(stream);
    run([&] {
      try {
        enqueue();
      } catch (...) {
        cudaStreamSynchronize(st);
        cudaGetLastError();
        throw;
      }
      const cudaError_t e = cudaStreamSynchronize(st);
      if (e != cudaSuccess) {
        cudaGetLastError();
        throw std::runtime_error(std::string("CUDA batch failed: ") + cudaGetErrorString(e));
      }
      return true;
    });
  }
  // The pool's batch is synchronous: on a stream being captured into a graph its synchronization
  // would break the capture (capture the kernel-level API of cuda_kernels.h instead).
  void refuse_capture(void* stream) {
    bind();
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    const bool asked = cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capturing) == cudaSuccess;
    if (!asked) cudaGetLastError();  // not left behind for the next call on this thread
    KVT_CHECK(asked && capturing == cudaStreamCaptureStatusNone, USAGE,
              "QueryBatch::stream is being captured: the pool's batch synchronizes it; capture the "
              "batch enqueue functions of kvtool/cuda_kernels.h instead");
  }
  // Grows a workspace to the larger of its shape and `l`. When the new one cannot be made the old
  // one stays (batches outside it go query by query; with none, the capacity is 0).
  template <typename Shape, typename Workspace, typename Create, typename Destroy>
  void grow(Shape& shape, Workspace*& ws, const Shape& l, Create create, Destroy destroy) {
    std::lock_guard<std::mutex> g(batch_mu_);
    bind();
    const Shape want = shape.merged(l);
    if (ws && shape.covers(want)) return;
    try {
      Workspace* next = create(want);
      destroy(ws);
      ws = next;
      shape = want;
    } catch (const std::exception&) {}
  }
  // One scoring batch: `need` against the workspace, the queries [count, d] to its page-locked
  // buffer, enqueue() on the stream, a synchronization, then `per` results of each query to
  // out + i * stride.
  template <typename T, typename Enqueue>
  bool score_batch(const ScoreBatchLimits& need, const float* q, void* stream, T* out, int64_t per, int64_t stride,
                   Enqueue&& enqueue) {
    std::lock_guard<std::mutex> g(batch_mu_);
    if (!score_ws_ || !score_shape_.covers(need)) return false;
    refuse_capture(stream);
    std::copy(q, q + need.max_queries * need.max_dim, score_batch_queries(score_ws_));
    run_batch(stream, enqueue);
    const T* r = static_cast<const T*>(score_batch_results(score_ws_));
    for (int64_t i = 0; i < need.max_queries; ++i) std::copy(r + i * per, r + (i + 1) * per, out + i * stride);
    return true;
  }
  std::mutex batch_mu_;  // guards both workspaces
  PqBatchLimits shape_;
  PqBatchWorkspace* ws_ = nullptr;
  ScoreBatchLimits score_shape_;
  ScoreBatchWorkspace* score_ws_ = nullptr;
  int device_ = 0;  // the device current when the backend was made
  // Kernel failures become Error INTERNAL; a device gone since the pool started, DEVICE_UNAVAILABLE.
  template <typename F>
  void run(F&& f) {
    bind();
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

// The CUDA tier registers itself with the runtime wherever this file is linked in (kvtool/device.h:
// kvtool load, the C API's pool, the GPU tests). Users of the static kvtool_cuda link with
// --undefined=kvtool_cuda_registered (cuda/CMakeLists.txt): without a reference the linker would
// leave this archive member, and so the registration, out.
extern "C" const bool kvtool_cuda_registered = (kvtool::register_device_backend(&kvtool::cuda::make_backend), true);
