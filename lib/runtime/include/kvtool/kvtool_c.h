/* C API of the kvtool runtime pool (libkvtool(3)), for runtimes written in other languages.
 *
 * Every function returns a status (KVTOOL_OK, or the exit-code class of the failure as in
 * kvtool(1): 1 validation, 2 usage, 3 input/output, 4 internal). After a failure,
 * kvtool_last_reason() gives the stable reason code (e.g. "HOST_BUDGET_EXCEEDED") and
 * kvtool_last_error() a sentence; both are per thread and valid until the thread's next call.
 * Objects are opaque; a lease must be released before its pool is freed only if the caller wants
 * the memory back at that point (a lease keeps its generation alive on its own). */
#ifndef KVTOOL_C_H
#define KVTOOL_C_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KVTOOL_C_API
#else
#define KVTOOL_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum kvtool_status {
  KVTOOL_OK = 0,
  KVTOOL_ERR_INVALID = 1,
  KVTOOL_ERR_USAGE = 2,
  KVTOOL_ERR_IO = 3,
  KVTOOL_ERR_INTERNAL = 4
};

typedef struct kvtool_pool kvtool_pool;
typedef struct kvtool_lease kvtool_lease;

/* Device selection for kvtool_pool_new. */
enum kvtool_device { KVTOOL_DEVICE_CPU = 0, KVTOOL_DEVICE_CUDA = 1, KVTOOL_DEVICE_AUTO = 2 };

typedef struct kvtool_publish_options {
  const char* expected_content_digest; /* NULL or "": not checked */
  const char* tenant;                  /* NULL or "": not checked */
  const char* trusted_keys_dir;        /* NULL: any valid signature or none; else only keys in it */
  int require_signature;               /* nonzero: unsigned artifacts are refused */
  int device;                          /* nonzero: also publish into the device tier when the pool has
                                          one (always true of a pool made with KVTOOL_DEVICE_CUDA) */
} kvtool_publish_options;

KVTOOL_C_API const char* kvtool_version(void);
KVTOOL_C_API const char* kvtool_last_error(void);
KVTOOL_C_API const char* kvtool_last_reason(void);

KVTOOL_C_API int kvtool_pool_new(int64_t host_budget, int64_t device_budget, int device, kvtool_pool** out);
KVTOOL_C_API void kvtool_pool_free(kvtool_pool* pool);
KVTOOL_C_API int kvtool_pool_device_available(const kvtool_pool* pool);
/* Publishes the artifact at `path` under `key`; `generation` (may be NULL) receives the pool
 * generation now visible under the key. `opt` may be NULL (defaults: nothing checked, host only). */
KVTOOL_C_API int kvtool_pool_publish(kvtool_pool* pool, const char* key, const char* path,
                                     const kvtool_publish_options* opt, int64_t* generation);
/* A prefix-store key (formats/store-v1.md); params_digest and position_contract may be NULL. */
typedef struct kvtool_store_key {
  const char* tenant;
  const char* model;
  const char* adapter;
  const char* prefix_hash;
  const char* kind;
  const char* params_digest;
  const char* position_contract;
} kvtool_store_key;
/* Publishes the artifact the prefix store at `store_dir` holds for `skey` (verified on the way out;
 * STORE_MISS / STORE_AMBIGUOUS otherwise). The tenant checked defaults to the key's. */
KVTOOL_C_API int kvtool_pool_publish_stored(kvtool_pool* pool, const char* key, const char* store_dir,
                                            const kvtool_store_key* skey, const kvtool_publish_options* opt,
                                            int64_t* generation);
KVTOOL_C_API int kvtool_pool_retire(kvtool_pool* pool, const char* key, int wait);
KVTOOL_C_API int kvtool_pool_usage(kvtool_pool* pool, int64_t* host_used, int64_t* device_used);

