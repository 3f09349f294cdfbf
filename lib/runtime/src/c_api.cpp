// The C API over the C++ pool: exceptions become a status plus a per-thread reason and message.
#include "kvtool/kvtool_c.h"

#include <cmath>
#include <exception>
#include <memory>
#include <string>

#include "kvtool/device.h"
#include "kvtool/error.h"
#include "kvtool/pool.h"

struct kvtool_pool {
  kvtool::Pool pool;
  explicit kvtool_pool(kvtool::PoolOptions o) : pool(std::move(o)) {}
};
struct kvtool_lease {
  kvtool::Lease lease;
};
struct kvtool_query_params {
  std::string kind;
  std::unique_ptr<kvtool::QueryParams> params;
};

namespace {
thread_local std::string g_error, g_reason;

template <typename F>
int guarded(F&& f) {
  try {
    g_error.clear();
    g_reason.clear();
    f();
    return KVTOOL_OK;
  } catch (...) {
    kvtool::Error e = kvtool::error_from_exception(std::current_exception());
    g_reason = e.reason_name();
    g_error = e.what();
    return static_cast<int>(e.exit_code());
  }
}

void need(const void* p, const char* what) { KVT_CHECK(p, USAGE, what << " must not be NULL"); }
// Outside extern "C": a function returning std::string has no C linkage.
std::string str(const char* s) { return s ? s : ""; }
}  // namespace

extern "C" {

const char* kvtool_version(void) { return KVTOOL_VERSION; }
const char* kvtool_last_error(void) { return g_error.c_str(); }
const char* kvtool_last_reason(void) { return g_reason.c_str(); }

int kvtool_pool_new(int64_t host_budget, int64_t device_budget, int device, kvtool_pool** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    KVT_CHECK(device >= KVTOOL_DEVICE_CPU && device <= KVTOOL_DEVICE_AUTO, USAGE, "unknown device selector " << device);
    kvtool::PoolOptions o;
    o.host_budget = host_budget;
    o.device_budget = device_budget;
    if (device != KVTOOL_DEVICE_CPU) {
      o.device = kvtool::make_device_backend();  // nullptr in a libkvtool built without CUDA
      KVT_CHECK(o.device || device == KVTOOL_DEVICE_AUTO, DEVICE_UNAVAILABLE,
                "a CUDA device was requested but none is usable (or this libkvtool was built without CUDA)");
    }
    *out = new kvtool_pool(std::move(o));
  });
}

void kvtool_pool_free(kvtool_pool* pool) { delete pool; }

int kvtool_pool_device_available(const kvtool_pool* pool) { return pool && pool->pool.device_available(); }

namespace {
void publish(kvtool_pool* pool, kvtool::PublishRequest& r, const kvtool_publish_options* opt, int64_t* generation) {
  if (opt) {
    if (opt->expected_content_digest) r.expected_content_digest = opt->expected_content_digest;
    if (opt->tenant) r.tenant = opt->tenant;
    if (opt->trusted_keys_dir) r.trust.trusted = kvtool::load_trusted_keys(opt->trusted_keys_dir);
    r.trust.require_signature = opt->require_signature != 0;
    r.device = opt->device != 0 && pool->pool.device_available();
  }
  kvtool::PublishReceipt rc = pool->pool.publish(r);
  if (generation) *generation = rc.generation;
}
}  // namespace

int kvtool_pool_publish(kvtool_pool* pool, const char* key, const char* path, const kvtool_publish_options* opt,
                        int64_t* generation) {
  return guarded([&] {
    need(pool, "pool");
    need(key, "key");
    need(path, "path");
    kvtool::PublishRequest r;
    r.key = key;
    r.artifact = path;
    publish(pool, r, opt, generation);
  });
}

int kvtool_pool_publish_stored(kvtool_pool* pool, const char* key, const char* store_dir, const kvtool_store_key* skey,
                               const kvtool_publish_options* opt, int64_t* generation) {
  return guarded([&] {
    need(pool, "pool");
    need(key, "key");
    need(store_dir, "store_dir");
    need(skey, "skey");
    kvtool::PublishRequest r;
    r.key = key;
    r.store_dir = store_dir;
    r.store_key = kvtool::StoreKey{str(skey->tenant),           str(skey->model), str(skey->adapter),
                                   str(skey->prefix_hash),      str(skey->kind),  str(skey->params_digest),
                                   str(skey->position_contract)};
    kvtool::check_store_key(r.store_key, false);
    publish(pool, r, opt, generation);
  });
}

