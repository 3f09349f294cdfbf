// The loop every kind's PartSelector::select_device_batch runs (runtime layer): a group of queries in
// device batches of at most the backend's capacity, each batch scored at once on the device, then
// each query's selection finished on the host and put, with per-thread buffers that are grown and
// never shrunk, so a warm thread allocates nothing.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvtool/kinds.h"

namespace kvtool {

// One thread's buffers for a kind's device batches: the group's vectors when they must be gathered,
// the device's results (T: float scores, double scores, u16 counts) and one query's selection.
template <typename T>
struct DeviceBatchScratch {
  std::vector<float> q;
  std::vector<T> out;
  Selection sel;
  T* out_for(int64_t n) {
    if (out.size() < static_cast<size_t>(n)) out.resize(static_cast<size_t>(n));
    return out.data();
  }
  static DeviceBatchScratch& of_this_thread() {
    thread_local DeviceBatchScratch s;
    return s;
  }
};

// Runs the group in batches of at most `capacity` queries (0: the device has no room; nothing is
// put): score(first, count) asks the device for queries [first, first + count) of the group and
// returns false when it declines (the rest of the group then goes query by query); answer(j, i, sel)
// fills query j's selection from row i of that batch's results, and it is put.
template <typename T, typename Score, typename Answer>
void run_device_batches(const DeviceQueries& qs, int64_t capacity, GroupAnswers& answers, DeviceBatchScratch<T>& s,
                        Score&& score, Answer&& answer) {
  if (capacity <= 0) return;
  for (int64_t first = 0; first < qs.count; first += capacity) {
    const int64_t count = std::min(capacity, qs.count - first);
    if (!score(first, count)) return;
    for (int64_t i = 0; i < count; ++i) {
      s.sel.clear();
      answer(first + i, i, s.sel);
      answers.put(first + i, s.sel);
    }
  }
}

}  // namespace kvtool
