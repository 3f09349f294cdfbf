// Progress reporting on stderr for long work: a redrawn bar on a TTY, plain lines every few
// seconds otherwise, nothing when quiet (docs/architecture.md). Thread-safe.
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kvtool {

class Progress {
 public:
  Progress(std::string label, int64_t total, bool quiet);
  ~Progress();
  void advance(int64_t n = 1);
  void finish();

 private:
  void draw(bool final_line);
  std::string label_;
  int64_t total_, done_ = 0;
  bool quiet_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
  std::mutex mu_;
};

}  // namespace kvtool
