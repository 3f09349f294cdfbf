// Runtime pool (docs/runtime.md): signed artifacts published into host and device memory under
// generations, leased by readers, queried per (layer, query head), retired and evicted.
//
// A publication is a transaction: reserve (budgets, LRU eviction of unleased generations) → copy
// (artifact image into the host tier; raw section image into the device tier with an async copy) →
// validate (the copied bytes: container, section digests, signature per trust policy, tenant,
// content digest, generation; device bytes read back and compared) → publish (atomic swap of the
// key's visible generation) → the previous generation is retired once its leases drain.
//
// Every copy is fenced by (slot, allocation generation, owner, transfer generation): a completion
// that no longer matches its slot (cancelled publish, slot reused by another publish) is cleaned
// up when it lands and never becomes visible. Thread-safe: any number of threads may publish,
// acquire, query and retire concurrently.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/admission.h"
#include "kvtool/device.h"
#include "kvtool/json.h"
#include "kvtool/query.h"
#include "kvtool/signing.h"
#include "kvtool/store.h"

namespace kvtool {

enum class Tier { host, device };

struct PublishRequest {
  std::string key;                      // pool key the generation is published under
  std::string artifact;                 // path of a .kvi file (or empty: see store_dir)
  std::string expected_content_digest;  // the dump range the runtime serves (empty: not checked)
  std::string tenant;                   // must equal the artifact's source tenant (empty: not checked)
  TrustPolicy trust;
  bool device = false;    // also publish into the device tier (queries are scored there)
  std::string store_dir;  // with an empty artifact: publish what the prefix store
  StoreKey store_key;     // holds for store_key (tenant defaults to the key's)
};

struct PublishReceipt {
  std::string key, kind, content_digest, manifest_sha256;
  int64_t generation = 0;        // pool generation (increases on every publish of the pool)
  int64_t index_generation = 0;  // the artifact's own index generation
  int64_t host_bytes = 0, device_bytes = 0;
  double read_s = 0, decompress_s = 0, copy_s = 0, validate_s = 0, publish_s = 0;
  std::vector<std::string> evicted;  // keys evicted to make room
  int64_t replaced_generation = 0;   // the generation this one replaced (0: none)
  json to_json() const;
};

struct PoolOptions {
  int64_t host_budget = int64_t{4} << 30;
  int64_t device_budget = 0;
  std::shared_ptr<DeviceBackend> device;  // nullptr: host tier only
  // Queries of one part per device batch, the size the device's batch buffers are reserved for
  // at publish (a layer's query heads per kv head times the positions asked at once; Llama-3-8B:
  // 4 per kv head). Larger groups go in several batches; 0: no batch buffers (query by query).
  // The buffers are the backend's, outside device_budget (DeviceBackend::reserve_pq_batches).
  int64_t device_batch_queries = 64;
};

struct PoolStats {
  int64_t host_used = 0, host_budget = 0, device_used = 0, device_budget = 0;
  int64_t device_batch_bytes = 0;  // the device backend's batch buffers, outside device_budget
  int64_t published = 0, retiring = 0, in_flight = 0, orphaned_transfers = 0;
  json to_json() const;
};

class Pool;
struct Generation;
class DeviceStep;
class DeviceStepPlan;

// A reader's pin on one published generation: while any lease exists the generation is neither
// freed nor evicted. Queries through a lease all answer from that generation.
class Lease {
 public:
  Lease() = default;
  int64_t generation() const;
  const std::string& key() const;
  const ArtifactReader& artifact() const;
  bool on_device() const;
  // The same receipt as SelectorSet::query, from this generation (scored on the device when the
  // generation is device resident); receipt.index_generation is the artifact's, the pool
  // generation is generation() (also receipt.pool_generation), receipt.tier says where it ran.
  CandidateReceipt query(int64_t layer, int64_t q_head, const float* q, int64_t position, const QueryParams& params,
                         const KeyRows* keys = nullptr) const;
  // A batch of one layer's queries (SelectorSet::query_batch) from this generation, on the device
  // tier where the generation is device resident, spread over up to `threads` threads: the same
  // candidates, scores and inclusion probabilities as query() one by one, into caller buffers.
  void query_batch(const QueryBatch& batch, const QueryParams& params, const BatchAnswers& out, int threads = 1) const;
  // This generation's kind's parameters from option settings (SelectorSet::params).
  std::unique_ptr<QueryParams> params(const QuerySettings& settings = {}) const;
  // A decode step of one layer kept on the device, for a caller that captures its step in a CUDA
  // graph: `count` queries (query i of head q_heads[i]) answered by the device alone, from buffers
  // the plan owns. USAGE unless this generation is device resident and its kind's whole selection
  // runs on the device (pq, not dense, a budget of at most kMaxDeviceTop rows).
  DeviceStepPlan plan_device_step(int64_t layer, const int64_t* q_heads, int64_t count,
                                  const QueryParams& params) const;
  explicit operator bool() const { return g_ != nullptr; }

