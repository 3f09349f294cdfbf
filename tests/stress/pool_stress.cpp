// Concurrency stress of the runtime pool, meant to run under ThreadSanitizer (CI builds it in a
// TSan configuration, label tsan): publishers, queriers, retirers and cancellers on a few keys for a
// few seconds, with a budget tight enough to force evictions and an emulated device tier with
// cancellations. Every answer must equal the reference answer of the same artifact and name the
// generation of the lease that answered; at the end every byte is returned.
//   pool_stress [seconds]    (default 3)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/error.h"
#include "lsh/lsh_builder.h"
#include "kvtool/pool.h"
#include "kvtool/query.h"
#include "emulated_device.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 3.0;
  TempDir tmp;
  const std::string dump = tmp.file("d.h5"), art = tmp.file("lsh.kvi");
  kind_dump(dump, 160, 3, 4, 16, 1);
  LshParams lp;
  lp.tables = 40;
  build_artifact(dump, quiet_build(art, 1, 1), LshBuilder(lp));

  // Reference answers straight from the file.
  ArtifactReader ref(art);
  SelectorSet direct(ref);
  DumpReader d(dump);
  const auto& geo = d.info().geo;
  std::vector<float> qs(static_cast<size_t>(geo.q_tokens * geo.head_dim));
  d.read_q(0, 3, qs.data());
  const float* q = qs.data() + (geo.q_tokens - 1) * geo.head_dim;
  const int64_t pos = d.q_positions().back();
  const QuerySettings settings = {{"min_collisions", "2"}};  // an lsh artifact: its one option
  const std::vector<int64_t> expect = direct.query(0, 3, q, pos, *direct.params(settings)).candidates;

  auto dev = std::make_shared<EmulatedDevice>();
  int64_t one = 0;
  {
    Pool probe(PoolOptions{});
    one = probe.publish(publish_request("x", art)).host_bytes;
  }
  PoolOptions o;
  o.host_budget = 3 * one + one / 2;  // room for three generations: publishes must evict
  o.device = dev;
  o.device_budget = int64_t{64} << 20;
  std::atomic<int64_t> queries{0}, misses{0}, publishes{0}, refusals{0}, retires{0}, cancels{0}, wrong{0};
  {
    Pool pool(o);
    const std::vector<std::string> keys{"a", "b", "c", "d"};
    for (const auto& k : keys) {  // start with every key published (some get evicted at once)
      try {
        pool.publish(publish_request(k, art));
      } catch (const Error&) {}
    }
    std::atomic<bool> stop{false};
    std::vector<std::thread> th;
    for (int p = 0; p < 2; ++p)
      th.emplace_back([&, p] {
        std::mt19937 rng(p);
        while (!stop) {
          PublishRequest r = publish_request(keys[rng() % keys.size()], art, (rng() % 2) == 0);
          r.expected_content_digest = ref.source().content_digest;
          try {
            if (rng() % 4 == 0) {
              PublishTicket t = pool.begin(r);
              pool.cancel(t);
              ++cancels;
            } else {
              pool.publish(r);
              ++publishes;
            }
          } catch (const Error& e) {
            if (e.reason() != kvtool::Reason::HOST_BUDGET_EXCEEDED &&
                e.reason() != kvtool::Reason::DEVICE_BUDGET_EXCEEDED) {
              std::fprintf(stderr, "publish failed: %s: %s\n", e.reason_name(), e.what());
              ++wrong;
            }
            ++refusals;
          }
        }
      });
    for (int w = 0; w < 3; ++w)
      th.emplace_back([&, w] {
        std::mt19937 rng(100 + w);
        while (!stop) {
          try {
            Lease l = pool.acquire(keys[rng() % keys.size()]);
            CandidateReceipt rc = l.query(0, 3, q, pos, *l.params(settings));
            if (rc.candidates != expect || rc.pool_generation != l.generation()) ++wrong;
            ++queries;
          } catch (const Error& e) {
            if (e.reason() != kvtool::Reason::NOT_PUBLISHED) ++wrong;
            ++misses;
          }
        }
      });
    th.emplace_back([&] {
      std::mt19937 rng(7);
      while (!stop) {
        if (pool.retire(keys[rng() % keys.size()], rng() % 2 == 0)) ++retires;
        pool.stats();
        std::this_thread::sleep_for(std::chrono::milliseconds(15));
      }
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    stop = true;
    for (auto& t : th) t.join();
    for (const auto& k : keys) pool.retire(k, true);
    PoolStats s = pool.stats();
    if (s.host_used != 0 || s.device_used != 0 || s.in_flight != 0) {
      std::fprintf(stderr, "pool not empty after retiring everything: %s\n", s.to_json().dump().c_str());
      ++wrong;
    }
  }
  if (dev->device_bytes_live() != 0 || dev->host_bytes_live() != 0) {
    std::fprintf(stderr, "emulated device memory leaked: %lld device, %lld host bytes\n",
                 static_cast<long long>(dev->device_bytes_live()), static_cast<long long>(dev->host_bytes_live()));
    ++wrong;
  }
  std::printf(
      "pool stress %.1fs: %lld queries (%lld found nothing published), %lld publishes, %lld cancels, %lld refusals, "
      "%lld retires, %lld wrong\n",
      seconds, static_cast<long long>(queries.load()), static_cast<long long>(misses.load()),
      static_cast<long long>(publishes.load()), static_cast<long long>(cancels.load()),
      static_cast<long long>(refusals.load()), static_cast<long long>(retires.load()),
      static_cast<long long>(wrong.load()));
  return wrong == 0 && queries > 0 && publishes > 0 ? 0 : 1;
}
