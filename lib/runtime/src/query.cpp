#include "kvtool/query.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvtool/atomic_file.h"
#include "kvtool/error.h"
#include "workers.h"

namespace kvtool {

json CandidateReceipt::to_json() const {
  json sc = json::array();
  for (float s : scores) sc.push_back(s);
  json j = {{"schema_version", kJsonSchemaVersion},
            {"kind", kind},
            {"index_generation", index_generation},
            {"content_digest", content_digest},
            {"semantics", "candidate_ids_only"},
            {"layer", layer},
            {"q_head", q_head},
            {"kv_head", kv_head},
            {"position", position},
            {"budget_rows", budget_rows},
            {"indexed_rows", indexed_rows},
            {"candidates", candidates},
            {"scores", sc},
            {"inclusion_probabilities", inclusion},
            {"selector", selector},
            {"centroids_scored", centroids_scored},
            {"always_included", always_included},
            {"part", part}};
  if (pool_generation > 0) j["pool"] = {{"generation", pool_generation}, {"tier", tier}};
  return j;
}

SelectorSet::SelectorSet(const ArtifactReader& r) : r_(r), kind_(find_kind(r.kind())), rows_() {
  KVT_CHECK(kind_, UNKNOWN_KIND, "artifact kind '" << r.kind() << "' is not known to this kvtool");
  KVT_CHECK(kind_->load, USAGE, "artifacts of kind '" << r.kind() << "' cannot be queried");
  rows_ = IndexedRows::of(r);
}

const PartSelector& SelectorSet::part(int64_t layer, int64_t kv_head) {
  auto key = std::make_pair(layer, kv_head);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    KVT_CHECK(!frozen_, USAGE, "part (layer " << layer << ", kv head " << kv_head << ") is not in this artifact");
    it = cache_.emplace(key, kind_->load(r_, layer, kv_head)).first;
  }
  return *it->second;
}

void SelectorSet::preload() {
  for (const auto& pm : r_.manifest()["kind_data"]["parts"])
    part(pm["layer"].get<int64_t>(), pm["kv_head"].get<int64_t>());
  frozen_ = true;
}

int64_t SelectorSet::resident_bytes() const {
  int64_t b = 0;
  for (const auto& [k, sel] : cache_) b += sel->resident_bytes() + 256;  // + the part's object and map node
  return b;
}

std::vector<std::pair<int64_t, int64_t>> SelectorSet::parts() const {
  std::vector<std::pair<int64_t, int64_t>> v;
  for (const auto& [k, sel] : cache_) v.push_back(k);
  return v;
}

std::unique_ptr<QueryParams> SelectorSet::params(const QuerySettings& settings) const {
  return kind_->parse_query(r_, settings);
}

void SelectorSet::check_query(int64_t layer, int64_t q_head, int64_t position) const {
  const auto& src = r_.source();
  KVT_CHECK(layer >= 0 && layer < src.geo.layers, USAGE, "--layer " << layer << " is outside 0-" << src.geo.layers - 1);
  KVT_CHECK(q_head >= 0 && q_head < src.geo.q_heads, USAGE,
            "--q-head " << q_head << " is outside 0-" << src.geo.q_heads - 1);
  KVT_CHECK(position >= rows_.coverage_end - 1, USAGE,
            "position " << position << " lies inside the covered rows [0, " << rows_.coverage_end
                        << "); index queries are for positions >= " << rows_.coverage_end - 1);
}

CandidateReceipt SelectorSet::query(int64_t layer, int64_t q_head, const float* q, int64_t position,
                                    const QueryParams& params, const KeyRows* keys, const SelectHook& hook) {
  check_query(layer, q_head, position);
  const auto& src = r_.source();
  CandidateReceipt rc;
  rc.kind = r_.kind();
  rc.content_digest = src.content_digest;
  rc.index_generation = r_.manifest()["index_generation"];
  rc.layer = layer;
  rc.q_head = q_head;
  rc.kv_head = src.id.q_to_kv_head[static_cast<size_t>(q_head)];
  rc.position = position;
  const PartSelector& sel = part(layer, rc.kv_head);
  rc.indexed_rows = sel.indexed_rows();
  SelectRequest req;
  req.q = q;
  req.params = &params;
  req.keys = keys;
  Selection out;
  if (!hook || !hook(layer, rc.kv_head, sel, req, out)) sel.select(req, out);
  rc.budget_rows = out.budget_rows;
  rc.candidates = std::move(out.ids);
  rc.scores = std::move(out.scores);
  rc.inclusion = std::move(out.inclusion);
  rc.centroids_scored = out.centroids_scored;
  rc.part = sel.describe();
  rc.selector = params.receipt(rc.indexed_rows);
  for (int64_t i = 0; i < rows_.begin(); ++i) rc.always_included.push_back(i);
  for (int64_t i = rows_.end(); i <= position; ++i) rc.always_included.push_back(i);
  return rc;
}

namespace {

// Everything one batch shares across its worker threads; the first error wins.
struct BatchRun {
  const QueryBatch& batch;
  const QueryParams& params;
  const BatchAnswers& out;
  const SelectHook& hook;
  const std::vector<const PartSelector*>& parts;  // per query
  const std::vector<int64_t>& kv_of;              // per query
  int64_t d = 0;
  const std::vector<char>* answered = nullptr;  // per query: already answered by a group
  BatchRun(const QueryBatch& b, const QueryParams& p, const BatchAnswers& o, const SelectHook& h,
           const std::vector<const PartSelector*>& pa, const std::vector<int64_t>& kv, int64_t dim)
      : batch(b), params(p), out(o), hook(h), parts(pa), kv_of(kv), d(dim) {}
  std::mutex mu;
  std::exception_ptr error;
  std::atomic<bool> failed{false};

