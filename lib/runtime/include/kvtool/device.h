// The device tier behind the runtime pool: memory, asynchronous host-to-device copies with a
// completion, and the device mirrors of the query arithmetic (kvtool/scoring.h). The CUDA
// implementation lives in cuda/ (kvtool::cuda::make_backend), which registers itself here
// (register_device_backend) where it is linked in; callers ask make_device_backend(). Tests use a host-memory backend
// whose completions they deliver by hand to inject races deterministically; it is test support
// (tests/support/emulated_device.h), not part of the library.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvtool {

// One asynchronous copy. ready() polls, wait() blocks until the copy landed (or failed: it throws
// Error INTERNAL after the copy's resources are safe to free).
class Transfer {
 public:
  virtual ~Transfer() = default;
  virtual bool ready() = 0;
  virtual void wait() = 0;
};

// Product codes resident in device memory (section images as stored, raw): m subspaces of k
// centroids each, and one code per (row, subspace).
struct ProductCodes {
  const void* centroids = nullptr;  // f32 [m, k, dsub]
  const void* codes = nullptr;      // u8 or u16 [n, m]
  int64_t m = 0, k = 0, dsub = 0, n = 0;
  int code_bytes = 1;
};

// The shape a device backend's batched PQ buffers are sized for (DeviceBackend::reserve_pq_batches).
// The most rows one query's device selection returns (engines select 2,048-4,096; FAISS's GPU
// selection stops at 2,048).
constexpr int64_t kMaxDeviceTop = 8192;

// Where a PQ batch that stays on the device writes its answers (device memory): query i's rows
// (+ row_base: absolute row ids) and scores at ids / scores + members[i] * stride, and members[i]
// is also its row of the queries (members == nullptr: i).
struct PqBatchPlacement {
  const int64_t* members = nullptr;
  int64_t row_base = 0;
  int64_t* ids = nullptr;
  float* scores = nullptr;
  int64_t stride = 0;
};

struct PqBatchLimits {
  int64_t max_queries = 0, max_rows = 0, max_subspaces = 0, max_centroids = 0, max_dim = 0, max_top = 0;
  // The larger of each field.
  PqBatchLimits merged(const PqBatchLimits& o) const {
    auto hi = [](int64_t a, int64_t b) { return a > b ? a : b; };
    return {hi(max_queries, o.max_queries),     hi(max_rows, o.max_rows), hi(max_subspaces, o.max_subspaces),
            hi(max_centroids, o.max_centroids), hi(max_dim, o.max_dim),   hi(max_top, o.max_top)};
  }
  // Every field at least o's.
  bool covers(const PqBatchLimits& o) const {
    return max_queries >= o.max_queries && max_rows >= o.max_rows && max_subspaces >= o.max_subspaces &&
           max_centroids >= o.max_centroids && max_dim >= o.max_dim && max_top >= o.max_top;
  }
  // What a batch of `count` queries of `part`, `top` rows each, needs.
  static PqBatchLimits of(const ProductCodes& part, int64_t count, int64_t top) {
    return {count, part.n, part.m, part.k, part.m * part.dsub, top < part.n ? top : part.n};
  }
  // The most queries of `part`, `top` rows each, one batch holds: 0 when they do not fit.
  int64_t capacity_for(const ProductCodes& part, int64_t top) const {
    return covers(of(part, 1, top)) ? max_queries : 0;
  }
};

// The shape a device backend's batched scoring buffers are sized for (reserve_score_batches): the
// batched mirrors of dot_scores, dot_scores_f64 and simhash_collisions, `max_queries` queries at a
// time, each scoring up to `max_rows` rows (centroids scored or rows counted) of `max_dim` floats;
// `max_hash_columns`: bits x tables of a SimHash batch (0 for dot products).
struct ScoreBatchLimits {
  int64_t max_queries = 0, max_dim = 0, max_rows = 0, max_hash_columns = 0;
  ScoreBatchLimits merged(const ScoreBatchLimits& o) const {
    auto hi = [](int64_t a, int64_t b) { return a > b ? a : b; };
    return {hi(max_queries, o.max_queries), hi(max_dim, o.max_dim), hi(max_rows, o.max_rows),
            hi(max_hash_columns, o.max_hash_columns)};
  }
  bool covers(const ScoreBatchLimits& o) const {
    return max_queries >= o.max_queries && max_dim >= o.max_dim && max_rows >= o.max_rows &&
           max_hash_columns >= o.max_hash_columns;
  }
  // The most queries of shape `one` (its max_queries ignored) one batch holds: 0 when it does not fit.
  int64_t capacity_for(ScoreBatchLimits one) const {
    one.max_queries = 1;
    return covers(one) ? max_queries : 0;
  }
};

