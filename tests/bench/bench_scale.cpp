// Benchmark (ctest -L bench, or by hand): how each kind's build grows with the
// context length. For T = 8,192, 32,768 and 131,072 rows of a synthetic [1, 8, T, 128] fp16 dump
// (64 queries at the last positions, so squeeze calibrates on its default observation window), runs
// `kvtool-KIND build` with defaults as its own process, best of N rounds, and prints each time, its
// peak RSS and time(128K) / time(32K) per kind. Linear growth is 4; the targets are <= 5 and a peak
// RSS under 1 GiB (exit 1 when a kind misses either).
//
//   kvtool_bench_scale [--tokens A,B,C] [--kinds pq,clusterkv,lsh,squeeze] [--threads N] [--rounds N]
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.h"
#include "env.h"  // tools/common

using namespace kvtool;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

struct Cell {
  bench::Samples time;
  double rss_mib = 0;
};

// Builds `kind` over `dump` `rounds` times (the page cache warmed once first).
Cell measure(const std::string& bin_dir, const std::string& kind, const std::string& dump, int threads, int rounds) {
  const std::string out = bench::bench_dir() + "/scale." + kind + ".kvi";
  Cell c;
  bench::warm_page_cache(dump);
  for (int r = 0; r < rounds; ++r)
    c.time.s.push_back(bench::run_child_ok({bin_dir + "/kvtool-" + kind, "build", dump, "-o", out, "--force",
                                            "--threads", std::to_string(threads), "--quiet"},
                                           &c.rss_mib));
  std::remove(out.c_str());
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  std::string bin_dir = KVTOOL_BENCH_BIN_DIR, tokens_arg = "8192,32768,131072", kinds_arg = "pq,clusterkv,lsh,squeeze";
  int threads = cli::default_threads(), n_rounds = bench::rounds(3);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc)
      tokens_arg = argv[++i];
    else if (a == "--kinds" && i + 1 < argc)
      kinds_arg = argv[++i];
    else if (a == "--threads" && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      n_rounds = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr,
                   "usage: kvtool_bench_scale [--tokens A,B,C] [--kinds pq,clusterkv,lsh,squeeze] [--threads N] "
                   "[--rounds N]\n");
      return 2;
    }
  }
  const std::vector<std::string> kinds = split(kinds_arg), tokens = split(tokens_arg);
  std::map<std::string, std::map<int64_t, Cell>> cells;
  for (const auto& t : tokens) {
    const int64_t T = std::atoll(t.c_str());
    const std::string dump = bench::ensure_dump(T, 1, 64);
    for (const auto& kind : kinds) cells[kind][T] = measure(bin_dir, kind, dump, threads, n_rounds);
  }
  std::printf("build with defaults, [1, 8, T, 128] fp16, %d threads, best of %d\n", threads, n_rounds);
  std::printf("  %-10s", "kind");
  for (const auto& t : tokens) std::printf("  T=%-8s s   MiB", t.c_str());
  std::printf("  growth\n");
  bool ok = true;
  for (const auto& kind : kinds) {
    std::printf("  %-10s", kind.c_str());
    for (const auto& [T, c] : cells[kind]) {
      std::printf("  %10.2f %6.0f", c.time.min(), c.rss_mib);
      ok = ok && c.rss_mib < 1024;
    }
    // Growth over the last two sizes given (by default 128K / 32K: 4 is linear, the target <= 5).
    double growth = 0;
    if (cells[kind].size() >= 2) {
      auto last = cells[kind].rbegin();
      const double hi = last->second.time.min(), lo = std::next(last)->second.time.min();
      growth = hi / lo;
      const double size_ratio = static_cast<double>(last->first) / static_cast<double>(std::next(last)->first);
      ok = ok && growth <= 1.25 * size_ratio;
    }
    std::printf("  %6.2f\n", growth);
  }
  std::printf("targets: growth <= 1.25x the size ratio (5 for 128K/32K), peak RSS < 1024 MiB: %s\n",
              ok ? "met" : "MISSED");
  return ok ? 0 : 1;
}
