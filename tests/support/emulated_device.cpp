#include "emulated_device.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <utility>

#include "kvtool/error.h"
#include "kvtool/scoring.h"

namespace kvtool::test {

struct EmulatedDevice::State {
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
    bool done = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  bool auto_complete = true;
  std::vector<std::shared_ptr<Copy>> copies;
  int64_t device_live = 0, host_live = 0;
  std::atomic<int64_t> scoring_calls{0};
  std::mutex batch_mu;  // guards the batch buffers below
  PqBatchLimits limits;
  std::vector<float> lut, score;
  std::vector<int64_t> order;
  ScoreBatchLimits score_limits;
  std::vector<uint32_t> codes, wide_ids;  // a SimHash batch's codes and one table's ids as u32
  int64_t batch_calls = 0;
  // A batch the reserved buffers hold is counted and answered (caller holds batch_mu).
  bool take_score_batch(const ScoreBatchLimits& need, void* stream) {
    if (!score_limits.covers(need)) return false;
    ++batch_calls;
    last_stream = stream;
    scoring_calls += need.max_queries;
    return true;
  }
  void* last_stream = nullptr;
  void* prepared_stream = nullptr;
  std::vector<std::pair<void*, size_t>> sizes;  // live allocations (device and host)
  void land(Copy& c) {                          // caller holds mu
    if (c.done) return;
    if (c.bytes) std::memcpy(c.dst, c.src, c.bytes);
    c.done = true;
    cv.notify_all();
  }
  void* alloc(size_t bytes, int64_t& live) {
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    if (!p) return nullptr;
    std::lock_guard<std::mutex> l(mu);
    live += static_cast<int64_t>(bytes);
    sizes.emplace_back(p, bytes);
    return p;
  }
  void release(void* p, int64_t& live) {
    if (!p) return;
    std::lock_guard<std::mutex> l(mu);
    for (auto it = sizes.begin(); it != sizes.end(); ++it)
      if (it->first == p) {
        live -= static_cast<int64_t>(it->second);
        sizes.erase(it);
        break;
      }
    std::free(p);
  }
};

class EmulatedDevice::EmulatedTransfer : public Transfer {
 public:
  EmulatedTransfer(std::shared_ptr<State> st, std::shared_ptr<State::Copy> c) : st_(std::move(st)), c_(std::move(c)) {}
  bool ready() override {
    std::lock_guard<std::mutex> l(st_->mu);
    return c_->done;
  }
  void wait() override {
    std::unique_lock<std::mutex> l(st_->mu);
    st_->cv.wait(l, [&] { return c_->done; });
  }

 private:
  std::shared_ptr<State> st_;
  std::shared_ptr<State::Copy> c_;
};

EmulatedDevice::EmulatedDevice(bool auto_complete) : st_(std::make_shared<State>()) {
  st_->auto_complete = auto_complete;
}
// Copies still pending would leave their waiters blocked forever: land them first.
EmulatedDevice::~EmulatedDevice() { deliver_all(); }

void* EmulatedDevice::host_alloc(size_t bytes) { return st_->alloc(bytes, st_->host_live); }
void EmulatedDevice::host_free(void* p) { st_->release(p, st_->host_live); }
void* EmulatedDevice::device_alloc(size_t bytes) { return st_->alloc(bytes, st_->device_live); }
void EmulatedDevice::device_free(void* p) { st_->release(p, st_->device_live); }

std::unique_ptr<Transfer> EmulatedDevice::copy_to_device(void* dst, const void* src, size_t bytes) {
  auto c = std::make_shared<State::Copy>(State::Copy{dst, src, bytes});
  std::lock_guard<std::mutex> l(st_->mu);
  st_->copies.push_back(c);
  if (st_->auto_complete) st_->land(*c);
  return std::make_unique<EmulatedTransfer>(st_, c);
}

void EmulatedDevice::copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}

namespace {
// One query's PQ selection by the host arithmetic (every emulated PQ path): lut [m * k], score [n]
// and order [min(top, n)] are the caller's; returns how many rows order holds.
int64_t host_pq_select(const ProductCodes& p, const float* q, int64_t top, float* lut, float* score, int64_t* order) {
  scoring::pq_lut(q, static_cast<const float*>(p.centroids), p.m, p.k, p.dsub, lut);
  if (p.code_bytes == 1)
    scoring::pq_scores_u8(lut, static_cast<const uint8_t*>(p.codes), p.n, p.m, p.k, score);
  else
    scoring::pq_scores_u16(lut, static_cast<const uint16_t*>(p.codes), p.n, p.m, p.k, score);
  return scoring::top_k_into(score, p.n, top, order);
}
}  // namespace