// A decode step's PQ selection kept on the device (DeviceBackend::make_pq_step), for callers that
// capture it in a CUDA graph: made once with buffers of its own; enqueue() puts the whole step on
// `stream` without allocating, copying to or from the host, or synchronizing. q [queries, d] and
// ids / scores [queries, stride] are device memory at the caller's fixed addresses.
class DeviceStep {
 public:
  virtual ~DeviceStep() = default;
  virtual void enqueue(const float* q, int64_t* ids, float* scores, void* stream) = 0;
};

// One part's queries in a device step: rows `members` of the step's q (and of its answers) are
// scored against `part`; their row ids start at row_base (the part's first indexed row).
struct PqStepGroup {
  ProductCodes part;
  std::vector<int64_t> members;
  int64_t row_base = 0;
};

// The device operations are scoring primitives (kvtool/scoring.h), not kinds: a kind's
// PartSelector::select_device composes them (pq: product_code_top_k; clusterkv: dot_scores;
// squeeze: dot_scores_f64; lsh: simhash_collisions), so a new kind that reuses them touches no
// file here; one that needs a new primitive adds it here, in cuda/ and in the emulated backend.
class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string name() const = 0;
  // Page-locked host memory when the device wants it for async copies (else aligned memory).
  virtual void* host_alloc(size_t bytes) = 0;
  virtual void host_free(void* p) = 0;
  // nullptr when the device cannot supply the bytes (the pool's budget is checked before).
  virtual void* device_alloc(size_t bytes) = 0;
  virtual void device_free(void* p) = 0;
  virtual std::unique_ptr<Transfer> copy_to_device(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;  // synchronous
  // PQ lookup-table scoring and top-k of one query on the device: the same ids and scores as
  // scoring::pq_lut + pq_scores + top_k on the host.
  virtual void product_code_top_k(const ProductCodes& part, const float* q, int64_t k, std::vector<int64_t>& ids,
                                  std::vector<float>& scores) = 0;
  // scoring::dot_scores over `count` device-resident centroids [count, d] (clusterkv ranking).
  virtual void dot_scores(const float* centroids, int64_t count, int64_t d, const float* q, float* out) = 0;
  // scoring::dot_scores_f64 over device-resident centroids; `rows` (host array or nullptr) picks
  // which (squeeze's coarse pass, then the fine pass over surviving children).
  virtual void dot_scores_f64(const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                              const float* q, double* out) = 0;
  // scoring::simhash_codes + collision_counts on device-resident projections [d, bits*tables],
  // offsets [tables, 2^bits + 1] and ids [tables, n] (u16 or u32: id_bytes).
  virtual void simhash_collisions(const float* w, const uint32_t* offsets, const void* ids, int id_bytes, int64_t d,
                                  int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q,
                                  uint32_t* codes, uint16_t* count) = 0;

  // Batched PQ, a decode step's layer at a time (docs/runtime.md). reserve_pq_batches sizes the
  // backend's batch buffers once, for the largest batch and part (the pool calls it at publish);
  // product_code_top_k_batch then answers `count` queries q [count, m * dsub] of one part: query
  // i's min(top, n) best rows (within the part; score descending, row ascending, as
  // product_code_top_k) and their scores at ids / scores + i * min(top, n), on `stream` (the
  // caller's cudaStream_t for the CUDA backend; nullptr: its default), allocating nothing. It
  // returns false, writing nothing, when the batch is outside the reserved shape or the backend has
  // no batched path: the caller then answers query by query. Batches may come from several threads.
  // The buffers are the backend's, grown to the largest shape reserved and kept until it is
  // destroyed, outside the pool's device budget (CUDA: 12 B per row per query, about 25 MB for 64
  // queries of 32K rows). pq_batch_capacity: the most queries one batch of this part and top can
  // hold (0: none), so that callers split larger groups.
  // Called once before each pool batch on the device tier (Lease::query_batch), with its stream:
  // refuses a stream that is being captured into a graph (USAGE: the pool's call waits for its
  // answers) and waits for the work already queued on it, so that the batch's queries answered one
  // by one (on the device's own stream) come after that work as the batched ones do.
  virtual void prepare_stream(void* /*stream*/) {}
  virtual void reserve_pq_batches(const PqBatchLimits&) {}
  virtual int64_t pq_batch_capacity(const ProductCodes&, int64_t /*top*/) { return 0; }
  virtual bool product_code_top_k_batch(const ProductCodes&, const float* /*q*/, int64_t /*count*/, int64_t /*top*/,
                                        void* /*stream*/, int64_t* /*ids*/, float* /*scores*/) {
    return false;
  }

  // Batched scoring primitives for the kinds whose selection finishes on the host (clusterkv,
  // squeeze, lsh): `count` queries q [count, d] at once, on `stream`, allocating nothing once
  // reserve_score_batches has sized the buffers (the pool calls it at publish, like
  // reserve_pq_batches). Each returns false, writing nothing, when the batch is outside the reserved
  // shape or the backend has no batched path; score_batch_capacity: the most queries one batch of
  // shape `one` (its max_queries ignored) can hold (0: none). The results equal the single-query
  // primitives' bit for bit:
  //   dot_scores_batch:       out [count, rows] (float), query i's dot_scores at out + i * rows;
  //   dot_scores_f64_batch:   out [count, rows] (double), every row (rows == nullptr);
  //   simhash_collisions_batch: query i's collision counts of the n rows at counts + i * stride.
  // The buffers are the backend's, like the PQ batch buffers.
  virtual void reserve_score_batches(const ScoreBatchLimits&) {}
  // A device step over `groups`: each member's min(top, part.n) best rows (+ row_base) and scores,
  // in product_code_top_k's order, at ids / scores + member * stride; top <= kMaxDeviceTop.
  // nullptr when the backend has no device-resident path. Throws Error INTERNAL on a device failure.
  virtual std::unique_ptr<DeviceStep> make_pq_step(const std::vector<PqStepGroup>& /*groups*/, int64_t /*top*/,
                                                   int64_t /*stride*/) {
    return nullptr;
  }
  // Bytes the batch buffers hold now (device and page-locked host memory; PoolStats shows them).
  virtual int64_t batch_buffer_bytes() { return 0; }
  virtual int64_t score_batch_capacity(const ScoreBatchLimits& /*one*/) { return 0; }
  virtual bool dot_scores_batch(const float* /*centroids*/, int64_t /*rows*/, int64_t /*d*/, const float* /*q*/,
                                int64_t /*count*/, void* /*stream*/, float* /*out*/) {
    return false;
  }
  virtual bool dot_scores_f64_batch(const float* /*centroids*/, int64_t /*rows*/, int64_t /*d*/, double /*scale*/,
                                    const float* /*q*/, int64_t /*count*/, void* /*stream*/, double* /*out*/) {
    return false;
  }
  virtual bool simhash_collisions_batch(const float* /*w*/, const uint32_t* /*offsets*/, const void* /*ids*/,
                                        int /*id_bytes*/, int64_t /*d*/, int64_t /*bits*/, int64_t /*tables*/,
                                        int64_t /*n*/, int64_t /*base*/, const float* /*q*/, int64_t /*count*/,
                                        void* /*stream*/, uint16_t* /*counts*/, int64_t /*stride*/) {
    return false;
  }
};

// The device tier's registry. An implementation (cuda/src/backend.cu) registers its factory when it
// is linked into the program or library, so that the runtime and the tools need not know whether a
// device tier was built: make_device_backend() is nullptr without one, as without a usable device.
using DeviceBackendFactory = std::shared_ptr<DeviceBackend> (*)();
void register_device_backend(DeviceBackendFactory factory);  // the last registration wins
bool device_backend_registered();                            // a device tier was linked in
// A new backend from the registered factory; nullptr when none is registered or no device is usable.
std::shared_ptr<DeviceBackend> make_device_backend();

}  // namespace kvtool
