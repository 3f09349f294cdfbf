// Candidate queries against an artifact of any kind: budgets, the receipt of one query, and the
// loaded selectors of one artifact (formats/kinds-v1.md for what each kind answers).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/json.h"
#include "kvtool/kinds.h"

namespace kvtool {

struct CandidateReceipt {
  std::string kind, content_digest;
  int64_t index_generation = 0, layer = 0, q_head = 0, kv_head = 0, position = 0;
  int64_t budget_rows = 0, indexed_rows = 0;
  std::vector<int64_t> candidates;
  std::vector<float> scores;
  std::vector<double> inclusion;  // sampling kinds (lsh): inclusion probability of each candidate
  int64_t centroids_scored = -1;  // centroid kinds: centroids this query scored
  json selector = json::object();
  std::vector<int64_t> always_included;  // sink, local window, uncovered tail (coverage_end .. position)
  json part = json::object();
  int64_t pool_generation = 0;  // answered by a runtime pool: its generation (0: straight from a file)
  std::string tier;             // pool tier that scored it: "host" | "device"
  json to_json() const;
};

// A batch of queries against one layer (a decode step asks every query head of every layer):
// query i is query head q_heads[i] with the vector q[i * head_dim, (i + 1) * head_dim) at
// positions[i]. Every query obeys SelectorSet::query's rules.
struct QueryBatch {
  int64_t layer = 0;
  int64_t count = 0;
  const int64_t* q_heads = nullptr;    // [count]
  const float* q = nullptr;            // [count, head_dim], row-major
  const int64_t* positions = nullptr;  // [count]
  // Kinds whose receipts need the full keys (lsh): keys[h] holds rows [0, E) of kv head h, one
  // entry per kv head of the dump. nullptr: candidates without inclusion probabilities.
  const KeyRows* keys = nullptr;
  // The caller's device stream (a cudaStream_t) for a generation on the device tier; nullptr: the
  // backend's own. The batch has completed when query_batch returns either way.
  void* stream = nullptr;
};

// Caller-provided answer buffers of a QueryBatch. Query i's candidates (the receipt's
// `candidates`, in the kind's order) go to ids[i * capacity, i * capacity + min(counts[i],
// capacity)); counts[i] is the number it has (above capacity: the rest were not written).
// scores and inclusion are optional and laid out like ids; inclusion is written only by kinds
// that compute it from QueryBatch::keys. After an error the buffers' contents are unspecified.
struct BatchAnswers {
  int64_t capacity = 0;
  int64_t* ids = nullptr;       // [count, capacity]
  int64_t* counts = nullptr;    // [count]
  float* scores = nullptr;      // [count, capacity] or nullptr
  double* inclusion = nullptr;  // [count, capacity] or nullptr
};

// Answers a part's selection in place of its host selector (the pool's device tier); returns false
// to fall back to the host selector.
using SelectHook = std::function<bool(int64_t layer, int64_t kv_head, const PartSelector& host,
                                      const SelectRequest& req, Selection& out)>;

// Answers a batch's queries of one part at once in place of the per-query path (the pool's device
// tier), putting each answer it has into `answers`; the queries it does not put go the per-query way.
using GroupHook = std::function<void(int64_t layer, int64_t kv_head, const PartSelector& host,
                                     const DeviceQueries& queries, GroupAnswers& answers)>;

// The query one KV head's group shares (selection shared per KV head): the mean of its `group` query
// heads' vectors q_heads[0 .. group*d), summed in double. A budget kind's scores are linear in the
// query, so ranking by it is ranking by the group's summed scores (the rows a grouped-query engine
// fetches once for all the group's heads); for squeeze and lsh it is the group's mean direction.
void group_mean_query(const float* q_heads, int64_t group, int64_t d, float* out);

// The loaded selectors of one artifact, one part at a time, cached. After preload() every part is
// loaded and the set is immutable: concurrent query() calls are then safe.
class SelectorSet {
 public:
  explicit SelectorSet(const ArtifactReader& r);
  const PartSelector& part(int64_t layer, int64_t kv_head);
  void preload();
  std::vector<std::pair<int64_t, int64_t>> parts() const;  // loaded parts
  int64_t resident_bytes() const;                          // selector state of the loaded parts
  // `position` is the row the query sits at; it must be >= coverage_end - 1. `keys` (rows [0, E)
  // of the query's kv head) is required by kinds whose receipts need the full keys (lsh).
  // `params` come from params() (this artifact's kind; settings it does not take are USAGE).
  CandidateReceipt query(int64_t layer, int64_t q_head, const float* q, int64_t position, const QueryParams& params,
                         const KeyRows* keys = nullptr, const SelectHook& hook = nullptr);
  // Every query of `batch` with the same answers as query() gives one by one, spread over up to
  // `threads` threads (persistent workers; 1: the caller's thread). Writes only `out`: no
  // receipts, and no allocation once the threads are warm and the batch's parts are loaded.
  // With `group`, each part's queries are offered to it together first (the parts spread over the
  // threads).
  void query_batch(const QueryBatch& batch, const QueryParams& params, const BatchAnswers& out, int threads = 1,
                   const SelectHook& hook = nullptr, const GroupHook& group = nullptr);
  std::unique_ptr<QueryParams> params(const QuerySettings& settings = {}) const;
  const KindSpec& kind() const { return *kind_; }
  const ArtifactReader& artifact() const { return r_; }

 private:
  void check_query(int64_t layer, int64_t q_head, int64_t position) const;
  const ArtifactReader& r_;
  const KindSpec* kind_;
  IndexedRows rows_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<PartSelector>> cache_;
  bool frozen_ = false;
};

}  // namespace kvtool