KVTOOL_C_API int kvtool_pool_acquire(kvtool_pool* pool, const char* key, kvtool_lease** out);
KVTOOL_C_API void kvtool_lease_release(kvtool_lease* lease);
KVTOOL_C_API int64_t kvtool_lease_generation(const kvtool_lease* lease);
/* Candidate rows of one query vector (head_dim floats) at `position`. `options` (NULL or "": the
 * kind's defaults) holds the kind's query options as "name=value" separated by commas or spaces,
 * the same names as the kvtool query flags: "budget=0.1" or "budget=64" (pq, clusterkv),
 * "min_collisions=3" (lsh), "quantile=0.8,flat=true" (squeeze); an option the artifact's kind does
 * not take is KVTOOL_ERR_USAGE. Writes at most `capacity`
 * ids to `ids` (best first) and the total number of candidates to `count`; a count above capacity
 * means the caller's array was too small (the first `capacity` ids are still valid). */
KVTOOL_C_API int kvtool_lease_query(const kvtool_lease* lease, int64_t layer, int64_t q_head, const float* q,
                                    int64_t position, const char* options, int64_t* ids, int64_t capacity,
                                    int64_t* count);
/* kvtool_lease_query with the host keys of the query's kv head: `keys` [key_rows, head_dim] floats,
 * rows [0, key_rows) of the prefix (at least the coverage end). Needed by "rerank=F" (pq,
 * clusterkv: the index proposes F x the budget's rows, exact q.k over these keys keeps the budget;
 * without keys it is KVTOOL_ERR_USAGE); lsh uses them for its inclusion probabilities.
 * kvtool_lease_query_batch takes no keys, so it refuses rerank (KVTOOL_ERR_USAGE): rerank a decode
 * step with one kvtool_lease_query_keys per query (what Python's Lease.query_batch does). */
KVTOOL_C_API int kvtool_lease_query_keys(const kvtool_lease* lease, int64_t layer, int64_t q_head, const float* q,
                                         int64_t position, const char* options, const float* keys, int64_t key_rows,
                                         int64_t* ids, int64_t capacity, int64_t* count);

/* Query options parsed once for a lease's kind (the same text as kvtool_lease_query takes), for
 * batches that should not parse text on the hot path. Valid for leases of artifacts of that kind;
 * free with kvtool_query_params_free. */
typedef struct kvtool_query_params kvtool_query_params;
KVTOOL_C_API int kvtool_lease_params(const kvtool_lease* lease, const char* options, kvtool_query_params** out);
KVTOOL_C_API void kvtool_query_params_free(kvtool_query_params* params);

/* A batch of `count` queries of one layer (a decode step: every query head at one or more
 * positions): query i is query head q_heads[i] with the vector q[i * head_dim, (i + 1) * head_dim)
 * at positions[i]. Query i's candidates, the same as kvtool_lease_query gives one by one, go to
 * ids[i * capacity, ...) (and their scores to scores[i * capacity, ...) when `scores` is not NULL);
 * counts[i] receives how many it has (above capacity: the first `capacity` are written). The batch
 * spreads over up to `threads` threads (1..1024, used up to the CPU count; persistent workers;
 * 1: the calling thread) and allocates
 * nothing once those threads are warm. `params` from kvtool_lease_params (NULL: the kind's
 * defaults). After a failure the buffers' contents are unspecified. */
KVTOOL_C_API int kvtool_lease_query_batch(const kvtool_lease* lease, int64_t layer, int64_t count,
                                          const int64_t* q_heads, const float* q, const int64_t* positions,
                                          const kvtool_query_params* params, int threads, int64_t* ids, float* scores,
                                          int64_t capacity, int64_t* counts);
/* kvtool_lease_query_batch on the caller's CUDA stream `stream` (a cudaStream_t; NULL: the device's
 * default stream): the parts of a generation on the device tier are scored on it, after the work
 * already queued there. The call still returns with the answers in place (it waits for the
 * stream), so a stream being captured into a CUDA graph is refused (KVTOOL_ERR_USAGE); graphs
 * capture the kernels' batch API (cuda/include/kvtool/cuda_kernels.h). Parts on the host tier
 * ignore it. */
KVTOOL_C_API int kvtool_lease_query_batch_on_stream(const kvtool_lease* lease, int64_t layer, int64_t count,
                                                    const int64_t* q_heads, const float* q, const int64_t* positions,
                                                    const kvtool_query_params* params, int threads, int64_t* ids,
                                                    float* scores, int64_t capacity, int64_t* counts, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* KVTOOL_C_H */
