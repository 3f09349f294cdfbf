#include "kvtool/query.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <numeric>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvtool/atomic_file.h"
#include "kvtool/error.h"
#include "kvtool/identity.h"
#include "kvtool/scoring.h"
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

void group_mean_query(const float* q_heads, int64_t group, int64_t d, float* out) {
  KVT_CHECK(group >= 1 && d >= 1, USAGE, "a KV head's group has at least one query head of dimension >= 1");
  for (int64_t i = 0; i < d; ++i) {
    double s = 0;
    for (int64_t h = 0; h < group; ++h) s += q_heads[h * d + i];
    out[i] = static_cast<float>(s / static_cast<double>(group));
  }
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

namespace {

// A selection's n candidates into increasing row order (QueryParams::row_order) where its kind
// listed them best first, their scores and inclusion probabilities (nullptr: none) with them; a
// kind that listed them in row order already is left as it is. Per-thread buffers.
void to_row_order(int64_t* ids, float* scores, double* inclusion, int64_t n) {
  if (std::is_sorted(ids, ids + n)) return;
  thread_local std::vector<int64_t> perm, id;
  thread_local std::vector<float> score;
  thread_local std::vector<double> incl;
  perm.resize(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  id.assign(ids, ids + n);
  for (int64_t i = 0; i < n; ++i) ids[i] = id[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  if (scores) {
    score.assign(scores, scores + n);
    for (int64_t i = 0; i < n; ++i) scores[i] = score[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  }
  if (inclusion) {
    incl.assign(inclusion, inclusion + n);
    for (int64_t i = 0; i < n; ++i) inclusion[i] = incl[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  }
}

// A receipt lists the uncovered rows between the coverage end and the query's position as always
// included: at most this many (8 MiB of row ids), so a position far past every row that exists
// cannot make a query allocate without end. A longer decode is indexed again, over the longer prefix.
constexpr int64_t kMaxUncoveredRows = int64_t(1) << 20;

// An adaptive budget (BudgetParams::top_p): of a best-first selection, the shortest prefix whose
// estimated softmax mass — exp(scale * score), relative to the whole selection's — reaches p
// (summed in double after the largest score is subtracted, so no score overflows).
void keep_top_p(Selection& out, double p, double scale) {
  const size_t n = out.ids.size();
  if (n == 0) return;
  double top = out.scores[0], total = 0;
  for (size_t i = 0; i < n; ++i) {
    KVT_CHECK(i == 0 || out.scores[i] <= out.scores[i - 1], INTERNAL,
              "top_p: a budget kind's selection is not best first");
    total += std::exp(scale * (out.scores[i] - top));
  }
  double mass = 0;
  size_t kept = 0;
  while (kept < n && mass < p * total) mass += std::exp(scale * (out.scores[kept++] - top));
  out.ids.resize(kept);
  out.scores.resize(kept);
  if (!out.inclusion.empty()) out.inclusion.resize(kept);
}

// The rerank of a budget kind's proposal (BudgetParams::rerank): exact q.k of each proposed row
// over the host keys (scoring's double dot products), the best `keep` kept, best first (ties by
// lower row), with their exact scores.
void rerank_selection(Selection& out, const float* q, const KeyRows& keys, int64_t keep) {
  for (int64_t id : out.ids)
    KVT_CHECK(
        id >= 0 && id < keys.rows, USAGE,
        "rerank: row " << id << " is outside the " << keys.rows << " key rows given (pass rows [0, coverage end))");
  // Ascending rows: the top-k's ties by lower index are then ties by lower row.
  std::sort(out.ids.begin(), out.ids.end());
  const auto n = static_cast<int64_t>(out.ids.size());
  thread_local std::vector<double> exact;
  thread_local std::vector<float> score;
  thread_local std::vector<int64_t> best;
  exact.resize(static_cast<size_t>(n));
  score.resize(static_cast<size_t>(n));
  best.resize(static_cast<size_t>(std::min(keep, n)));
  scoring::dot_scores_f64(q, keys.data, out.ids.data(), n, keys.d, 1.0, exact.data());
  for (int64_t i = 0; i < n; ++i) {
    // A NaN or Inf score (a non-finite key, or a dot product beyond float's range; the query is
    // checked on entry) would rank arbitrarily: the keys are refused rather than ranked.
    score[static_cast<size_t>(i)] = static_cast<float>(exact[static_cast<size_t>(i)]);
    KVT_CHECK(std::isfinite(score[static_cast<size_t>(i)]), NON_FINITE,
              "rerank: the host key of row " << out.ids[static_cast<size_t>(i)]
                                             << " gives a non-finite score (NaN or Inf in the keys passed)");
  }
  const int64_t kept = scoring::top_k_into(score.data(), n, keep, best.data());
  std::vector<int64_t> ids(static_cast<size_t>(kept));
  out.scores.resize(static_cast<size_t>(kept));
  for (int64_t i = 0; i < kept; ++i) {
    const auto b = static_cast<size_t>(best[static_cast<size_t>(i)]);
    ids[static_cast<size_t>(i)] = out.ids[b];
    out.scores[static_cast<size_t>(i)] = score[b];
  }
  out.ids = std::move(ids);
}

}  // namespace

void SelectorSet::check_query(int64_t layer, int64_t q_head, int64_t position) const {
  const auto& src = r_.source();
  KVT_CHECK(layer >= 0 && layer < src.geo.layers, USAGE, "layer " << layer << " is outside 0-" << src.geo.layers - 1);
  KVT_CHECK(q_head >= 0 && q_head < src.geo.q_heads, USAGE,
            "query head " << q_head << " is outside 0-" << src.geo.q_heads - 1);
  KVT_CHECK(position >= rows_.coverage_end - 1, USAGE,
            "position " << position << " lies inside the covered rows [0, " << rows_.coverage_end
                        << "); index queries are for positions >= " << rows_.coverage_end - 1);
  // No dump, and no decode continuing one, has 2^31 rows (formats/kvdump-v1.md, "Limits").
  KVT_CHECK(position < kMaxDumpTokens, USAGE,
            "position " << position << " is beyond the " << kMaxDumpTokens << " rows a dump or decode can have");
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
  const BudgetParams* rerank = reranking(params);
  BudgetParams proposal;
  if (rerank) {  // the index proposes F x the budget; exact scores over the keys keep the budget
    KVT_CHECK(keys && keys->d == src.geo.head_dim, USAGE,
              "rerank=" << rerank->rerank << " scores the proposed rows exactly: pass the host keys of the prefix");
    proposal.budget = rerank->proposal();
    req.params = &proposal;
  }
  Selection out;
  if (!hook || !hook(layer, rc.kv_head, sel, req, out)) sel.select(req, out);
  if (rerank) {
    out.budget_rows = rerank->budget.rows(sel.indexed_rows());
    rerank_selection(out, q, *keys, out.budget_rows);
  }
  if (const BudgetParams* p = top_p_of(params); p && !out.dense)
    keep_top_p(out, p->top_p, 1.0 / std::sqrt(static_cast<double>(src.geo.head_dim)));
  if (params.row_order)
    to_row_order(out.ids.data(), out.scores.empty() ? nullptr : out.scores.data(),
                 out.inclusion.empty() ? nullptr : out.inclusion.data(), static_cast<int64_t>(out.ids.size()));
  rc.budget_rows = out.budget_rows;
  rc.candidates = std::move(out.ids);
  rc.scores = std::move(out.scores);
  rc.inclusion = std::move(out.inclusion);
  rc.centroids_scored = out.centroids_scored;
  rc.part = sel.describe();
  rc.selector = params.receipt(rc.indexed_rows);
  if (params.row_order) rc.selector["order"] = "rows";
  for (int64_t i = 0; i < rows_.begin(); ++i) rc.always_included.push_back(i);
  KVT_CHECK(position - rows_.end() < kMaxUncoveredRows, USAGE,
            "position " << position << " is " << position - rows_.end() + 1 << " rows past the index's end "
                        << rows_.end() << "; a query lists at most " << kMaxUncoveredRows
                        << " uncovered rows as always included (index the longer prefix)");
  for (int64_t i = rows_.end(); i <= position; ++i) rc.always_included.push_back(i);
  return rc;
}

namespace {

// Query i's answer into the caller's buffers (at most `capacity` of its rows; its full count),
// in increasing row order when the query asked for it (QueryParams::row_order).
void write_answer(const BatchAnswers& out, int64_t i, const Selection& sel, bool row_order) {
  const int64_t n = static_cast<int64_t>(sel.ids.size()), w = std::min(n, out.capacity), at = i * out.capacity;
  out.counts[i] = n;
  std::copy(sel.ids.begin(), sel.ids.begin() + w, out.ids + at);
  if (out.scores) std::copy(sel.scores.begin(), sel.scores.begin() + w, out.scores + at);
  const bool inclusion = out.inclusion && !sel.inclusion.empty();
  if (inclusion) std::copy(sel.inclusion.begin(), sel.inclusion.begin() + w, out.inclusion + at);
  if (row_order)
    to_row_order(out.ids + at, out.scores ? out.scores + at : nullptr, inclusion ? out.inclusion + at : nullptr, w);
}

// The first error of a batch's worker calls, kept for the caller (workers must not throw).
struct FirstError {
  std::mutex mu;
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  template <typename F>
  void guard(F&& f) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      f();
    } catch (...) {
      std::lock_guard<std::mutex> g(mu);
      if (!error) error = std::current_exception();
      failed = true;
    }
  }
};

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
  FirstError& err;

  void operator()(int64_t i) {
    if (answered && (*answered)[static_cast<size_t>(i)]) return;
    err.guard([&] { answer(i); });
  }
  void answer(int64_t i) {
    thread_local Selection sel;  // cleared, never shrunk: warm threads allocate nothing
    const PartSelector& part = *parts[static_cast<size_t>(i)];
    // Room for every indexed row (no kind returns more), so the first query on a part this size
    // sizes the buffers for all later ones, whatever their candidate counts.
    const size_t most = static_cast<size_t>(part.indexed_rows());
    sel.clear();
    sel.ids.reserve(most);
    sel.scores.reserve(most);
    if (batch.keys) sel.inclusion.reserve(most);
    SelectRequest req;
    req.q = batch.q + i * d;
    req.params = &params;
    req.keys = batch.keys ? &batch.keys[kv_of[static_cast<size_t>(i)]] : nullptr;
    if (!hook || !hook(batch.layer, kv_of[static_cast<size_t>(i)], part, req, sel)) part.select(req, sel);
    write_answer(out, i, sel, params.row_order);
  }
};

// A group's answers into the batch's: query j of the group is the batch's members[j].
class GroupWriter final : public GroupAnswers {
 public:
  GroupWriter(const BatchAnswers& out, const int64_t* members, std::vector<char>& answered, bool row_order)
      : out_(out), members_(members), answered_(answered), row_order_(row_order) {}
  void put(int64_t j, const Selection& sel) override {
    write_answer(out_, members_[j], sel, row_order_);
    answered_[static_cast<size_t>(members_[j])] = 1;
  }
  // In place when the caller's buffers hold every candidate: what write_answer would copy of a
  // selection without inclusion probabilities is then exactly what the selector writes.
  bool room(int64_t j, int64_t count, int64_t*& ids, float*& scores) override {
    if (count > out_.capacity) return false;
    ids = out_.ids + members_[j] * out_.capacity;
    scores = out_.scores ? out_.scores + members_[j] * out_.capacity : nullptr;
    return true;
  }
  void finish(int64_t j, int64_t count) override {
    out_.counts[members_[j]] = count;
    if (row_order_)
      to_row_order(out_.ids + members_[j] * out_.capacity,
                   out_.scores ? out_.scores + members_[j] * out_.capacity : nullptr, nullptr,
                   std::min(count, out_.capacity));
    answered_[static_cast<size_t>(members_[j])] = 1;
  }

 private:
  const BatchAnswers& out_;
  const int64_t* members_;
  std::vector<char>& answered_;
  bool row_order_;
};

// Offers each part's queries of the batch to `group` together, the parts spread over the threads;
// returns which queries were answered. The groups are a counting sort of the queries by kv head
// (members in batch order) in per-thread buffers: nothing is allocated once they have reached the
// batch's sizes.
const std::vector<char>& answer_groups(const QueryBatch& batch, const QueryParams& params, const BatchAnswers& out,
                                       const GroupHook& group, const std::vector<int64_t>& kv_of,
                                       const std::vector<const PartSelector*>& parts, int64_t d, int64_t kv_heads,
                                       int threads, FirstError& err) {
  thread_local std::vector<char> answered_buf;
  thread_local std::vector<int64_t> start_buf, members_buf;
  // The workers see this thread's buffers through these references (a thread_local named inside
  // the lambda would be each worker's own).
  std::vector<char>& answered = answered_buf;
  std::vector<int64_t>&start = start_buf, &members = members_buf;
  const auto n = static_cast<size_t>(batch.count);
  answered.assign(n, 0);
  start.assign(static_cast<size_t>(kv_heads + 1), 0);
  members.resize(n);
  for (size_t i = 0; i < n; ++i) ++start[static_cast<size_t>(kv_of[i]) + 1];
  for (size_t h = 0; h < static_cast<size_t>(kv_heads); ++h) start[h + 1] += start[h];
  for (size_t i = 0; i < n; ++i)
    members[static_cast<size_t>(start[static_cast<size_t>(kv_of[i])]++)] = static_cast<int64_t>(i);
  for (size_t h = static_cast<size_t>(kv_heads); h > 0; --h) start[h] = start[h - 1];  // back to each group's start
  start[0] = 0;
  auto one = [&](int64_t h) {
    const int64_t b = start[static_cast<size_t>(h)], e = start[static_cast<size_t>(h) + 1];
    if (b == e) return;
    err.guard([&] {
      DeviceQueries dq;
      dq.batch_q = batch.q;
      dq.members = members.data() + b;
      dq.count = e - b;
      dq.d = d;
      dq.params = &params;
      dq.keys = batch.keys ? &batch.keys[h] : nullptr;
      dq.stream = batch.stream;
      GroupWriter w(out, dq.members, answered, params.row_order);
      group(batch.layer, h, *parts[static_cast<size_t>(dq.members[0])], dq, w);
    });
  };
  detail::parallel_for(kv_heads, threads, one);
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
  KVT_CHECK(!reranking(params), USAGE, "rerank applies to single queries (query with the host keys), not to batches");
  KVT_CHECK(!top_p_of(params), USAGE, "top_p applies to single queries (query, eval, eval-decode), not to batches");
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
  FirstError err;
  BatchRun run{batch, params, out, hook, parts, kv_of, src.geo.head_dim, nullptr, err};
  // Each part's queries together: to the device tier's group path, else to the part's host one
  // (pq scores its codes once for all of them); the rest one by one. The parts spread over the
  // threads, so a layer's 8 kv heads keep 2 threads busy.
  static const GroupHook host_group = [](int64_t, int64_t, const PartSelector& part, const DeviceQueries& qs,
                                         GroupAnswers& answers) { part.select_batch(qs, answers); };
  const std::vector<char>& answered = answer_groups(batch, params, out, group ? group : host_group, kv_of, parts,
                                                    src.geo.head_dim, src.geo.kv_heads, threads, err);
  run.answered = &answered;
  if (!err.failed && std::find(answered.begin(), answered.end(), 0) != answered.end())
    detail::parallel_for(batch.count, threads, run);
  if (err.error) std::rethrow_exception(err.error);
}

}  // namespace kvtool
