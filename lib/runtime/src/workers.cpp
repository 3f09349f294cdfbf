#include "workers.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace kvtool::detail {

namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins before a blocking wait (a wake-up through the kernel costs tens of microseconds on a VM,
// as much as a whole query): about 50-100 us of pause instructions.
constexpr int kSpins = 2000;

// The job the workers run: helpers [0, helpers) take indices from `next` until it passes n.
class Workers {
 public:
  void run(int64_t n, int threads, void (*call)(void*, int64_t), void* ctx) {
    std::unique_lock<std::mutex> job(job_mu_, std::try_to_lock);
    if (!job.owns_lock()) return serial(n, call, ctx);                            // another batch holds the workers
    const int helpers = static_cast<int>(std::min<int64_t>(threads - 1, n - 1));  // threads <= max_threads()
    {
      std::lock_guard<std::mutex> g(mu_);
      while (static_cast<int>(threads_.size()) < helpers) {
        const int id = static_cast<int>(threads_.size());
        threads_.emplace_back([this, id] { loop(id); });
      }
      call_ = call;
      ctx_ = ctx;
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      helpers_ = helpers;
      pending_ = helpers;
      pending_now_.store(helpers, std::memory_order_relaxed);
      ++epoch_;
      published_.store(epoch_, std::memory_order_release);
    }
    start_.notify_all();
    work();
    for (int s = 0; s < kSpins && pending_now_.load(std::memory_order_acquire) > 0; ++s) cpu_relax();
    std::unique_lock<std::mutex> g(mu_);
    done_.wait(g, [&] { return pending_ == 0; });
  }

 private:
  static void serial(int64_t n, void (*call)(void*, int64_t), void* ctx) {
    for (int64_t i = 0; i < n; ++i) call(ctx, i);
  }
  void work() {
    for (int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_;) call_(ctx_, i);
  }
  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      for (int s = 0; s < kSpins && published_.load(std::memory_order_acquire) == seen; ++s) cpu_relax();
      std::unique_lock<std::mutex> g(mu_);
      start_.wait(g, [&] { return epoch_ != seen; });
      seen = epoch_;
      if (id >= helpers_) continue;  // not needed for this job
      g.unlock();
      work();
      g.lock();
      pending_now_.store(--pending_, std::memory_order_release);
      if (pending_ == 0) done_.notify_one();
    }
  }

  std::mutex job_mu_;  // held by the batch that owns the workers
  std::mutex mu_;      // guards everything below except next_
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  uint64_t epoch_ = 0;
  int helpers_ = 0, pending_ = 0;
  void (*call_)(void*, int64_t) = nullptr;
  void* ctx_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<uint64_t> published_{0};  // epoch_, for the spinning workers
  std::atomic<int> pending_now_{0};     // pending_, for the spinning caller
};

// The process's workers. Never destroyed: a batch may still run on another thread while static
// objects are destroyed at exit (Python releases the GIL around batches). A child made by fork()
// has none of its parent's threads, so it starts its own set (the parent's object is left behind).
Workers& workers() {
  static std::mutex& m = *new std::mutex;  // never destroyed either
  static Workers* w = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> g(m);
  if (!w || owner != getpid()) {
    w = new Workers;
    owner = getpid();
  }
  return *w;
}

}  // namespace

int max_threads() {
  static const int n = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return n;
}

void run_parallel(int64_t n, int threads, void (*call)(void* ctx, int64_t i), void* ctx) {
  if (n <= 0) return;
  threads = std::min(threads, max_threads());  // more threads than CPUs would only wait on each other
  if (threads <= 1 || n == 1) {
    for (int64_t i = 0; i < n; ++i) call(ctx, i);
    return;
  }
  workers().run(n, threads, call, ctx);
}

}  // namespace kvtool::detail
