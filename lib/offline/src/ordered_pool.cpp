#include "kvtool/ordered_pool.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "kvtool/builder.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

// The shared state of one run: which items are taken, finished and consumed. Per-item state lives
// in a ring of in_flight entries, like the values in run_ordered.
class Scheduler {
 public:
  Scheduler(int64_t n, int64_t in_flight)
      : n_(n), window_(in_flight), ready_(static_cast<size_t>(in_flight)), err_(static_cast<size_t>(in_flight)) {}

  // The next item for a worker, once it fits in the window; false when there is none or a
  // failure stopped the run.
  bool take(int64_t& i) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return stop_ || next_ >= n_ || next_ < consumed_ + window_; });
    if (stop_ || next_ >= n_) return false;
    i = next_++;
    return true;
  }

  // A failed item stops the others from starting at once; items already taken still finish, and
  // the consumer reports the failure when it reaches the item.
  void finish(int64_t i, std::exception_ptr err) {
    std::lock_guard<std::mutex> lk(mu_);
    if (err) stop_ = true;
    err_[slot(i)] = std::move(err);
    ready_[slot(i)] = true;
    cv_.notify_all();
  }

  // Blocks until item i is produced; its failure, if any.
  std::exception_ptr wait(int64_t i) {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return static_cast<bool>(ready_[slot(i)]); });
    return err_[slot(i)];
  }

  void consumed(int64_t i) {
    std::lock_guard<std::mutex> lk(mu_);
    ready_[slot(i)] = false;
    consumed_ = i + 1;
    cv_.notify_all();
  }

  void stop() {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
  }

 private:
  size_t slot(int64_t i) const { return static_cast<size_t>(i % window_); }

  const int64_t n_, window_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_ = 0, consumed_ = 0;
  bool stop_ = false;
  std::vector<char> ready_;  // char, not bool: no shared bits between slots
  std::vector<std::exception_ptr> err_;
};

}  // namespace

void run_ordered_erased(int64_t n, const OrderedPoolOptions& opt, const std::function<void(int64_t, int)>& produce,
                        const std::function<void(int64_t)>& consume) {
  KVT_CHECK(opt.threads >= 1 && opt.threads <= kMaxThreads, USAGE,
            "threads must be 1 to " << kMaxThreads << ", got " << opt.threads);
  if (n <= 0) return;
  Scheduler sched(n, in_flight_bound(opt));
  std::vector<std::thread> workers;
  std::exception_ptr failure;
  try {
    for (int w = 0; w < std::min<int64_t>(opt.threads, n); ++w)
      workers.emplace_back([&sched, &produce, w] {
        int64_t i;
        while (sched.take(i)) {
          std::exception_ptr err;
          try {
            produce(i, w);
          } catch (...) {
            err = std::current_exception();
          }
          sched.finish(i, std::move(err));
        }
      });
    for (int64_t i = 0; i < n; ++i) {
      if (std::exception_ptr err = sched.wait(i)) std::rethrow_exception(err);
      consume(i);
      sched.consumed(i);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  sched.stop();
  for (auto& t : workers) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace kvtool
