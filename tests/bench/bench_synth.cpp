// Benchmark (ctest -L bench, or by hand) of the dump throughput in docs/reports/performance.md (`kvtool synth
// --layers 4 --kv-heads 8 --q-heads 32 --head-dim 128 --tokens 8192 --seed 1`, then `kvtool verify`)
// against the physical limits of this machine for the same bytes, interleaved, best of N
// (bench_common.h):
//  * synth against writing the same number of bytes from memory to a file in the same directory,
//    fsync'd and renamed (synth syncs and renames its output too), and against memcpy of them;
//  * verify against read() of the same file + SHA-256 of its bytes (verify must read every byte
//    and hash at least the K/V payload for the content digest).
// Fails when a kvtool side, less kvtool's start-up time (`kvtool --version`), beats its floor:
// verify faster than SHA-256 of the K/V bytes alone cannot have hashed them all; synth faster than
// memcpy of its output cannot have produced it.
//
//   kvtool_bench_synth [--rounds N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.h"
#include "kvtool/dump.h"
#include "kvtool/sha256.h"

using namespace kvtool;
using Clock = std::chrono::steady_clock;

namespace {
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// write() of `src` to a new file, fsync, close and rename over `path`: the floor of writing it.
double write_floor(const std::vector<uint8_t>& src, const std::string& path) {
  auto t0 = Clock::now();
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t done = 0;
  for (ssize_t w;
       done < src.size() && (w = write(fd, src.data() + done, std::min<size_t>(src.size() - done, 1 << 20))) > 0;)
    done += static_cast<size_t>(w);
  fsync(fd);
  close(fd);
  std::rename(tmp.c_str(), path.c_str());
  const double t = since(t0);
  if (done != src.size()) {
    std::fprintf(stderr, "bench: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  return t;
}

// read() of the whole file into `buf` (faulted in before) + SHA-256 of its bytes.
double read_hash_floor(const std::string& path, std::vector<uint8_t>& buf) {
  auto t0 = Clock::now();
  int fd = open(path.c_str(), O_RDONLY);
  size_t got = 0;
  for (ssize_t r; got < buf.size() && (r = read(fd, buf.data() + got, buf.size() - got)) > 0;)
    got += static_cast<size_t>(r);
  close(fd);
  volatile uint8_t sink = sha256(buf.data(), got)[0];
  (void)sink;
  return since(t0);
}
}  // namespace

int main(int argc, char** argv) {
  int n_rounds = bench::rounds(5);
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc)
      n_rounds = std::max(3, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: kvtool_bench_synth [--rounds N]\n");
      return 2;
    }
  }
  const std::string dir = bench::bench_dir(), kvtool = std::string(KVTOOL_BENCH_BIN_DIR) + "/kvtool";
  const std::string out = dir + "/synth-readme.h5", floor_file = dir + "/synth-floor.bin";
  const std::vector<std::string> synth_cmd = {kvtool,      "synth", "--layers",   "4",   "--kv-heads", "8",
                                              "--q-heads", "32",    "--head-dim", "128", "--tokens",   "8192",
                                              "--seed",    "1",     "-o",         out,   "--force"};
  bench::run_child_ok(synth_cmd);  // untimed: the file the floors are sized on
  DumpReader r(out);
  const auto& g = r.info().geo;
  const size_t file_bytes = static_cast<size_t>(bench::file_size(out));
  const double kv_bytes = 2.0 * static_cast<double>(g.layers * g.kv_heads * g.tokens * g.head_dim) *
                          static_cast<double>(dtype_size(g.dtype));
  std::printf("kvtool synth [%lld, %lld, %lld, %lld] %s, %lld query heads: %.1f MiB file, %.1f MiB of K/V\n",
              (long long)g.layers, (long long)g.kv_heads, (long long)g.tokens, (long long)g.head_dim,
              dtype_name(g.dtype), (long long)g.q_heads, file_bytes / 1048576.0, kv_bytes / 1048576.0);

  std::vector<uint8_t> src(file_bytes, 1), dst(file_bytes, 2);  // faulted in before any clock starts
  bench::warm_page_cache(out);
  bench::Samples s_synth, s_write, s_verify, s_read, s_copy, s_hash, s_start;
  bench::interleave(
      n_rounds, [&] { return bench::run_child_ok(synth_cmd); }, [&] { return write_floor(src, floor_file); }, s_synth,
      s_write);
  bench::interleave(
      n_rounds,
      [&] {
        return bench::run_child_ok({kvtool, "verify", out});
      },
      [&] { return read_hash_floor(out, dst); }, s_verify, s_read);
  bench::interleave(
      n_rounds,
      [&] {
        auto t0 = Clock::now();
        std::memcpy(dst.data(), src.data(), file_bytes);
        return since(t0);
      },
      [&] {
        auto t0 = Clock::now();
        volatile uint8_t sink = sha256(src.data(), file_bytes)[0];
        (void)sink;
        return since(t0);
      },
      s_copy, s_hash);
  // kvtool's own start-up (exec, dynamic loading, static initialisation): the part of a command's
  // time that is not its work, taken off before the floors are compared.
  for (int i = 0; i < n_rounds; ++i) s_start.s.push_back(bench::run_child_ok({kvtool, "--version"}));
  const double mb = static_cast<double>(file_bytes) / 1e6;
  std::printf("synth against writing the same bytes (write + fsync + rename):\n");
  bench::report("kvtool synth", s_synth, "write floor", s_write, mb, "MB/s");
  std::printf("verify against read + SHA-256 of the same file:\n");
  bench::report("kvtool verify", s_verify, "read+sha256 floor", s_read, mb, "MB/s");
  std::printf("in-memory limits for the same bytes:\n");
  bench::report("memcpy", s_copy, "sha256", s_hash, mb, "MB/s");
  const double hash_kv = s_hash.min() * kv_bytes / static_cast<double>(file_bytes), start = s_start.min();
  std::printf("kvtool start-up (kvtool --version): min %.3f ms, median %.3f ms (%zu runs)\n", start * 1e3,
              s_start.median() * 1e3, s_start.s.size());
  std::printf(
      "synth %.2fx its write floor, %.1fx memcpy; verify %.2fx read+sha256, %.2fx SHA-256 of the K/V alone "
      "(%.2fx without start-up)\n",
      s_synth.min() / s_write.min(), s_synth.min() / s_copy.min(), s_verify.min() / s_read.min(),
      s_verify.min() / hash_kv, (s_verify.min() - start) / hash_kv);
  std::remove(out.c_str());
  std::remove(floor_file.c_str());
  const bool ok = s_verify.min() - start >= hash_kv && s_synth.min() - start >= s_copy.min();
  if (!ok) std::printf("FAIL: a kvtool side beat the physical floor of its work\n");
  return ok ? 0 : 1;
}
