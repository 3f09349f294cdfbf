// The C API: statuses, per-thread reasons, NULL arguments, the same answers as the C++ pool.
#include <algorithm>
#include <cmath>
#include <limits>
#include <catch2/catch.hpp>
#include <string>
#include <thread>

#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "kvtool/kinds.h"
#include "kvtool/kvtool_c.h"
#include "kvtool/pool.h"
#include "kvtool/query.h"
#include "pq/pq_builder.h"
#include "kvtool/store.h"
#include "kvtool/artifact.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

TEST_CASE("c api: publish, acquire, query, retire, errors carry a status and a per-thread reason") {
  TempDir tmp;
  kind_dump(tmp.file("d.h5"), 300, 4, 4);
  PqParams p;
  p.subspaces = 4;
  p.bits = 4;
  build_artifact(tmp.file("d.h5"), quiet_build(tmp.file("a.kvi"), 1, 1), PqBuilder(p));

  CHECK(kvtool_pool_new(1 << 20, 0, KVTOOL_DEVICE_CPU, nullptr) == KVTOOL_ERR_USAGE);
  CHECK(std::string(kvtool_last_reason()) == "USAGE");
  kvtool_pool* pool = nullptr;
  REQUIRE(kvtool_pool_new(int64_t{1} << 30, 0, KVTOOL_DEVICE_AUTO, &pool) == KVTOOL_OK);
  CHECK(kvtool_pool_device_available(pool) == 0);  // the static library has no CUDA backend
  CHECK(std::string(kvtool_last_reason()).empty());
  kvtool_pool* gpu = nullptr;
  CHECK(kvtool_pool_new(1 << 20, 1 << 20, KVTOOL_DEVICE_CUDA, &gpu) == KVTOOL_ERR_INVALID);
  CHECK(std::string(kvtool_last_reason()) == "DEVICE_UNAVAILABLE");
  CHECK(gpu == nullptr);

  int64_t gen = 0;
  CHECK(kvtool_pool_publish(pool, "doc", tmp.file("missing.kvi").c_str(), nullptr, &gen) == KVTOOL_ERR_IO);
  CHECK(std::string(kvtool_last_reason()) == "IO_ERROR");
  kvtool_publish_options o{};
  o.tenant = "not-the-tenant";
  CHECK(kvtool_pool_publish(pool, "doc", tmp.file("a.kvi").c_str(), &o, &gen) == KVTOOL_ERR_INVALID);
  CHECK(std::string(kvtool_last_reason()) == "TENANT_MISMATCH");
  o.tenant = nullptr;
  REQUIRE(kvtool_pool_publish(pool, "doc", tmp.file("a.kvi").c_str(), &o, &gen) == KVTOOL_OK);
  CHECK(gen == 1);

  kvtool_lease* lease = nullptr;
  CHECK(kvtool_pool_acquire(pool, "nope", &lease) == KVTOOL_ERR_INVALID);
  CHECK(std::string(kvtool_last_reason()) == "NOT_PUBLISHED");
  // Reasons are per thread: another thread's success does not clear this one's.
  std::thread([&] {
    kvtool_version();
    kvtool_pool_usage(pool, nullptr, nullptr);
  }).join();
  CHECK(std::string(kvtool_last_reason()) == "NOT_PUBLISHED");
  REQUIRE(kvtool_pool_acquire(pool, "doc", &lease) == KVTOOL_OK);
  CHECK(kvtool_lease_generation(lease) == 1);

  std::vector<float> q(16, 0.25f);
  int64_t ids[8], n = 0;
  REQUIRE(kvtool_lease_query(lease, 1, 2, q.data(), 299, "budget=0.1", ids, 8, &n) == KVTOOL_OK);
  // Same as the C++ API; more candidates than capacity are counted, the first 8 written.
  Pool cpp(PoolOptions{});
  cpp.publish(publish_request("doc", tmp.file("a.kvi")));
  Lease cl = cpp.acquire("doc");
  CandidateReceipt rc = cl.query(1, 2, q.data(), 299, *cl.params({{"budget", "0.1"}}));
  CHECK(n == static_cast<int64_t>(rc.candidates.size()));
  REQUIRE(n > 8);
  CHECK(std::vector<int64_t>(ids, ids + 8) == std::vector<int64_t>(rc.candidates.begin(), rc.candidates.begin() + 8));
  CHECK(kvtool_lease_query(lease, 1, 2, q.data(), 299, "budget=12", ids, 8, &n) == KVTOOL_OK);
  CHECK(n == 12);
  CHECK(kvtool_lease_query(lease, 1, 2, nullptr, 299, "budget=0.1", ids, 8, &n) == KVTOOL_ERR_USAGE);
  CHECK(kvtool_lease_query(lease, 1, 2, q.data(), 299, "budget=-1", ids, 8, &n) == KVTOOL_ERR_USAGE);
  CHECK(kvtool_lease_query(lease, 1, 2, q.data(), 299, "min_collisions=2", ids, 8, &n) == KVTOOL_ERR_USAGE);
  CHECK(std::string(kvtool_last_error()).find("does not apply to pq") != std::string::npos);
  CHECK(kvtool_lease_query(lease, 1, 2, q.data(), 299, "budget", ids, 8, &n) == KVTOOL_ERR_USAGE);
  CHECK(kvtool_lease_query(lease, 9, 2, q.data(), 299, "budget=0.1", ids, 8, &n) == KVTOOL_ERR_USAGE);

  // Batches: parsed params, one call for several query heads and positions, the same candidates
  // and scores as one query at a time; truncation counts every candidate.
  kvtool_query_params* qp = nullptr;
  REQUIRE(kvtool_lease_params(lease, "budget=0.1", &qp) == KVTOOL_OK);
  std::vector<float> qs(3 * 16);
  for (size_t e = 0; e < qs.size(); ++e) qs[e] = static_cast<float>(e % 7) * 0.1f - 0.3f;
  const int64_t heads[3] = {0, 2, 3}, pos[3] = {299, 299, 299};
  std::vector<int64_t> bids(3 * 64, -1), counts(3, -1);
  std::vector<float> bscores(3 * 64);
  REQUIRE(kvtool_lease_query_batch(lease, 1, 3, heads, qs.data(), pos, qp, 2, bids.data(), bscores.data(), 64,
                                   counts.data()) == KVTOOL_OK);
  for (int64_t i = 0; i < 3; ++i) {
    CandidateReceipt one = cl.query(1, heads[i], qs.data() + i * 16, pos[i], *cl.params({{"budget", "0.1"}}));
    REQUIRE(counts[i] == static_cast<int64_t>(one.candidates.size()));
    REQUIRE(counts[i] <= 64);
    CHECK(std::equal(one.candidates.begin(), one.candidates.end(), bids.begin() + i * 64));
    CHECK(std::equal(one.scores.begin(), one.scores.end(), bscores.begin() + i * 64));
  }
  // On a caller's stream: a host-tier generation answers the same (the stream is the device tier's).
  std::vector<int64_t> sids(bids.size(), -1), scounts(3, -1);
  int stream_tag = 0;
  REQUIRE(kvtool_lease_query_batch_on_stream(lease, 1, 3, heads, qs.data(), pos, qp, 2, sids.data(), nullptr, 64,
                                             scounts.data(), &stream_tag) == KVTOOL_OK);
  CHECK(scounts == counts);
  CHECK(sids == bids);
  CHECK(kvtool_lease_query_batch(lease, 1, 3, heads, qs.data(), pos, qp, 1, bids.data(), nullptr, 4, counts.data()) ==
        KVTOOL_OK);
  CHECK(counts[0] > 4);
  CHECK(kvtool_lease_query_batch(lease, 1, 3, heads, qs.data(), pos, nullptr, 1, bids.data(), nullptr, 64,
                                 counts.data()) == KVTOOL_OK);  // the kind's default budget
  CHECK(kvtool_lease_query_batch(lease, 1, 3, heads, nullptr, pos, qp, 1, bids.data(), nullptr, 64, counts.data()) ==
        KVTOOL_ERR_USAGE);
  CHECK(kvtool_lease_query_batch(lease, 1, 3, heads, qs.data(), pos, qp, 0, bids.data(), nullptr, 64, counts.data()) ==
        KVTOOL_ERR_USAGE);
  CHECK(kvtool_lease_query_batch(lease, 1, 3, heads, qs.data(), pos, qp, 1, bids.data(), nullptr, 64, nullptr) ==
        KVTOOL_ERR_USAGE);
  const int64_t bad_heads[3] = {0, 2, 17};
  CHECK(kvtool_lease_query_batch(lease, 1, 3, bad_heads, qs.data(), pos, qp, 2, bids.data(), nullptr, 64,
                                 counts.data()) == KVTOOL_ERR_USAGE);
  CHECK(kvtool_lease_query_batch(nullptr, 1, 3, heads, qs.data(), pos, qp, 1, bids.data(), nullptr, 64,
                                 counts.data()) == KVTOOL_ERR_USAGE);
  kvtool_query_params* bad = nullptr;
  CHECK(kvtool_lease_params(lease, "min_collisions=2", &bad) == KVTOOL_ERR_USAGE);
  CHECK(bad == nullptr);
  kvtool_query_params_free(qp);
  kvtool_query_params_free(nullptr);

  int64_t host = 0, dev = -1;
  REQUIRE(kvtool_pool_usage(pool, &host, &dev) == KVTOOL_OK);
  CHECK(host > 0);
  CHECK(dev == 0);
  // Retire without waiting: hidden at once, memory back when the lease goes.
  CHECK(kvtool_pool_retire(pool, "doc", 0) == KVTOOL_OK);
  kvtool_lease* again = nullptr;
  CHECK(kvtool_pool_acquire(pool, "doc", &again) == KVTOOL_ERR_INVALID);
  kvtool_lease_release(lease);
  REQUIRE(kvtool_pool_usage(pool, &host, nullptr) == KVTOOL_OK);
  CHECK(host == 0);
  CHECK(kvtool_pool_retire(pool, "doc", 1) == KVTOOL_ERR_INVALID);

  // From the prefix store, by key.
  Store(tmp.file("st"), true).put(tmp.file("a.kvi"), StoreTrust{});
  ArtifactReader r(tmp.file("a.kvi"));
  const auto& src = r.manifest()["source"];
  std::string model = src["model_artifact_sha256"], adapter = src["adapter_set_sha256"],
              prefix = src["prefix_tokens_sha256"], tenant = src["tenant_namespace"];
  kvtool_store_key sk{tenant.c_str(), model.c_str(), adapter.c_str(), prefix.c_str(), "pq", nullptr, nullptr};
  REQUIRE(kvtool_pool_publish_stored(pool, "stored", tmp.file("st").c_str(), &sk, nullptr, &gen) == KVTOOL_OK);
  CHECK(gen == 2);
  sk.kind = "lsh";
  CHECK(kvtool_pool_publish_stored(pool, "stored", tmp.file("st").c_str(), &sk, nullptr, &gen) == KVTOOL_ERR_INVALID);
  CHECK(std::string(kvtool_last_reason()) == "STORE_MISS");
  sk.kind = "../pq";
  CHECK(kvtool_pool_publish_stored(pool, "stored", tmp.file("st").c_str(), &sk, nullptr, &gen) == KVTOOL_ERR_USAGE);
  CHECK(std::string(kvtool_last_reason()) == "BAD_STORE_KEY");
  kvtool_pool_free(pool);
  kvtool_pool_free(nullptr);
  kvtool_lease_release(nullptr);
}

