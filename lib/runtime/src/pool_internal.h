// What the pool's two halves share (private to kvtool_runtime): pool.cpp (the pool's state,
// leases, queries, retirement) and pool_publish.cpp (the publish transaction: reserve, copy,
// validate, the device tier, commit). The contract is kvtool/pool.h; the design docs/runtime.md.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/pool.h"

namespace kvtool {

namespace pool_internal {

using Clock = std::chrono::steady_clock;

struct Fence {
  size_t slot = 0;
  uint64_t alloc_gen = 0, owner = 0, transfer_gen = 0;
};

}  // namespace pool_internal

struct Pool::State {
  struct Slot {
    uint64_t alloc_gen = 0, owner = 0, transfer_gen = 0;
  };
  PoolOptions opt;
  PoolHooks hooks;
  std::mutex mu;
  std::condition_variable cv;
  int64_t host_used = 0, device_used = 0;
  std::vector<Slot> slots;
  std::map<std::string, std::shared_ptr<Generation>> visible;
  std::vector<std::weak_ptr<Generation>> retiring;
  std::vector<std::shared_ptr<PublishTicket::Work>> orphans;  // cancelled, copy still in flight
  std::set<uint64_t> in_flight;
  uint64_t next_ticket = 1;
  int64_t next_generation = 1;
  std::atomic<uint64_t> tick{0};

  bool matches(const pool_internal::Fence& f) const {
    if (f.slot >= slots.size()) return false;
    const Slot& s = slots[f.slot];
    return s.alloc_gen == f.alloc_gen && s.owner == f.owner && s.transfer_gen == f.transfer_gen;
  }
  void free_slot(const pool_internal::Fence& f) {  // caller holds mu; only the owner frees its slot
    if (!matches(f)) return;
    slots[f.slot].owner = 0;
    ++slots[f.slot].transfer_gen;
    in_flight.erase(f.owner);
  }
};

namespace pool_internal {

// Bytes charged to the tiers; returned, and waiters woken, on destruction.
class Charge {
 public:
  Charge(std::shared_ptr<Pool::State> st, int64_t host, int64_t device)
      : st_(std::move(st)), host_(host), device_(device) {}
  ~Charge() {
    std::lock_guard<std::mutex> l(st_->mu);
    st_->host_used -= host_;
    st_->device_used -= device_;
    st_->cv.notify_all();
  }
  int64_t host() const { return host_; }
  // Returns the host bytes beyond `host` (a reservation made at an upper bound, once measured).
  void shrink_host(int64_t host) {
    std::lock_guard<std::mutex> l(st_->mu);
    if (host >= host_) return;
    st_->host_used -= host_ - host;
    host_ = host;
    st_->cv.notify_all();
  }
  int64_t device() const { return device_; }

 private:
  std::shared_ptr<Pool::State> st_;
  int64_t host_, device_;
};

// Host memory (page-locked through the device backend when there is one) or device memory.
struct Buffer {
  std::shared_ptr<DeviceBackend> dev;
  bool on_device = false;
  uint8_t* p = nullptr;
  size_t n = 0;
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void allocate(std::shared_ptr<DeviceBackend> d, bool device, size_t bytes) {
    dev = std::move(d);
    on_device = device;
    n = bytes;
    size_t alloc = std::max<size_t>(bytes, 1);
    if (device)
      p = static_cast<uint8_t*>(dev->device_alloc(alloc));
    else if (dev)
      p = static_cast<uint8_t*>(dev->host_alloc(alloc));
    else
      p = static_cast<uint8_t*>(std::aligned_alloc(64, (alloc + 63) / 64 * 64));
    KVT_CHECK(p, device ? DEVICE_BUDGET_EXCEEDED : HOST_BUDGET_EXCEEDED,
              "the " << (device ? "device" : "host") << " could not allocate " << bytes << " bytes within the budget");
  }
  void reset() {
    if (p) {
      if (on_device)
        dev->device_free(p);
      else if (dev)
        dev->host_free(p);
      else
        std::free(p);
    }
    p = nullptr;
    n = 0;
  }
  ~Buffer() { reset(); }
};

}  // namespace pool_internal

struct Generation {
  std::shared_ptr<Pool::State> st;
  std::string key;
  int64_t generation = 0, index_generation = 0;
  std::vector<std::unique_ptr<pool_internal::Charge>> charges;
  pool_internal::Buffer image, dev;
  std::unique_ptr<ArtifactReader> reader;
  std::unique_ptr<SelectorSet> sel;
  std::map<std::pair<int64_t, int64_t>, DevicePart> dev_parts;
  std::atomic<uint64_t> last_used{0};
  std::shared_ptr<bool> freed = std::make_shared<bool>(false);

  ~Generation() {
    sel.reset();
    reader.reset();
    dev.reset();
    image.reset();
    charges.clear();
    std::lock_guard<std::mutex> l(st->mu);
    *freed = true;
    st->cv.notify_all();
  }
};

struct PublishTicket::Work {
  std::weak_ptr<Pool::State> st;
  PublishRequest req;
  pool_internal::Fence fence;
  std::shared_ptr<Generation> gen;
  pool_internal::Buffer staging;  // the raw section image: source of the device copy, then its read-back
  std::unique_ptr<pool_internal::Charge> staging_charge;
  std::unique_ptr<Transfer> transfer;
  Digest staged{};
  pool_internal::Clock::time_point copy_start;
  PublishReceipt rc;
  bool done = false;
  ~Work() {
    // A copy may still be reading the staging buffer and writing the device buffer: neither is
    // freed before it landed.
    if (transfer) {
      try {
        transfer->wait();
      } catch (...) {}
    }
    gen.reset();  // release the generation under construction before the staging charge
  }
};

}  // namespace kvtool
