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

// Answers a part's selection in place of its host selector (the pool's device tier); returns false
// to fall back to the host selector.
using SelectHook = std::function<bool(int64_t layer, int64_t kv_head, const PartSelector& host,
                                      const SelectRequest& req, Selection& out)>;

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
  std::unique_ptr<QueryParams> params(const QuerySettings& settings = {}) const;
  const KindSpec& kind() const { return *kind_; }
  const ArtifactReader& artifact() const { return r_; }

 private:
  const ArtifactReader& r_;
  const KindSpec* kind_;
  IndexedRows rows_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<PartSelector>> cache_;
  bool frozen_ = false;
};

}  // namespace kvtool
