// Progress of long work (builds, merges, appends, eval, synth) for the application to show. The
// library prints nothing: it reports each step to the callback the application installed with
// set_progress_callback() (the tools draw a bar on a TTY, lines otherwise; tools/common/cli.cpp),
// and nothing when none is installed or the call was asked to be quiet. Thread-safe.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace kvtool {

// One report of a piece of long work.
struct ProgressUpdate {
  const std::string& label;  // what runs, e.g. "kvtool-pq build", "kvtool merge"
  int64_t done = 0;          // parts done
  int64_t total = 0;         // parts in all
  double elapsed_s = 0;      // since the work began
  double since_shown_s = 0;  // since the last update the callback showed (or since the work began)
  bool final = false;        // the work ended (reported once, when at least one part was done)
};

// Returns true when it showed the update (since_shown_s then restarts from it). Called with the
// work's lock held: updates of one piece of work never overlap.
using ProgressCallback = std::function<bool(const ProgressUpdate&)>;

// The callback every later piece of work reports to (process-wide); empty: no reports, the default.
void set_progress_callback(ProgressCallback cb);

class Progress {
 public:
  // `quiet`: this piece of work reports nothing, whatever callback is installed.
  Progress(std::string label, int64_t total, bool quiet);
  ~Progress();
  void advance(int64_t n = 1);
  void finish();

 private:
  void report(bool final_update);
  std::string label_;
  int64_t total_, done_ = 0;
  ProgressCallback cb_;  // the installed callback when the work began; empty when quiet
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, shown_;
  std::mutex mu_;
};

}  // namespace kvtool