TEST_CASE("c api: statuses are the exit classes of the one reason table") {
  STATIC_REQUIRE(KVTOOL_ERR_INVALID == static_cast<int>(ExitCode::invalid));
  STATIC_REQUIRE(KVTOOL_ERR_USAGE == static_cast<int>(ExitCode::usage));
  STATIC_REQUIRE(KVTOOL_ERR_IO == static_cast<int>(ExitCode::io));
  STATIC_REQUIRE(KVTOOL_ERR_INTERNAL == static_cast<int>(ExitCode::internal));
  // A failure's status is its reason's exit class and its reason name is the table's.
  CHECK(kvtool_pool_publish(nullptr, "k", "a.kvi", nullptr, nullptr) == static_cast<int>(exit_code_for(Reason::USAGE)));
  CHECK(std::string(kvtool_last_reason()) == reason_name(Reason::USAGE));
}

namespace {
// A 300-row dump in `tmp` and a pq artifact a.kvi over it (4 subspaces of 4 bits).
void small_pq(const TempDir& tmp) {
  kind_dump(tmp.file("d.h5"), 300, 4, 4);
  PqParams p;
  p.subspaces = 4;
  p.bits = 4;
  build_artifact(tmp.file("d.h5"), quiet_build(tmp.file("a.kvi"), 1, 1), PqBuilder(p));
}

// small_pq's artifact published as "doc" in a CPU pool, and a lease on it; released at the end.
struct SmallPqLease {
  TempDir tmp;
  kvtool_pool* pool = nullptr;
  kvtool_lease* lease = nullptr;
  SmallPqLease() {
    small_pq(tmp);
    REQUIRE(kvtool_pool_new(int64_t{1} << 30, 0, KVTOOL_DEVICE_CPU, &pool) == KVTOOL_OK);
    REQUIRE(kvtool_pool_publish(pool, "doc", tmp.file("a.kvi").c_str(), nullptr, nullptr) == KVTOOL_OK);
    REQUIRE(kvtool_pool_acquire(pool, "doc", &lease) == KVTOOL_OK);
  }
  ~SmallPqLease() {
    kvtool_lease_release(lease);
    kvtool_pool_free(pool);
  }
  SmallPqLease(const SmallPqLease&) = delete;
  SmallPqLease& operator=(const SmallPqLease&) = delete;
  // The status of a batch of the one query (layer, q_head, q at pos) under `opts`.
  int batch_status(int64_t layer, int64_t q_head, const float* q, int64_t pos, const char* opts) {
    kvtool_query_params* qp = nullptr;
    REQUIRE(kvtool_lease_params(lease, opts, &qp) == KVTOOL_OK);
    const int64_t heads[1] = {q_head}, positions[1] = {pos};
    int64_t ids[64], counts[1];
    const int status = kvtool_lease_query_batch(lease, layer, 1, heads, q, positions, qp, 1, ids, nullptr, 64, counts);
    kvtool_query_params_free(qp);
    return status;
  }
};

// A fixed, uneven query of d numbers: ((i * 7) mod 5) * step + offset.
std::vector<float> fixed_query(int64_t d, float step, float offset) {
  std::vector<float> q(static_cast<size_t>(d));
  for (int64_t i = 0; i < d; ++i) q[static_cast<size_t>(i)] = static_cast<float>((i * 7) % 5) * step + offset;
  return q;
}
}  // namespace

