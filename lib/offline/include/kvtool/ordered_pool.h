// An ordered worker pool: items are produced in parallel and consumed one by one in index order on
// the calling thread, with a bound on the items produced ahead of the consumer. The builder uses it
// to build parts concurrently yet write them in (layer, kv head) order, so that an artifact is the
// same bytes whatever the thread count, while holding at most `in_flight` built parts in memory.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace kvtool {

struct OrderedPoolOptions {
  int threads = 1;        // worker threads (never more than items); >= 1
  int64_t in_flight = 0;  // items started and not yet consumed, at most; 0: 2 * threads
};

inline int64_t in_flight_bound(const OrderedPoolOptions& opt) {
  return opt.in_flight > 0 ? opt.in_flight : 2 * static_cast<int64_t>(std::max(opt.threads, 1));
}

// The scheduling behind run_ordered, free of the item type. produce(i, worker) runs on a worker
// (worker in [0, threads)); consume(i) runs on the calling thread for i = 0, 1, ... n-1 in order,
// each after produce(i) returned. The first failure stops new items from starting; the exception
// rethrown is that of the lowest failing index (every lower index has started by then, so the
// answer does not depend on timing), or consume's. All workers are joined before it returns.
void run_ordered_erased(int64_t n, const OrderedPoolOptions& opt, const std::function<void(int64_t, int)>& produce,
                        const std::function<void(int64_t)>& consume);

// Runs produce(i, worker) -> T for i in [0, n) on opt.threads workers and consume(i, T&&) on the
// calling thread in order of i. A worker index lets produce keep per-thread scratch buffers.
template <typename Produce, typename Consume>
void run_ordered(int64_t n, const OrderedPoolOptions& opt, Produce&& produce, Consume&& consume) {
  using T = std::invoke_result_t<Produce&, int64_t, int>;
  // A ring of in_flight slots is enough: item i is only started once item i - in_flight was consumed.
  const int64_t ring = in_flight_bound(opt);
  std::vector<std::optional<T>> slots(static_cast<size_t>(ring));
  auto slot = [&](int64_t i) -> std::optional<T>& { return slots[static_cast<size_t>(i % ring)]; };
  run_ordered_erased(
      n, opt, [&](int64_t i, int worker) { slot(i).emplace(produce(i, worker)); },
      [&](int64_t i) {
        T value = std::move(*slot(i));
        slot(i).reset();  // the slot is free before the item that reuses it can start
        consume(i, std::move(value));
      });
}

}  // namespace kvtool