int kvtool_pool_retire(kvtool_pool* pool, const char* key, int wait) {
  return guarded([&] {
    need(pool, "pool");
    need(key, "key");
    KVT_CHECK(pool->pool.retire(key, wait != 0), NOT_PUBLISHED, "nothing is published under '" << key << "'");
  });
}

int kvtool_pool_usage(kvtool_pool* pool, int64_t* host_used, int64_t* device_used) {
  return guarded([&] {
    need(pool, "pool");
    kvtool::PoolStats s = pool->pool.stats();
    if (host_used) *host_used = s.host_used;
    if (device_used) *device_used = s.device_used;
  });
}

int kvtool_pool_acquire(kvtool_pool* pool, const char* key, kvtool_lease** out) {
  return guarded([&] {
    need(pool, "pool");
    need(key, "key");
    need(out, "out");
    *out = nullptr;
    auto* l = new kvtool_lease{pool->pool.acquire(key)};
    *out = l;
  });
}

void kvtool_lease_release(kvtool_lease* lease) { delete lease; }

int64_t kvtool_lease_generation(const kvtool_lease* lease) { return lease ? lease->lease.generation() : 0; }

int kvtool_lease_query_keys(const kvtool_lease* lease, int64_t layer, int64_t q_head, const float* q, int64_t position,
                            const char* options, const float* keys, int64_t key_rows, int64_t* ids, int64_t capacity,
                            int64_t* count) {
  return guarded([&] {
    need(lease, "lease");
    need(q, "q");
    need(count, "count");
    KVT_CHECK(capacity >= 0 && (capacity == 0 || ids), USAGE, "ids must hold capacity entries");
    KVT_CHECK(key_rows >= 0 && (key_rows == 0 || keys), USAGE, "keys must hold key_rows rows");
    auto params = lease->lease.params(kvtool::parse_query_settings(options ? options : ""));
    const kvtool::KeyRows k{keys, key_rows, lease->lease.artifact().source().geo.head_dim};
    kvtool::CandidateReceipt rc = lease->lease.query(layer, q_head, q, position, *params, keys ? &k : nullptr);
    *count = static_cast<int64_t>(rc.candidates.size());
    for (int64_t i = 0; i < std::min<int64_t>(capacity, *count); ++i) ids[i] = rc.candidates[static_cast<size_t>(i)];
  });
}

int kvtool_lease_query(const kvtool_lease* lease, int64_t layer, int64_t q_head, const float* q, int64_t position,
                       const char* options, int64_t* ids, int64_t capacity, int64_t* count) {
  return kvtool_lease_query_keys(lease, layer, q_head, q, position, options, nullptr, 0, ids, capacity, count);
}

int kvtool_lease_params(const kvtool_lease* lease, const char* options, kvtool_query_params** out) {
  return guarded([&] {
    need(out, "out");
    *out = nullptr;
    need(lease, "lease");
    auto p = std::make_unique<kvtool_query_params>();
    p->params = lease->lease.params(kvtool::parse_query_settings(options ? options : ""));
    p->kind = lease->lease.artifact().kind();
    *out = p.release();
  });
}

void kvtool_query_params_free(kvtool_query_params* params) { delete params; }

int kvtool_lease_query_batch(const kvtool_lease* lease, int64_t layer, int64_t count, const int64_t* q_heads,
                             const float* q, const int64_t* positions, const kvtool_query_params* params, int threads,
                             int64_t* ids, float* scores, int64_t capacity, int64_t* counts) {
  return kvtool_lease_query_batch_on_stream(lease, layer, count, q_heads, q, positions, params, threads, ids, scores,
                                            capacity, counts, nullptr);
}

int kvtool_lease_query_batch_on_stream(const kvtool_lease* lease, int64_t layer, int64_t count, const int64_t* q_heads,
                                       const float* q, const int64_t* positions, const kvtool_query_params* params,
                                       int threads, int64_t* ids, float* scores, int64_t capacity, int64_t* counts,
                                       void* stream) {
  return guarded([&] {
    need(lease, "lease");
    std::unique_ptr<kvtool::QueryParams> defaults;
    if (!params) defaults = lease->lease.params();
    KVT_CHECK(!params || params->kind == lease->lease.artifact().kind(), USAGE,
              "query params for kind '" << params->kind << "' used with a lease of kind '"
                                        << lease->lease.artifact().kind() << "'");
    const kvtool::QueryBatch batch{layer, count, q_heads, q, positions, nullptr, stream};
    lease->lease.query_batch(batch, params ? *params->params : *defaults, {capacity, ids, counts, scores, nullptr},
                             threads);
  });
}

}  // extern "C"
