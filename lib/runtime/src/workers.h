// Persistent worker threads for batched queries (query.cpp): a batch of independent queries
// spreads over up to `threads` threads, the caller's included. The workers are started on first
// use and kept, so their per-thread scratch (scoring, selection) stays warm and a batch allocates
// nothing once warm. One batch at a time holds the workers; a batch that finds them busy runs on
// its caller's thread alone (same answers, no waiting on another caller).
#pragma once
#include <cstdint>

namespace kvtool::detail {

// The most threads a batch uses: the CPUs this process may run on (at least 1).
int max_threads();

// Calls call(ctx, i) once for every i in [0, n), on up to min(threads, max_threads()) threads;
// returns when all calls returned. `call` must not throw (callers catch inside and keep the first
// error).
void run_parallel(int64_t n, int threads, void (*call)(void* ctx, int64_t i), void* ctx);

template <typename F>
void parallel_for(int64_t n, int threads, F& fn) {
  run_parallel(
      n, threads, [](void* c, int64_t i) { (*static_cast<F*>(c))(i); }, &fn);
}

}  // namespace kvtool::detail