TEST_CASE("c api: rerank proposes F x the budget and keeps the exact top rows over the host keys") {
  SmallPqLease f;
  kvtool_lease* lease = f.lease;
  ArtifactReader r(f.tmp.file("a.kvi"));
  const IndexedRows ix = IndexedRows::of(r);
  const int64_t d = r.source().geo.head_dim, E = r.source().coverage_end, layer = 1, q_head = 2;
  DumpReader dump(f.tmp.file("d.h5"));
  std::vector<float> keys(static_cast<size_t>(E * d));
  dump.read_k(layer, r.source().id.q_to_kv_head[q_head], 0, E, keys.data());
  const std::vector<float> q = fixed_query(d, 0.3f, -0.5f);
  int64_t ids[64], n = 0;
  // A factor that proposes every indexed row: the rerank is the exact top 12 by q.k, best first.
  REQUIRE(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, "budget=12,rerank=1024", keys.data(), E, ids,
                                  64, &n) == KVTOOL_OK);
  std::vector<std::pair<double, int64_t>> exact;
  for (int64_t row = ix.begin(); row < ix.end(); ++row) {
    double s = 0;
    for (int64_t i = 0; i < d; ++i)
      s += static_cast<double>(q[static_cast<size_t>(i)]) * keys[static_cast<size_t>(row * d + i)];
    exact.emplace_back(-static_cast<double>(static_cast<float>(s)), row);
  }
  std::sort(exact.begin(), exact.end());
  REQUIRE(n == 12);
  for (int64_t i = 0; i < n; ++i) CHECK(ids[i] == exact[static_cast<size_t>(i)].second);
  // rerank=1 is the plain query; a factor proposes more than the budget yet returns the budget.
  int64_t plain[64], np = 0, one[64], n1 = 0;
  REQUIRE(kvtool_lease_query(lease, layer, q_head, q.data(), E - 1, "budget=12", plain, 64, &np) == KVTOOL_OK);
  REQUIRE(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, "budget=12,rerank=1", keys.data(), E, one, 64,
                                  &n1) == KVTOOL_OK);
  CHECK(std::vector<int64_t>(plain, plain + np) == std::vector<int64_t>(one, one + n1));
  REQUIRE(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, "budget=12,rerank=3", keys.data(), E, ids, 64,
                                  &n) == KVTOOL_OK);
  CHECK(n == 12);
  // Refusals: no keys, too few key rows, factors outside [1, 1024], a batch.
  CHECK(kvtool_lease_query(lease, layer, q_head, q.data(), E - 1, "budget=12,rerank=4", ids, 64, &n) ==
        KVTOOL_ERR_USAGE);
  CHECK(std::string(kvtool_last_error()).find("host keys") != std::string::npos);
  CHECK(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, "budget=12,rerank=1024", keys.data(), 10, ids,
                                64, &n) == KVTOOL_ERR_USAGE);
  for (const char* bad : {"budget=12,rerank=0.5", "budget=12,rerank=2000", "budget=12,rerank=nan"})
    CHECK(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, bad, keys.data(), E, ids, 64, &n) ==
          KVTOOL_ERR_USAGE);
  // The largest row budget (2^53) times the largest factor is beyond int64: every indexed row is
  // proposed and kept, none lost to an overflow.
  std::vector<int64_t> all(static_cast<size_t>(E));
  REQUIRE(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, "budget=9007199254740992,rerank=1024",
                                  keys.data(), E, all.data(), E, &n) == KVTOOL_OK);
  CHECK(n == ix.count());
  BudgetParams huge;
  huge.budget = Budget::parse("9007199254740992");
  huge.rerank = 1024;
  CHECK(huge.proposal().rows(ix.count()) == ix.count());
  CHECK(huge.receipt(ix.count())["proposed_rows"] == ix.count());
  // A NaN in the host keys would rank arbitrarily: refused by name.
  std::vector<float> nan_keys = keys;
  nan_keys[static_cast<size_t>((ix.begin() + 3) * d)] = std::numeric_limits<float>::quiet_NaN();
  CHECK(kvtool_lease_query_keys(lease, layer, q_head, q.data(), E - 1, "budget=12,rerank=1024", nan_keys.data(), E, ids,
                                64, &n) != KVTOOL_OK);
  CHECK(std::string(kvtool_last_reason()) == "NON_FINITE");
  CHECK(f.batch_status(layer, q_head, q.data(), E - 1, "budget=12,rerank=2") == KVTOOL_ERR_USAGE);
}