 private:
  friend class Pool;
  std::shared_ptr<Generation> g_;
};

// Lease::plan_device_step's plan: it pins the generation (holds a lease) and the device buffers.
// enqueue() puts the step on `stream` (a cudaStream_t; nullptr: the default stream) without
// allocating, copying to or from the host or synchronizing, so it can be captured and replayed:
// q [count, head_dim] and ids / scores [count, rows_per_query()] are device memory; query i's
// candidates are the same absolute row ids and scores, in the same order, as query() gives.
// One stream at a time: the plan's intermediates are shared by its enqueues and a graph's replays.
// A captured graph holds the plan's and the generation's device addresses: it must not outlive
// the plan. While the plan lives its generation is neither evicted nor freed (retire(key, wait)
// waits for it) and stays charged to the device budget; after a republish the plan still answers
// from its own generation() — make a new plan from a new lease to follow the key.
class DeviceStepPlan {
 public:
  DeviceStepPlan();
  DeviceStepPlan(DeviceStepPlan&&) noexcept;
  DeviceStepPlan& operator=(DeviceStepPlan&&) noexcept;
  ~DeviceStepPlan();
  int64_t count() const { return count_; }
  int64_t rows_per_query() const { return per_; }
  int64_t generation() const { return lease_.generation(); }
  void enqueue(const float* q, int64_t* ids, float* scores, void* stream);

 private:
  friend class Lease;
  Lease lease_;
  std::unique_ptr<DeviceStep> step_;
  int64_t count_ = 0, per_ = 0;
};

// Deterministic race injection for tests: called after the copy has landed, before validation,
// with the host image and the device image (nullptr without a device copy).
struct PoolHooks {
  std::function<void(uint8_t* image, size_t bytes)> after_host_copy;  // before the host image is validated
  std::function<void(void* device, size_t bytes)> after_device_copy;  // after the device copy landed, before read-back
};

// A publication between begin() and commit()/cancel().
class PublishTicket {
 public:
  PublishTicket() = default;
  PublishTicket(PublishTicket&&) noexcept = default;
  PublishTicket& operator=(PublishTicket&& o) noexcept;  // cancels the publication it held
  ~PublishTicket();                                      // an abandoned ticket is cancelled
  uint64_t id() const { return id_; }
  struct Work;

 private:
  friend class Pool;
  std::shared_ptr<Work> w_;
  uint64_t id_ = 0;
};

class Pool {
 public:
  explicit Pool(PoolOptions opt);
  ~Pool();  // waits for in-flight copies; outstanding leases keep their generations alive
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  bool device_available() const;
  PublishReceipt publish(const PublishRequest& req);  // begin + commit
  PublishTicket begin(const PublishRequest& req);     // reserve, read, start the copy
  PublishReceipt commit(PublishTicket& t);            // wait for the copy, validate, swap
  void cancel(PublishTicket& t);                      // its buffers return when its copy lands
  bool ready(const PublishTicket& t);                 // its copy has landed

  Lease acquire(const std::string& key);  // NOT_PUBLISHED when the key has no visible generation
  // One query under a lease held for its duration (Lease::query; the receipt names the generation).
  CandidateReceipt query(const std::string& key, int64_t layer, int64_t q_head, const float* q, int64_t position,
                         const QuerySettings& settings = {}, const KeyRows* keys = nullptr);
  // Hides the key's generation; with wait, blocks until its leases drained and its memory returned
  // (so a thread must not wait while it holds a lease on that generation itself).
  bool retire(const std::string& key, bool wait = true);
  size_t reap();  // cleans up landed copies of cancelled or superseded publications
  PoolStats stats();
  std::vector<std::string> keys();
  void set_hooks(PoolHooks h);

  struct State;

 private:
  std::shared_ptr<State> st_;
};

}  // namespace kvtool
