// CUDA mirrors of kvtool/scoring.h (lib/runtime) and the half conversions of kvtool/half.h. This
// header and cuda/src/kernels.cu depend on the CUDA runtime, the C++ standard library and the
// dependency-free kvtool/half.h, kvtool/scoring.h and kvtool/device.h only, so
// tests/gpu can build them standalone on a machine that has nothing but the CUDA toolkit.
//
// Every function returns false when no CUDA device is usable and throws std::runtime_error on a
// CUDA failure. Arithmetic is the host's, operation for operation, with no fused multiply-add
// (__fmul_rn/__fadd_rn), so scores are bit-identical and ties break by lower index on both paths.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvtool/device.h"  // PqBatchLimits, kMaxDeviceTop

namespace kvtool::cuda {

int device_count();  // 0 without a GPU or driver (never throws)

// Stored 16-bit halves (kind 1 = IEEE f16, 2 = bfloat16) or f32 (kind 0) to float32.
bool convert_to_f32(int kind, const void* in, float* out, size_t n);

// PQ scoring of one query against n coded rows whose centroids and codes are already in device
// memory: lookup table, scores, then the top k (score descending, index ascending). `ids` and
// `scores` receive the k best (host vectors); `all_scores` (optional) every row's score.
bool pq_top_k_device(const float* d_centroids, const void* d_codes, int code_bytes, int64_t m, int64_t k, int64_t dsub,
                     int64_t n, const float* q, int64_t top, std::vector<int64_t>& ids, std::vector<float>& scores,
                     std::vector<float>* all_scores = nullptr);
// The same from host arrays (copies them to the device first).
bool pq_top_k(const float* centroids, const void* codes, int code_bytes, int64_t m, int64_t k, int64_t dsub, int64_t n,
              const float* q, int64_t top, std::vector<int64_t>& ids, std::vector<float>& scores,
              std::vector<float>* all_scores = nullptr);

// out[c] = sum_t q[t] * centroids[c * d + t] in float (clusterkv's ranking scores).
bool dot_scores(const float* q, const float* centroids, int64_t count, int64_t d, float* out);
// out[i] = scale * sum_t double(q[t]) * centroids[rows[i] * d + t]   (rows == nullptr: row i;
// squeeze's coarse pass over every group, then its fine pass over the surviving children)
bool dot_scores_f64(const float* q, const float* centroids, int64_t centroid_rows, const int64_t* rows, int64_t count,
                    int64_t d, double scale, double* out);

// SimHash codes of q for every table, then collision counts of every indexed row (CSR tables).
bool simhash_collisions(const float* q, int64_t d, const float* w, int64_t bits, int64_t tables,
                        const uint32_t* offsets, const uint32_t* ids, int64_t n, int64_t base, uint32_t* codes,
                        uint16_t* count);

// The same three with the centroids / tables already in device memory (the pool's device tier);
// q, rows and the outputs are host arrays. lsh ids may be u16 or u32 (id_bytes 2 or 4).
bool dot_scores_device(const float* d_centroids, int64_t count, int64_t d, const float* q, float* out);
bool dot_scores_f64_device(const float* d_centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                           const float* q, double* out);
bool simhash_collisions_device(const float* d_w, const uint32_t* d_offsets, const void* d_ids, int id_bytes, int64_t d,
                               int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, uint32_t* codes,
                               uint16_t* count);

// Device memory and copies for the pool's device tier.
void* device_alloc(size_t bytes);  // nullptr when the device cannot supply the bytes
void device_free(void* p);
void* pinned_alloc(size_t bytes);  // nullptr on failure
void pinned_free(void* p);
// Asynchronous H2D copy on a stream with an event recorded after it; poll/wait the handle.
struct CopyHandle;
CopyHandle* copy_async(void* dst, const void* src, size_t bytes);
bool copy_ready(CopyHandle* h);
void copy_wait(CopyHandle* h);  // throws on a failed copy
void copy_release(CopyHandle* h);
void copy_to_host(void* dst, const void* src, size_t bytes);

}  // namespace kvtool::cuda

