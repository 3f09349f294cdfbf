#include "kvtool/progress.h"

#include <utility>

namespace kvtool {

namespace {
std::mutex g_callback_mu;
ProgressCallback& installed_callback() {
  static ProgressCallback cb;
  return cb;
}
}  // namespace

void set_progress_callback(ProgressCallback cb) {
  std::lock_guard<std::mutex> lk(g_callback_mu);
  installed_callback() = std::move(cb);
}

Progress::Progress(std::string label, int64_t total, bool quiet) : label_(std::move(label)), total_(total) {
  if (!quiet) {
    std::lock_guard<std::mutex> lk(g_callback_mu);
    cb_ = installed_callback();
  }
  start_ = shown_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(int64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  done_ += n;
  if (cb_) report(false);
}

void Progress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return;
  finished_ = true;
  if (cb_ && done_ > 0) report(true);
}

void Progress::report(bool final_update) {
  const auto now = std::chrono::steady_clock::now();
  const ProgressUpdate u{label_,
                         done_,
                         total_,
                         std::chrono::duration<double>(now - start_).count(),
                         std::chrono::duration<double>(now - shown_).count(),
                         final_update};
  try {
    if (cb_(u)) shown_ = now;
  } catch (...) {  // a failing display never fails the work (finish() runs in a destructor)
  }
}

}  // namespace kvtool
