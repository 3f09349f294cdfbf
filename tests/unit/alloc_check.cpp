// Batched queries allocate nothing once warm (a decode step must not wait on the allocator): every
// operator new of the process is counted while a warm batch runs. Every kind (squeeze with each of
// its passes: the bound rule, flat, the factor rule) must stay at zero on one thread and spread
// over two.
// A separate executable: replacing the global operator new in kvtool_unit would hide ASan's own.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <vector>

#include "clusterkv/clusterkv_builder.h"
#include "kvtool/dump.h"
#include "kvtool/pool.h"
#include "lsh/lsh_builder.h"
#include "pq/pq_builder.h"
#include "squeeze/squeeze_builder.h"
#include "emulated_device.h"
#include "test_util.h"

namespace {
std::atomic<int64_t> g_news{0};
}

// GCC cannot see that this operator new is malloc: its mismatched-new-delete warning on the free
// below is a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace kvtool;
using namespace kvtool::test;

namespace {

// Warm batches of one layer's 4 query heads x 8 positions on `threads` threads; returns the
// operator-new calls of 20 further batches.
int64_t warm_batch_news(const Lease& lease, const QuerySettings& settings, int threads,
                        const std::vector<KeyRows>& kr) {
  const auto& src = lease.artifact().source();
  const int64_t d = src.geo.head_dim, pos = src.coverage_end, n = 4 * 8;
  std::vector<int64_t> heads, positions, ids(static_cast<size_t>(n * src.geo.tokens)), counts(static_cast<size_t>(n));
  std::vector<float> q(static_cast<size_t>(n * d)), scores(ids.size());
  std::vector<double> incl(ids.size());
  for (int64_t i = 0; i < n; ++i) {
    heads.push_back(i % src.geo.q_heads);
    positions.push_back(pos + i / 4);
  }
  for (size_t e = 0; e < q.size(); ++e) q[e] = static_cast<float>((e * 37) % 11) * 0.1f - 0.5f;
  const auto params = lease.params(settings);
  const QueryBatch b{0, n, heads.data(), q.data(), positions.data(), kr.data()};
  const BatchAnswers out{src.geo.tokens, ids.data(), counts.data(), scores.data(), incl.data()};
  for (int w = 0; w < 10; ++w) lease.query_batch(b, *params, out, threads);  // every thread sees every part
  // On a loaded machine a worker may first get work only after the warm-up, and its per-thread
  // buffers are then made once: the fewest allocations of three rounds of 20 batches is what
  // recurs, and a hot-path allocation would show in every round.
  int64_t fewest = INT64_MAX;
  for (int round = 0; round < 3; ++round) {
    const int64_t before = g_news.load();
    for (int r = 0; r < 20; ++r) lease.query_batch(b, *params, out, threads);
    fewest = std::min(fewest, g_news.load() - before);
  }
  return fewest;
}

}  // namespace

int main() {
  TempDir tmp;
  const std::string dump = tmp.file("d.h5");
  kind_dump(dump, 400, 5, 8);
  PqParams pp;
  pp.subspaces = 4;
  pp.bits = 4;
  pp.iters = 4;
  ClusterKvParams cp;
  cp.clusters = 16;
  LshParams lp;
  lp.bits = 4;
  lp.tables = 24;
  SqueezeParams sp;
  sp.observation_window = 40;
  struct Case {
    const char* name;
    std::string art;
    QuerySettings settings;
    bool gated;
  };
  std::vector<Case> cases = {{"pq", tmp.file("pq.kvi"), {{"budget", "0.1"}}, true},
                             {"clusterkv", tmp.file("ck.kvi"), {{"budget", "0.1"}}, true},
                             {"lsh", tmp.file("lsh.kvi"), {{"min_collisions", "2"}}, true},
                             {"squeeze", tmp.file("sq.kvi"), {}, true},
                             {"squeeze", tmp.file("sq.kvi"), {{"flat", "true"}}, true},
                             {"squeeze", tmp.file("sq.kvi"), {{"coarse_rule", "factor"}}, true}};
  build_artifact(dump, quiet_build(cases[0].art), PqBuilder(pp));
  build_artifact(dump, quiet_build(cases[1].art), ClusterKvBuilder(cp));
  build_artifact(dump, quiet_build(cases[2].art), LshBuilder(lp));
  build_artifact(dump, quiet_build(cases[3].art), SqueezeBuilder(sp));
  DumpReader dr(dump);
  const auto& geo = dr.info().geo;
  std::vector<float> keys(static_cast<size_t>(geo.kv_heads * geo.tokens * geo.head_dim));
  std::vector<KeyRows> kr;
  for (int64_t h = 0; h < geo.kv_heads; ++h) {
    dr.read_k(0, h, 0, geo.tokens, keys.data() + h * geo.tokens * geo.head_dim);
    kr.push_back({keys.data() + h * geo.tokens * geo.head_dim, geo.tokens, geo.head_dim});
  }
  Pool pool(PoolOptions{});
  bool ok = true;
  std::string published;
  for (const auto& c : cases) {
    if (published != c.name) pool.publish(publish_request(c.name, c.art));  // squeeze's passes share one
    published = c.name;
    const Lease lease = pool.acquire(c.name);
    for (int threads : {1, 2}) {
      const int64_t news = warm_batch_news(lease, c.settings, threads, kr);
      std::printf(
          "%-9s %-22s threads %d: %lld allocations in 20 warm batches of 32 queries (fewest of 3 rounds)%s\n", c.name,
          c.settings.empty() ? "(defaults)" : (c.settings.begin()->first + "=" + c.settings.begin()->second).c_str(),
          threads, static_cast<long long>(news), c.gated ? "" : " (not gated)");
      ok &= !c.gated || news == 0;
    }
  }
  // The device tier's batched paths (every kind on the emulated device; buffers reserved at publish).
  auto dev = std::make_shared<test::EmulatedDevice>();
  PoolOptions o;
  o.device = dev;
  o.device_budget = 64 << 20;
  Pool device_pool(o);
  published.clear();
  for (const auto& c : cases) {
    if (published != c.name) device_pool.publish(publish_request(c.name, c.art, true));
    published = c.name;
    const Lease dl = device_pool.acquire(c.name);
    const int64_t batches = dev->batch_calls();
    for (int threads : {1, 2}) {
      const int64_t news = warm_batch_news(dl, c.settings, threads, kr);
      std::printf(
          "%-9s %-22s threads %d, device tier: %lld allocations in 20 warm batches of 32 queries (fewest of 3 "
          "rounds)\n",
          c.name,
          c.settings.empty() ? "(defaults)" : (c.settings.begin()->first + "=" + c.settings.begin()->second).c_str(),
          threads, static_cast<long long>(news));
      ok &= news == 0;
    }
    ok &= dev->batch_calls() > batches;  // the batches took the device's batched path
  }
  std::printf(ok ? "PASS\n" : "FAIL: a warm batch allocated\n");
  return ok ? 0 : 1;
}