void EmulatedDevice::product_code_top_k(const ProductCodes& p, const float* q, int64_t k, std::vector<int64_t>& ids,
                                        std::vector<float>& scores) {
  ++st_->scoring_calls;
  std::vector<float> lut(static_cast<size_t>(p.m * p.k)), score(static_cast<size_t>(p.n));
  ids.resize(static_cast<size_t>(p.n));
  ids.resize(static_cast<size_t>(host_pq_select(p, q, k, lut.data(), score.data(), ids.data())));
  scores.clear();
  for (int64_t i : ids) scores.push_back(score[static_cast<size_t>(i)]);
}

namespace {
class EmulatedPqStep : public DeviceStep {
 public:
  EmulatedPqStep(std::vector<PqStepGroup> groups, int64_t top, int64_t stride)
      : groups_(std::move(groups)), top_(top), stride_(stride) {}
  void enqueue(const float* q, int64_t* ids, float* scores, void*) override {
    for (const PqStepGroup& g : groups_) {
      const ProductCodes& p = g.part;
      lut_.resize(static_cast<size_t>(p.m * p.k));
      score_.resize(static_cast<size_t>(p.n));
      order_.resize(static_cast<size_t>(p.n));
      for (int64_t i : g.members) {
        const int64_t kept = host_pq_select(p, q + i * p.m * p.dsub, top_, lut_.data(), score_.data(), order_.data());
        for (int64_t r = 0; r < kept; ++r) {
          ids[i * stride_ + r] = g.row_base + order_[static_cast<size_t>(r)];
          scores[i * stride_ + r] = score_[static_cast<size_t>(order_[static_cast<size_t>(r)])];
        }
      }
    }
  }

 private:
  std::vector<PqStepGroup> groups_;
  int64_t top_, stride_;
  std::vector<float> lut_, score_;
  std::vector<int64_t> order_;
};
}  // namespace

std::unique_ptr<DeviceStep> EmulatedDevice::make_pq_step(const std::vector<PqStepGroup>& groups, int64_t top,
                                                         int64_t stride) {
  return std::make_unique<EmulatedPqStep>(groups, top, stride);
}

void EmulatedDevice::prepare_stream(void* stream) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  st_->prepared_stream = stream;
}

void* EmulatedDevice::last_prepared_stream() const {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  return st_->prepared_stream;
}

void EmulatedDevice::reserve_pq_batches(const PqBatchLimits& l) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  PqBatchLimits& b = st_->limits;
  b = b.merged(l);
  st_->lut.resize(static_cast<size_t>(b.max_subspaces * b.max_centroids));
  st_->score.resize(static_cast<size_t>(b.max_rows));
  st_->order.resize(static_cast<size_t>(b.max_top));
}

int64_t EmulatedDevice::pq_batch_capacity(const ProductCodes& p, int64_t top) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  return st_->limits.capacity_for(p, top);
}

bool EmulatedDevice::product_code_top_k_batch(const ProductCodes& p, const float* q, int64_t count, int64_t top,
                                              void* stream, int64_t* ids, float* scores) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  const int64_t per = std::min(top, p.n);
  if (!st_->limits.covers(PqBatchLimits::of(p, count, top))) return false;
  ++st_->batch_calls;
  st_->last_stream = stream;
  st_->scoring_calls += count;
  for (int64_t i = 0; i < count; ++i) {
    host_pq_select(p, q + i * p.m * p.dsub, per, st_->lut.data(), st_->score.data(), st_->order.data());
    for (int64_t r = 0; r < per; ++r) {
      ids[i * per + r] = st_->order[static_cast<size_t>(r)];
      scores[i * per + r] = st_->score[static_cast<size_t>(st_->order[static_cast<size_t>(r)])];
    }
  }
  return true;
}

void EmulatedDevice::reserve_score_batches(const ScoreBatchLimits& l) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  ScoreBatchLimits& b = st_->score_limits;
  b = b.merged(l);
  st_->codes.resize(static_cast<size_t>(b.max_hash_columns));  // tables <= bits x tables
  st_->wide_ids.resize(static_cast<size_t>(b.max_rows));
}

int64_t EmulatedDevice::batch_buffer_bytes() {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  const State& s = *st_;
  return static_cast<int64_t>((s.lut.size() + s.score.size()) * sizeof(float) + s.order.size() * sizeof(int64_t) +
                              (s.codes.size() + s.wide_ids.size()) * sizeof(uint32_t));
}

int64_t EmulatedDevice::score_batch_capacity(const ScoreBatchLimits& one) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  return st_->score_limits.capacity_for(one);
}