TEST_CASE("c api: top_p keeps the shortest best-first prefix of the budget whose estimated mass reaches p") {
  SmallPqLease f;
  kvtool_lease* lease = f.lease;
  ArtifactReader r(f.tmp.file("a.kvi"));
  const int64_t d = r.source().geo.head_dim, E = r.source().coverage_end, layer = 1, q_head = 2;
  const std::vector<float> q = fixed_query(d, 0.9f, -1.5f);
  // The plain budget's rows and scores, best first: the reference the prefix is cut from.
  SelectorSet set(r);
  const auto params = set.params({{"budget", "100"}});
  const CandidateReceipt plain = set.query(layer, q_head, q.data(), E - 1, *params);
  REQUIRE(plain.candidates.size() == 100);
  std::vector<double> mass;  // cumulative estimated mass of the first i + 1 rows, relative to all 100
  double total = 0;
  for (float s : plain.scores) total += std::exp((s - plain.scores[0]) / std::sqrt(static_cast<double>(d)));
  for (float s : plain.scores)
    mass.push_back((mass.empty() ? 0 : mass.back()) + std::exp((s - plain.scores[0]) / std::sqrt(double(d))) / total);
  int64_t ids[128], n = 0, last = 0;
  for (double pv : {0.01, 0.3, 0.5, 0.8, 0.95, 1.0}) {
    const std::string opts = "budget=100,top_p=" + std::to_string(pv);
    REQUIRE(kvtool_lease_query(lease, layer, q_head, q.data(), E - 1, opts.c_str(), ids, 128, &n) == KVTOOL_OK);
    INFO("top_p " << pv << " kept " << n);
    CHECK(n >= last);  // more mass, never fewer rows
    CHECK(std::vector<int64_t>(ids, ids + n) ==
          std::vector<int64_t>(plain.candidates.begin(), plain.candidates.begin() + n));
    // The shortest such prefix: n rows reach p (up to rounding), n - 1 do not.
    CHECK(mass[static_cast<size_t>(n - 1)] >= pv - 1e-9);
    if (n > 1) CHECK(mass[static_cast<size_t>(n - 2)] < pv + 1e-9);
    last = n;
  }
  CHECK(last == 100);  // p = 1: the whole budget
  // The estimate is over the budget's rows: a cap of 10 keeps at most 10.
  REQUIRE(kvtool_lease_query(lease, layer, q_head, q.data(), E - 1, "budget=10,top_p=0.999", ids, 128, &n) ==
          KVTOOL_OK);
  CHECK(n <= 10);
  for (const char* bad : {"top_p=1.5", "top_p=-0.1", "top_p=nan"})
    CHECK(kvtool_lease_query(lease, layer, q_head, q.data(), E - 1, bad, ids, 128, &n) == KVTOOL_ERR_USAGE);
  // Batches refuse it, as rerank: their answers are fixed-size buffers per query.
  CHECK(f.batch_status(layer, q_head, q.data(), E - 1, "budget=12,top_p=0.5") == KVTOOL_ERR_USAGE);
  CHECK(std::string(kvtool_last_error()).find("top_p") != std::string::npos);
}
