#include "kvtool/progress.h"

#include <unistd.h>

#include <cstdio>

namespace kvtool {

Progress::Progress(std::string label, int64_t total, bool quiet)
    : label_(std::move(label)), total_(total), quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1) {
  start_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::advance(int64_t n) {
  std::lock_guard<std::mutex> lk(mu_);
  done_ += n;
  if (quiet_) return;
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  if ((tty_ && since >= 0.1) || (!tty_ && since >= 5.0)) {
    last_ = now;
    draw(false);
  }
}

void Progress::finish() {
  std::lock_guard<std::mutex> lk(mu_);
  if (finished_) return;
  finished_ = true;
  // Short jobs stay silent in logs; a TTY bar is always closed cleanly.
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (!quiet_ && (tty_ || el >= 5.0) && done_ > 0) draw(true);
}

void Progress::draw(bool final_line) {
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double rate = el > 0 ? static_cast<double>(done_) / el : 0;
  double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0;
  int pct = total_ > 0 ? static_cast<int>(100 * done_ / total_) : 100;
  if (tty_) {
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; ++i) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    std::fprintf(stderr, "\r%s [%s] %lld/%lld parts %3d%%  %.1f parts/s  ETA %.0fs   %s", label_.c_str(), bar,
                 static_cast<long long>(done_), static_cast<long long>(total_), pct, rate, eta, final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s: %lld/%lld parts (%d%%), %.1f parts/s, ETA %.0fs\n", label_.c_str(),
                 static_cast<long long>(done_), static_cast<long long>(total_), pct, rate, eta);
  }
  std::fflush(stderr);
}

}  // namespace kvtool