namespace kvtool::cuda {

// ---- Batched PQ queries for a decode step (docs/runtime.md) ------------------------------------
// Every buffer a batch touches is allocated once, with the workspace (sized for the largest batch
// and part it will see, as a pool would size it at publish); a batch allocates nothing, runs on the
// caller's stream and never synchronizes the host, so a decode step can be captured in a CUDA graph
// and replayed: the query inputs and the answers live at fixed page-locked host addresses.
// Selection is exact (score descending, row ascending: the host's top_k order) for up to
// kMaxBatchTop rows per query, without thrust or any temporary allocation: a block-wide radix
// select of the k-th smallest (score, row) key, then a bitonic sort of the k kept keys in shared memory.
constexpr int64_t kMaxBatchTop = kMaxDeviceTop;  // kvtool/device.h

using PqBatchShape = PqBatchLimits;  // max_top at most kMaxBatchTop, max_queries at most 65535
struct PqBatchWorkspace;
// nullptr when no device is usable; throws std::runtime_error on a CUDA failure or a bad shape.
PqBatchWorkspace* pq_batch_workspace_create(const PqBatchShape& shape);
void pq_batch_workspace_destroy(PqBatchWorkspace* ws);
size_t pq_batch_workspace_bytes(const PqBatchShape& shape);  // device + page-locked host
// The fixed host addresses: q (query i at i * m * dsub, room for max_queries × max_dim), and the
// last batch's answers, ids and scores [count, min(top, n)] row-major (row ids within the part).
float* pq_batch_queries(PqBatchWorkspace* ws);
const int64_t* pq_batch_ids(const PqBatchWorkspace* ws);
const float* pq_batch_scores(const PqBatchWorkspace* ws);
// Enqueues `count` queries against one part's device-resident centroids [m, k, dsub] and codes
// [n, m] (u8 or u16: code_bytes) on `stream` (a cudaStream_t; nullptr: the legacy default stream):
// the copy of the queries in, lookup tables, scores, selection of the top min(top, n) per query,
// the copy of the answers out. The answers are in place once the stream reaches this point.
// Throws std::runtime_error when the batch exceeds the workspace's shape or a launch fails.
void pq_top_k_batch_enqueue(PqBatchWorkspace* ws, const float* d_centroids, const void* d_codes, int code_bytes,
                            int64_t m, int64_t k, int64_t dsub, int64_t n, int64_t count, int64_t top, void* stream);
// The same selection with the queries and the answers in device memory, for a decode step that
// stays on the device: batch query i is row members[i] of d_q (members == nullptr: row i), and its
// min(top, n) rows (+ row_base) and scores go to out.ids / out.scores + members[i] * out.stride
// (PqBatchPlacement, kvtool/device.h). No copy to or from the host; the workspace's own buffers
// hold only the intermediates.
void pq_top_k_batch_enqueue_on_device(PqBatchWorkspace* ws, const float* d_centroids, const void* d_codes,
                                      int code_bytes, int64_t m, int64_t k, int64_t dsub, int64_t n, int64_t count,
                                      int64_t top, const float* d_q, const PqBatchPlacement& out, void* stream);

// ---- Batched scoring primitives (the device tier of clusterkv, squeeze and lsh) ------------------
// The batched mirrors of dot_scores, dot_scores_f64 (every row) and simhash_collisions, with the
// workspace's buffers allocated once, at fixed page-locked host addresses, and everything enqueued
// on the caller's stream without a host synchronization (as the PQ batch above). The selection of
// these kinds finishes on the host, which reads the results once the stream has reached them.
using ScoreBatchShape = ScoreBatchLimits;  // kvtool/device.h; max_queries at most 65535
struct ScoreBatchWorkspace;
// nullptr when no device is usable; throws std::runtime_error on a CUDA failure or a bad shape.
ScoreBatchWorkspace* score_batch_workspace_create(const ScoreBatchShape& shape);
void score_batch_workspace_destroy(ScoreBatchWorkspace* ws);
size_t score_batch_workspace_bytes(const ScoreBatchShape& shape);  // device + page-locked host
// Query i's vector at i * d (room for max_queries × max_dim); the last batch's results, row-major
// [count, rows]: float (dot_scores), double (dot_scores_f64) or u16 collision counts [count, n].
float* score_batch_queries(ScoreBatchWorkspace* ws);
const void* score_batch_results(const ScoreBatchWorkspace* ws);
// Each throws std::runtime_error when the batch exceeds the workspace's shape or a launch fails.
void dot_scores_batch_enqueue(ScoreBatchWorkspace* ws, const float* d_centroids, int64_t rows, int64_t d, int64_t count,
                              void* stream);
void dot_scores_f64_batch_enqueue(ScoreBatchWorkspace* ws, const float* d_centroids, int64_t rows, int64_t d,
                                  double scale, int64_t count, void* stream);
void simhash_collisions_batch_enqueue(ScoreBatchWorkspace* ws, const float* d_w, const uint32_t* d_offsets,
                                      const void* d_ids, int id_bytes, int64_t d, int64_t bits, int64_t tables,
                                      int64_t n, int64_t base, int64_t count, void* stream);

}  // namespace kvtool::cuda
