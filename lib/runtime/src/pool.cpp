// The pool's state, leases, queries and retirement (kvtool/pool.h, docs/runtime.md); the publish
// transaction (begin, commit, cancel) is pool_publish.cpp, what both share pool_internal.h.
#include "kvtool/pool.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "pool_internal.h"

namespace kvtool {

json PoolStats::to_json() const {
  return {{"host", {{"used", host_used}, {"budget", host_budget}}},
          {"device", {{"used", device_used}, {"budget", device_budget}, {"batch_buffers", device_batch_bytes}}},
          {"published", published},
          {"retiring", retiring},
          {"in_flight", in_flight},
          {"orphaned_transfers", orphaned_transfers}};
}

Pool::Pool(PoolOptions opt) : st_(std::make_shared<State>()) {
  KVT_CHECK(opt.host_budget >= 0 && opt.device_budget >= 0, USAGE, "pool budgets must be >= 0");
  KVT_CHECK(opt.device_batch_queries >= 0 && opt.device_batch_queries <= 65535, USAGE,
            "device_batch_queries must be in 0..65535 (got " << opt.device_batch_queries << ")");
  if (!opt.device) opt.device_budget = 0;
  st_->opt = std::move(opt);
}

Pool::~Pool() {
  std::vector<std::shared_ptr<PublishTicket::Work>> orphans;
  std::map<std::string, std::shared_ptr<Generation>> visible;
  {
    std::lock_guard<std::mutex> l(st_->mu);
    orphans.swap(st_->orphans);
    visible.swap(st_->visible);
  }
  orphans.clear();  // each waits for its copy, then frees
  visible.clear();  // leases still held keep their generations (and the pool state) alive
}

bool Pool::device_available() const { return st_->opt.device != nullptr; }

void Pool::set_hooks(PoolHooks h) {
  std::lock_guard<std::mutex> l(st_->mu);
  st_->hooks = std::move(h);
}

Lease Pool::acquire(const std::string& key) {
  std::lock_guard<std::mutex> l(st_->mu);
  auto it = st_->visible.find(key);
  KVT_CHECK(it != st_->visible.end(), NOT_PUBLISHED, "nothing is published under '" << key << "'");
  it->second->last_used = ++st_->tick;
  Lease lease;
  lease.g_ = it->second;
  return lease;
}

CandidateReceipt Pool::query(const std::string& key, int64_t layer, int64_t q_head, const float* q, int64_t position,
                             const QuerySettings& settings, const KeyRows* keys) {
  Lease lease = acquire(key);
  return lease.query(layer, q_head, q, position, *lease.params(settings), keys);
}

bool Pool::retire(const std::string& key, bool wait) {
  std::shared_ptr<Generation> g;
  std::shared_ptr<bool> freed;
  {
    std::lock_guard<std::mutex> l(st_->mu);
    auto it = st_->visible.find(key);
    if (it == st_->visible.end()) return false;
    g = std::move(it->second);
    st_->visible.erase(it);
    st_->retiring.push_back(g);
    freed = g->freed;
  }
  g.reset();
  if (wait) {
    std::unique_lock<std::mutex> l(st_->mu);
    st_->cv.wait(l, [&] { return *freed; });
  }
  return true;
}

size_t Pool::reap() {
  std::vector<std::shared_ptr<PublishTicket::Work>> landed;
  {
    std::lock_guard<std::mutex> l(st_->mu);
    auto& o = st_->orphans;
    for (auto it = o.begin(); it != o.end();) {
      if ((*it)->transfer->ready()) {
        landed.push_back(std::move(*it));
        it = o.erase(it);
      } else {
        ++it;
      }
    }
    auto& r = st_->retiring;
    r.erase(std::remove_if(r.begin(), r.end(), [](const std::weak_ptr<Generation>& g) { return g.expired(); }),
            r.end());
  }
  return landed.size();  // their buffers are freed here, outside the lock
}

PoolStats Pool::stats() {
  reap();
  PoolStats s;
  if (st_->opt.device) s.device_batch_bytes = st_->opt.device->batch_buffer_bytes();  // the backend's own lock
  std::lock_guard<std::mutex> l(st_->mu);
  s.host_used = st_->host_used;
  s.host_budget = st_->opt.host_budget;
  s.device_used = st_->device_used;
  s.device_budget = st_->opt.device_budget;
  s.published = static_cast<int64_t>(st_->visible.size());
  for (const auto& g : st_->retiring) s.retiring += !g.expired();
  s.in_flight = static_cast<int64_t>(st_->in_flight.size());
  s.orphaned_transfers = static_cast<int64_t>(st_->orphans.size());
  return s;
}

std::vector<std::string> Pool::keys() {
  std::lock_guard<std::mutex> l(st_->mu);
  std::vector<std::string> k;
  for (const auto& [key, g] : st_->visible) k.push_back(key);
  return k;
}

int64_t Lease::generation() const { return g_->generation; }
const std::string& Lease::key() const { return g_->key; }
const ArtifactReader& Lease::artifact() const { return *g_->reader; }
bool Lease::on_device() const { return g_->dev.p != nullptr; }

std::unique_ptr<QueryParams> Lease::params(const QuerySettings& settings) const {
  KVT_CHECK(g_, USAGE, "query through an empty lease");
  KVT_CHECK(g_->sel, USAGE, "artifacts of kind '" << g_->reader->kind() << "' cannot be queried");
  return g_->sel->params(settings);
}

CandidateReceipt Lease::query(int64_t layer, int64_t q_head, const float* q, int64_t position,
                              const QueryParams& params, const KeyRows* keys) const {
  KVT_CHECK(g_, USAGE, "query through an empty lease");
  KVT_CHECK(g_->sel, USAGE, "artifacts of kind '" << g_->reader->kind() << "' cannot be queried");
  g_->last_used = ++g_->st->tick;
  SelectHook hook = nullptr;
  bool on_dev = false;
  if (!g_->dev_parts.empty()) {
    hook = [this, &on_dev](int64_t l, int64_t h, const PartSelector& host, const SelectRequest& req, Selection& out) {
      auto it = g_->dev_parts.find({l, h});
      on_dev = it != g_->dev_parts.end() && host.select_device(req, it->second, out);
      return on_dev;
    };
  }
  CandidateReceipt rc = g_->sel->query(layer, q_head, q, position, params, keys, hook);
  rc.pool_generation = g_->generation;
  rc.tier = on_dev ? "device" : "host";
  return rc;
}

void Lease::query_batch(const QueryBatch& batch, const QueryParams& params, const BatchAnswers& out,
                        int threads) const {
  KVT_CHECK(g_, USAGE, "query through an empty lease");
  KVT_CHECK(g_->sel, USAGE, "artifacts of kind '" << g_->reader->kind() << "' cannot be queried");
  g_->last_used = ++g_->st->tick;
  const Generation* g = g_.get();  // one pointer: the hooks stay within std::function's own storage
  SelectHook hook = nullptr;
  GroupHook group = nullptr;
  if (!g->dev_parts.empty()) {
    g_->st->opt.device->prepare_stream(batch.stream);
    hook = [g](int64_t l, int64_t h, const PartSelector& host, const SelectRequest& req, Selection& sel) {
      auto it = g->dev_parts.find({l, h});
      return it != g->dev_parts.end() && host.select_device(req, it->second, sel);
    };
    group = [g](int64_t l, int64_t h, const PartSelector& host, const DeviceQueries& qs, GroupAnswers& answers) {
      auto it = g->dev_parts.find({l, h});
      if (it != g->dev_parts.end()) host.select_device_batch(it->second, qs, answers);
    };
  }
  g_->sel->query_batch(batch, params, out, threads, hook, group);
}

DeviceStepPlan::DeviceStepPlan() = default;
DeviceStepPlan::DeviceStepPlan(DeviceStepPlan&&) noexcept = default;
DeviceStepPlan& DeviceStepPlan::operator=(DeviceStepPlan&&) noexcept = default;
DeviceStepPlan::~DeviceStepPlan() = default;

void DeviceStepPlan::enqueue(const float* q, int64_t* ids, float* scores, void* stream) {
  KVT_CHECK(step_, USAGE, "enqueue on an empty device step plan");
  KVT_CHECK(q && ids && scores, USAGE, "a device step needs its query, id and score buffers");
  step_->enqueue(q, ids, scores, stream);
}

DeviceStepPlan Lease::plan_device_step(int64_t layer, const int64_t* q_heads, int64_t count,
                                       const QueryParams& params) const {
  KVT_CHECK(g_, USAGE, "plan through an empty lease");
  KVT_CHECK(g_->sel && !g_->dev_parts.empty(), USAGE,
            "a device step needs a generation on the device tier (publish with device = true)");
  const auto& src = g_->reader->source();
  KVT_CHECK(q_heads, USAGE, "a device step needs its query heads");
  KVT_CHECK(count >= 1 && count <= 65535, USAGE, "a device step has 1..65535 queries (got " << count << ")");
  KVT_CHECK(!reranking(params), USAGE, "rerank applies to single queries (Lease::query with the host keys)");
  KVT_CHECK(!top_p_of(params), USAGE, "top_p applies to single queries (Lease::query), not to a device step");
  KVT_CHECK(layer >= 0 && layer < src.geo.layers, USAGE, "layer " << layer << " is outside 0-" << src.geo.layers - 1);
  std::map<int64_t, PqStepGroup> groups;  // by kv head
  int64_t per = -1;
  for (int64_t i = 0; i < count; ++i) {
    KVT_CHECK(q_heads[i] >= 0 && q_heads[i] < src.geo.q_heads, USAGE,
              "q head " << q_heads[i] << " is outside 0-" << src.geo.q_heads - 1);
    const int64_t kv = src.id.q_to_kv_head[static_cast<size_t>(q_heads[i])];
    auto [it, first] = groups.try_emplace(kv);
    if (first) {
      const auto dp = g_->dev_parts.find({layer, kv});
      int64_t top = 0;
      KVT_CHECK(dp != g_->dev_parts.end() && g_->sel->part(layer, kv).device_pq_selection(
                                                 dp->second, params, it->second.part, top, it->second.row_base),
                USAGE,
                "part (layer " << layer << ", kv head " << kv << ") of this '" << g_->reader->kind()
                               << "' generation has no selection that runs whole on the device (pq parts do)");
      const int64_t rows = std::min(top, it->second.part.n);
      KVT_CHECK(per < 0 || rows == per, USAGE, "the parts of a device step give different row counts");
      KVT_CHECK(rows >= 1 && rows <= kMaxDeviceTop, USAGE,
                "a device step selects 1.." << kMaxDeviceTop << " rows per query (this budget gives " << rows << ")");
      per = rows;
    }
    it->second.members.push_back(i);
  }
  std::vector<PqStepGroup> list;
  for (auto& [kv, grp] : groups) list.push_back(std::move(grp));
  DeviceStepPlan plan;
  plan.step_ = g_->st->opt.device->make_pq_step(list, per, per);
  KVT_CHECK(plan.step_, DEVICE_UNAVAILABLE,
            "the device backend '" << g_->st->opt.device->name() << "' has no device-resident PQ selection");
  plan.lease_ = *this;
  plan.count_ = count;
  plan.per_ = per;
  return plan;
}

}  // namespace kvtool