bool EmulatedDevice::dot_scores_batch(const float* centroids, int64_t rows, int64_t d, const float* q, int64_t count,
                                      void* stream, float* out) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  if (!st_->take_score_batch({count, d, rows, 0}, stream)) return false;
  for (int64_t i = 0; i < count; ++i) scoring::dot_scores(q + i * d, centroids, rows, d, out + i * rows);
  return true;
}

bool EmulatedDevice::dot_scores_f64_batch(const float* centroids, int64_t rows, int64_t d, double scale, const float* q,
                                          int64_t count, void* stream, double* out) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  if (!st_->take_score_batch({count, d, rows, 0}, stream)) return false;
  for (int64_t i = 0; i < count; ++i)
    scoring::dot_scores_f64(q + i * d, centroids, nullptr, rows, d, scale, out + i * rows);
  return true;
}

bool EmulatedDevice::simhash_collisions_batch(const float* w, const uint32_t* offsets, const void* ids, int id_bytes,
                                              int64_t d, int64_t bits, int64_t tables, int64_t n, int64_t base,
                                              const float* q, int64_t count, void* stream, uint16_t* counts,
                                              int64_t stride) {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  if (!st_->take_score_batch({count, d, n, bits * tables}, stream)) return false;
  const int64_t buckets = int64_t{1} << bits;
  for (int64_t i = 0; i < count; ++i) {
    uint16_t* c = counts + i * stride;
    std::fill(c, c + n, uint16_t{0});
    scoring::simhash_codes(q + i * d, d, w, bits, tables, st_->codes.data());
    for (int64_t t = 0; t < tables; ++t) {  // one table at a time: its ids widened to the host's u32
      for (int64_t r = 0; r < n; ++r)
        st_->wide_ids[static_cast<size_t>(r)] =
            id_bytes == 2 ? static_cast<const uint16_t*>(ids)[t * n + r] : static_cast<const uint32_t*>(ids)[t * n + r];
      scoring::collision_counts(st_->codes.data() + t, offsets + t * (buckets + 1), st_->wide_ids.data(), 1, buckets, n,
                                base, c);
    }
  }
  return true;
}

int64_t EmulatedDevice::batch_calls() const {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  return st_->batch_calls;
}

void* EmulatedDevice::last_stream() const {
  std::lock_guard<std::mutex> g(st_->batch_mu);
  return st_->last_stream;
}

void EmulatedDevice::dot_scores(const float* centroids, int64_t count, int64_t d, const float* q, float* out) {
  ++st_->scoring_calls;
  scoring::dot_scores(q, centroids, count, d, out);
}

void EmulatedDevice::dot_scores_f64(const float* centroids, const int64_t* rows, int64_t count, int64_t d, double scale,
                                    const float* q, double* out) {
  ++st_->scoring_calls;
  scoring::dot_scores_f64(q, centroids, rows, count, d, scale, out);
}

void EmulatedDevice::simhash_collisions(const float* w, const uint32_t* offsets, const void* ids, int id_bytes,
                                        int64_t d, int64_t bits, int64_t tables, int64_t n, int64_t base,
                                        const float* q, uint32_t* codes, uint16_t* count) {
  ++st_->scoring_calls;
  // The host arithmetic takes u32 ids; the device image may store u16.
  std::vector<uint32_t> wide(static_cast<size_t>(tables * n));
  for (size_t i = 0; i < wide.size(); ++i)
    wide[i] = id_bytes == 2 ? static_cast<const uint16_t*>(ids)[i] : static_cast<const uint32_t*>(ids)[i];
  scoring::simhash_codes(q, d, w, bits, tables, codes);
  std::fill(count, count + n, uint16_t{0});
  scoring::collision_counts(codes, offsets, wide.data(), tables, int64_t{1} << bits, n, base, count);
}

int64_t EmulatedDevice::scoring_calls() const { return st_->scoring_calls.load(); }

size_t EmulatedDevice::started() const {
  std::lock_guard<std::mutex> l(st_->mu);
  return st_->copies.size();
}
void EmulatedDevice::deliver(size_t i) {
  std::lock_guard<std::mutex> l(st_->mu);
  KVT_CHECK(i < st_->copies.size(), INTERNAL, "no emulated copy #" << i);
  st_->land(*st_->copies[i]);
}
void EmulatedDevice::deliver_all() {
  std::lock_guard<std::mutex> l(st_->mu);
  for (auto& c : st_->copies) st_->land(*c);
}
int64_t EmulatedDevice::device_bytes_live() const {
  std::lock_guard<std::mutex> l(st_->mu);
  return st_->device_live;
}
int64_t EmulatedDevice::host_bytes_live() const {
  std::lock_guard<std::mutex> l(st_->mu);
  return st_->host_live;
}

}  // namespace kvtool::test
