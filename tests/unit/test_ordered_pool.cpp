// The builder's ordered worker pool (lib/offline/impl/ordered_pool.h): order, the consuming
// thread, failure propagation and the bound on items in flight.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kvtool/ordered_pool.h"

using namespace kvtool;

namespace {

// A few microseconds of uneven work, so that workers finish out of order.
void jitter(int64_t i) { std::this_thread::sleep_for(std::chrono::microseconds((i * 7919) % 13 * 40)); }

}  // namespace

TEST_CASE("ordered pool: consumes every item once, in order, on the calling thread, for any thread count") {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t in_flight : {int64_t{0}, int64_t{1}, int64_t{5}}) {
      const int64_t n = 57;
      std::vector<int64_t> seen;
      std::vector<std::thread::id> consumers;
      std::mutex mu;
      std::vector<std::thread::id> producers;
      std::vector<int> workers;
      run_ordered(
          n, OrderedPoolOptions{threads, in_flight},
          [&](int64_t i, int worker) {
            jitter(i);
            std::lock_guard<std::mutex> lk(mu);  // Catch2 assertions are not thread-safe: check later
            producers.push_back(std::this_thread::get_id());
            workers.push_back(worker);
            return std::make_unique<int64_t>(i * i);  // move-only values travel too
          },
          [&](int64_t i, std::unique_ptr<int64_t>&& v) {
            CHECK(*v == i * i);
            seen.push_back(i);
            consumers.push_back(std::this_thread::get_id());
          });
      INFO("threads " << threads << ", in flight " << in_flight);
      REQUIRE(seen.size() == static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) CHECK(seen[static_cast<size_t>(i)] == i);
      for (auto id : consumers) CHECK(id == std::this_thread::get_id());
      for (auto id : producers) CHECK(id != std::this_thread::get_id());  // workers produce
      for (int w : workers) CHECK((w >= 0 && w < threads));
    }
  }
}

TEST_CASE("ordered pool: no items, no calls") {
  int calls = 0;
  run_ordered(
      0, OrderedPoolOptions{4, 0}, [&](int64_t, int) { return ++calls; }, [&](int64_t, int&&) { ++calls; });
  CHECK(calls == 0);
  CHECK_THROWS(run_ordered(
      3, OrderedPoolOptions{0, 0}, [](int64_t, int) { return 0; }, [](int64_t, int&&) {}));
}

TEST_CASE("ordered pool: the items produced ahead of the consumer never exceed the bound") {
  for (int threads : {1, 2, 4, 8}) {
    for (int64_t in_flight : {int64_t{1}, int64_t{3}, int64_t{0}}) {
      const int64_t bound = in_flight > 0 ? in_flight : 2 * threads;
      std::atomic<int64_t> live{0}, peak{0};
      run_ordered(
          40, OrderedPoolOptions{threads, in_flight},
          [&](int64_t i, int) {
            int64_t now = ++live;
            for (int64_t p = peak.load(); now > p && !peak.compare_exchange_weak(p, now);) {}
            jitter(i);
            return i;
          },
          [&](int64_t, int64_t&&) {
            std::this_thread::sleep_for(std::chrono::microseconds(300));  // a slow consumer
            --live;
          });
      INFO("threads " << threads << ", in flight " << in_flight);
      CHECK(peak.load() <= bound);
      CHECK(peak.load() >= 1);
      CHECK(live.load() == 0);
    }
  }
}

TEST_CASE("ordered pool: a failing item propagates and stops the items after it") {
  for (int threads : {1, 2, 4}) {
    std::atomic<int64_t> started{0};
    std::vector<int64_t> consumed;
    const int64_t n = 10000, bad = 5, bound = 2 * threads;
    try {
      run_ordered(
          n, OrderedPoolOptions{threads, 0},
          [&](int64_t i, int) {
            ++started;
            if (i == bad) throw std::runtime_error("item " + std::to_string(i));
            return i;
          },
          [&](int64_t i, int64_t&&) { consumed.push_back(i); });
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "item 5");
    }
    INFO("threads " << threads);
    CHECK(consumed == std::vector<int64_t>{0, 1, 2, 3, 4});
    // Nothing starts once the failure is known, and nothing past the window of the consumer
    // (which stops at the failed item) could have started before.
    CHECK(started.load() <= bad + bound);
  }
}

TEST_CASE("ordered pool: of several failures the lowest index is reported, whatever finishes first") {
  for (int threads : {2, 4}) {
    try {
      run_ordered(
          20, OrderedPoolOptions{threads, 0},
          [&](int64_t i, int) -> int64_t {
            if (i == 1) {
              std::this_thread::sleep_for(std::chrono::milliseconds(30));  // fails last
              throw std::runtime_error("item 1");
            }
            if (i == 2) throw std::runtime_error("item 2");
            return i;
          },
          [&](int64_t, int64_t&&) {});
      FAIL("no exception");
    } catch (const std::runtime_error& e) {
      CHECK(std::string(e.what()) == "item 1");
    }
  }
}

TEST_CASE("ordered pool: a failing consumer propagates and the workers are joined") {
  std::atomic<int64_t> produced{0};
  CHECK_THROWS_WITH(run_ordered(
                        1000, OrderedPoolOptions{3, 4},
                        [&](int64_t i, int) {
                          ++produced;
                          return i;
                        },
                        [&](int64_t i, int64_t&&) {
                          if (i == 10) throw std::runtime_error("consumer");
                        }),
                    "consumer");
  CHECK(produced.load() <= 10 + 4);  // item i starts only once item i - 4 was consumed
}