  void operator()(int64_t i) {
    if (failed.load(std::memory_order_relaxed) || (answered && (*answered)[static_cast<size_t>(i)])) return;
    try {
      answer(i);
    } catch (...) {
      std::lock_guard<std::mutex> g(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  }
  void answer(int64_t i) {
    thread_local Selection sel;  // cleared, never shrunk: warm threads allocate nothing
    const PartSelector& part = *parts[static_cast<size_t>(i)];
    // Room for every indexed row (no kind returns more), so the first query on a part this size
    // sizes the buffers for all later ones, whatever their candidate counts.
    const size_t most = static_cast<size_t>(part.indexed_rows());
    sel.ids.clear();
    sel.scores.clear();
    sel.inclusion.clear();
    sel.ids.reserve(most);
    sel.scores.reserve(most);
    if (batch.keys) sel.inclusion.reserve(most);
    sel.centroids_scored = -1;
    sel.budget_rows = -1;
    SelectRequest req;
    req.q = batch.q + i * d;
    req.params = &params;
    req.keys = batch.keys ? &batch.keys[kv_of[static_cast<size_t>(i)]] : nullptr;
    if (!hook || !hook(batch.layer, kv_of[static_cast<size_t>(i)], part, req, sel)) part.select(req, sel);
    const int64_t n = static_cast<int64_t>(sel.ids.size()), w = std::min(n, out.capacity), at = i * out.capacity;
    out.counts[i] = n;
    std::copy(sel.ids.begin(), sel.ids.begin() + w, out.ids + at);
    if (out.scores) std::copy(sel.scores.begin(), sel.scores.begin() + w, out.scores + at);
    if (out.inclusion && !sel.inclusion.empty())
      std::copy(sel.inclusion.begin(), sel.inclusion.begin() + w, out.inclusion + at);
  }
};

// Offers each part's queries of the batch to `group` together (their vectors gathered in batch
// order) and writes the answers it gives; returns which queries were answered. Per-thread buffers:
// nothing is allocated once they have reached the batch's sizes.
const std::vector<char>& answer_groups(const QueryBatch& batch, const QueryParams& params, const BatchAnswers& out,
                                       const GroupHook& group, const std::vector<int64_t>& kv_of,
                                       const std::vector<const PartSelector*>& parts, int64_t d) {
  thread_local std::vector<char> answered, seen;
  thread_local std::vector<int64_t> members, ids;
  thread_local std::vector<float> q, scores;
  const auto n = static_cast<size_t>(batch.count);
  answered.assign(n, 0);
  seen.assign(n, 0);
  for (size_t first = 0; first < n; ++first) {
    if (seen[first]) continue;
    members.clear();
    for (size_t i = first; i < n; ++i)
      if (kv_of[i] == kv_of[first]) {
        seen[i] = 1;
        members.push_back(static_cast<int64_t>(i));
      }
    q.resize(members.size() * static_cast<size_t>(d));
    for (size_t j = 0; j < members.size(); ++j)
      std::copy(batch.q + members[j] * d, batch.q + (members[j] + 1) * d, q.data() + j * static_cast<size_t>(d));
    const int64_t per = group(batch.layer, kv_of[first], *parts[first], q.data(), static_cast<int64_t>(members.size()),
                              params, batch.stream, ids, scores);
    if (per < 0) continue;
    const int64_t w = std::min(per, out.capacity);
    for (size_t j = 0; j < members.size(); ++j) {
      const int64_t i = members[j], at = i * out.capacity, from = static_cast<int64_t>(j) * per;
      out.counts[i] = per;
      std::copy(ids.begin() + from, ids.begin() + from + w, out.ids + at);
      if (out.scores) std::copy(scores.begin() + from, scores.begin() + from + w, out.scores + at);
      answered[static_cast<size_t>(i)] = 1;
    }
  }
  return answered;
}

}  // namespace

void SelectorSet::query_batch(const QueryBatch& batch, const QueryParams& params, const BatchAnswers& out, int threads,
                              const SelectHook& hook, const GroupHook& group) {
  KVT_CHECK(batch.count >= 0, USAGE, "a batch has a query count >= 0 (got " << batch.count << ")");
  if (batch.count == 0) return;
  KVT_CHECK(batch.q_heads && batch.q && batch.positions, USAGE, "a batch needs its query heads, vectors and positions");
  KVT_CHECK(out.capacity >= 0 && out.counts && (out.capacity == 0 || out.ids), USAGE,
            "batch answers need counts and, with a capacity, ids");
  KVT_CHECK(out.capacity <= INT64_MAX / batch.count, USAGE, "batch answers: capacity x count overflows");
  KVT_CHECK(threads >= 1 && threads <= 1024, USAGE, "a batch runs on 1..1024 threads (got " << threads << ")");
  const auto& src = r_.source();
  // Per-query checks and part lookups first, on this thread: the parallel part only reads.
  thread_local std::vector<const PartSelector*> parts;
  thread_local std::vector<int64_t> kv_of;
  parts.resize(static_cast<size_t>(batch.count));
  kv_of.resize(static_cast<size_t>(batch.count));
  for (int64_t i = 0; i < batch.count; ++i) {
    check_query(batch.layer, batch.q_heads[i], batch.positions[i]);
    kv_of[i] = src.id.q_to_kv_head[static_cast<size_t>(batch.q_heads[i])];
    parts[i] = &part(batch.layer, kv_of[i]);
  }
  BatchRun run(batch, params, out, hook, parts, kv_of, src.geo.head_dim);
  if (group) run.answered = &answer_groups(batch, params, out, group, kv_of, parts, src.geo.head_dim);
  detail::parallel_for(batch.count, threads, run);
  if (run.error) std::rethrow_exception(run.error);
}

}  // namespace kvtool
