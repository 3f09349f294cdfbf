// Runtime pool: publication transaction, fences, leases, retirement, LRU eviction, budgets, and
// queries equal to the library's query path, with the device tier exercised through the emulated
// backend (deterministic completions).
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "clusterkv/clusterkv_builder.h"
#include "kvtool/error.h"
#include "lsh/lsh_builder.h"
#include "kvtool/pool.h"
#include "kvtool/producers.h"
#include "pq/pq_builder.h"
#include "kvtool/query.h"
#include "kvtool/signing.h"
#include "squeeze/squeeze_builder.h"
#include "emulated_device.h"
#include "reference_scorer.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

struct Fixture {
  TempDir tmp;
  std::string dump = tmp.file("d.h5"), pq = tmp.file("pq.kvi");
  Fixture() {
    kind_dump(dump, 300, 11, 8);
    PqParams p;
    p.subspaces = 4;
    p.bits = 4;
    p.iters = 6;
    build_artifact(dump, quiet_build(pq, 1, 3), PqBuilder(p));
  }
  int64_t size() const { return static_cast<int64_t>(read_bytes(pq).size()); }
};

// Tallies of the comparisons with the independent reference scorer.
struct Compared {
  int64_t queries = 0, rows = 0, boundary = 0;
};

// Every dumped query of every layer and query head: the pool's receipts equal SelectorSet's (the
// file query path: the same selector code, so this alone proves only that the pool's images and
// device tier do not change the answer) and agree with the independent reference scorer of
// tests/support/reference_scorer.h, which shares no scoring code with either.
void check_queries_equal(const Lease& lease, const std::string& art, const std::string& dump,
                         int64_t* compared = nullptr, const char* tier = nullptr, Compared* tally = nullptr,
                         const QuerySettings& settings = {{"budget", "0.1"}, {"min_collisions", "2"}},
                         const RefQuery& rq = {}) {
  ArtifactReader r(art);
  SelectorSet direct(r);
  DumpReader d(dump);
  const auto& geo = d.info().geo;
  const std::vector<int64_t> qpos = d.q_positions();
  std::vector<float> qs(static_cast<size_t>(geo.q_tokens * geo.head_dim));
  std::vector<float> keys(static_cast<size_t>(geo.tokens * geo.head_dim));
  const QuerySettings qset = settings_for(direct.kind(), settings);
  Compared local;
  Compared& t = tally ? *tally : local;
  for (int64_t l = 0; l < geo.layers; ++l)
    for (int64_t h = 0; h < geo.q_heads; ++h)
      for (int64_t i = 0; i < geo.q_tokens; ++i) {
        d.read_q(l, h, qs.data());
        const float* q = qs.data() + i * geo.head_dim;
        int64_t pos = qpos[static_cast<size_t>(i)];
        if (pos < r.source().coverage_end - 1) continue;
        int64_t kvh = r.source().id.q_to_kv_head[static_cast<size_t>(h)];
        d.read_k(l, kvh, 0, geo.tokens, keys.data());
        KeyRows kr{keys.data(), geo.tokens, geo.head_dim};
        CandidateReceipt a = direct.query(l, h, q, pos, *direct.params(qset), &kr);
        CandidateReceipt p = lease.query(l, h, q, pos, *lease.params(qset), &kr);
        REQUIRE(a.candidates == p.candidates);
        REQUIRE(a.scores == p.scores);
        REQUIRE(a.inclusion == p.inclusion);
        CHECK(p.pool_generation == lease.generation());
        if (tier) CHECK(p.tier == tier);
        if (compared) ++*compared;
        RefQuery want = rq;  // squeeze ranks to a budget when the settings give it one
        want.squeeze_budget = r.kind() == "squeeze" && qset.count("rank_budget");
        const RefAnswer ref = reference_query(r, l, h, q, pos, want, &kr);
        INFO(r.kind() << " layer " << l << " q_head " << h << " position " << pos);
        REQUIRE(compare_with_reference(p, ref, &t.boundary) == "");
        ++t.queries;
        t.rows += static_cast<int64_t>(p.candidates.size());
      }
  // Nearly every row agrees outright; boundary ties are rare (an implementation that picked rows
  // at random near the boundary would exceed this).
  CHECK(t.boundary * 100 <= t.rows + 100);
}

// Every dumped query at or after the coverage end, one batch per layer (all query heads, all
// positions), against the same queries one by one: equal candidates, scores and inclusion
// probabilities, with `threads` threads; then a small capacity truncates but counts every one.
// per_head >= 0: only the first per_head queries of each q head (small enough for the device's
// batched path); stream: passed in the QueryBatch.
void check_batch_equals_singles(const Lease& lease, const std::string& dump, const QuerySettings& settings, int threads,
                                int64_t per_head = -1, void* stream = nullptr) {
  const ArtifactReader& r = lease.artifact();
  DumpReader d(dump);
  const auto& geo = d.info().geo;
  const std::vector<int64_t> qpos = d.q_positions();
  const auto params = lease.params(settings_for(*find_kind(r.kind()), settings));
  std::vector<float> keys(static_cast<size_t>(geo.kv_heads * geo.tokens * geo.head_dim));
  std::vector<KeyRows> kr;
  for (int64_t h = 0; h < geo.kv_heads; ++h)
    kr.push_back({keys.data() + h * geo.tokens * geo.head_dim, geo.tokens, geo.head_dim});
  for (int64_t l = 0; l < geo.layers; ++l) {
    for (int64_t h = 0; h < geo.kv_heads; ++h)
      d.read_k(l, h, 0, geo.tokens, keys.data() + h * geo.tokens * geo.head_dim);
    std::vector<int64_t> heads, positions;
    std::vector<float> q, all(static_cast<size_t>(geo.q_tokens * geo.head_dim));
    for (int64_t h = 0; h < geo.q_heads; ++h) {
      d.read_q(l, h, all.data());
      int64_t taken = 0;
      for (int64_t i = 0; i < geo.q_tokens; ++i) {
        if (qpos[static_cast<size_t>(i)] < r.source().coverage_end - 1) continue;
        if (per_head >= 0 && taken++ >= per_head) break;
        heads.push_back(h);
        positions.push_back(qpos[static_cast<size_t>(i)]);
        q.insert(q.end(), all.begin() + i * geo.head_dim, all.begin() + (i + 1) * geo.head_dim);
      }
    }
    const int64_t n = static_cast<int64_t>(heads.size()), cap = geo.tokens;
    REQUIRE(n > 0);
    std::vector<int64_t> ids(static_cast<size_t>(n * cap)), counts(static_cast<size_t>(n));
    std::vector<float> scores(ids.size());
    std::vector<double> incl(ids.size(), -1.0);
    QueryBatch b{l, n, heads.data(), q.data(), positions.data(), kr.data(), stream};
    lease.query_batch(b, *params, {cap, ids.data(), counts.data(), scores.data(), incl.data()}, threads);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t h = heads[i];
      const KeyRows* k = &kr[static_cast<size_t>(r.source().id.q_to_kv_head[static_cast<size_t>(h)])];
      CandidateReceipt one = lease.query(l, h, q.data() + i * geo.head_dim, positions[i], *params, k);
      INFO(r.kind() << " layer " << l << " q_head " << h << " position " << positions[i]);
      REQUIRE(counts[i] == static_cast<int64_t>(one.candidates.size()));
      REQUIRE(std::equal(one.candidates.begin(), one.candidates.end(), ids.begin() + i * cap));
      REQUIRE(std::equal(one.scores.begin(), one.scores.end(), scores.begin() + i * cap));
      REQUIRE(std::equal(one.inclusion.begin(), one.inclusion.end(), incl.begin() + i * cap));
    }
    const int64_t small = 3;
    std::vector<int64_t> ids3(static_cast<size_t>(n * small), -1), counts3(static_cast<size_t>(n));
    lease.query_batch(b, *params, {small, ids3.data(), counts3.data(), nullptr, nullptr}, threads);
    CHECK(counts3 == counts);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < small; ++j) REQUIRE(ids3[i * small + j] == (j < counts[i] ? ids[i * cap + j] : -1));
  }
}

// The last dumped query of (layer, q_head) and its position.
int64_t first_query(const std::string& dump, int64_t layer, int64_t q_head, std::vector<float>& q) {
  DumpReader d(dump);
  const auto& geo = d.info().geo;
  std::vector<float> all(static_cast<size_t>(geo.q_tokens * geo.head_dim));
  d.read_q(layer, q_head, all.data());
  q.assign(all.end() - geo.head_dim, all.end());
  return d.q_positions().back();
}

}  // namespace

TEST_CASE("pool: a published artifact answers every query exactly like the artifact file") {
  Fixture f;
  Pool pool(PoolOptions{});
  PublishReceipt rc = pool.publish(publish_request("doc", f.pq));
  CHECK(rc.generation == 1);
  CHECK(rc.kind == "pq");
  CHECK(rc.host_bytes >= f.size());
  CHECK(pool.stats().host_used == rc.host_bytes);
  Lease l = pool.acquire("doc");
  int64_t n = 0;
  check_queries_equal(l, f.pq, f.dump, &n);
  CHECK(n > 0);
  CHECK_FALSE(l.on_device());
}

TEST_CASE("pool: every queryable kind answers like the library") {
  Fixture f;
  std::string ck = f.tmp.file("ck.kvi"), lsh = f.tmp.file("lsh.kvi"), sq = f.tmp.file("sq.kvi");
  ClusterKvParams cp;
  cp.clusters = 8;
  build_artifact(f.dump, quiet_build(ck, 1, 1), ClusterKvBuilder(cp));
  LshParams lp;
  build_artifact(f.dump, quiet_build(lsh, 1, 1), LshBuilder(lp));
  SqueezeParams sp;
  sp.observation_window = 40;
  build_artifact(f.dump, quiet_build(sq, 1, 1), SqueezeBuilder(sp));
  Pool pool(PoolOptions{});
  for (const auto& a : {ck, lsh, sq}) {
    pool.publish(publish_request(a, a));
    check_queries_equal(pool.acquire(a), a, f.dump, nullptr, "host");
  }
  // The device tier (emulated): every kind's device path, through section images at their device
  // addresses, gives the same receipts.
  auto dev = std::make_shared<EmulatedDevice>();
  PoolOptions o;
  o.device = dev;
  o.device_budget = 64 << 20;
  Pool dpool(o);
  for (const auto& a : {ck, lsh, sq, f.pq}) {
    dpool.publish(publish_request(a, a, true));
    const int64_t before = dev->scoring_calls();
    int64_t n = 0;
    check_queries_equal(dpool.acquire(a), a, f.dump, &n, "device");
    CHECK(dev->scoring_calls() >= before + n);
  }
}

// An lsh part past 65,536 indexed rows holds two id segments (formats/kinds-v1.md §5.3): the host
// tier, the device tier (one collision call per segment) and the reference scorer agree on it.
TEST_CASE("pool: lsh with two id segments answers like the library and the reference, host and device") {
  TempDir tmp;
  SynthOptions o;
  o.layers = 1;
  o.kv_heads = 1;
  o.q_heads = 2;
  o.head_dim = 8;
  o.tokens = 70000;
  o.seed = 3;
  o.dtype = DType::f16;
  o.query_count = 2;
  const std::string dump = tmp.file("long.h5"), art = tmp.file("long.lsh.kvi");
  synth_dump(o, {}, dump);
  LshParams lp;
  lp.bits = 6;
  lp.tables = 8;
  build_artifact(dump, quiet_build(art, 1, 1), LshBuilder(lp));
  ArtifactReader r(art);
  REQUIRE(r.manifest()["params"]["id_layout"] == "u16-segments");
  REQUIRE(r.find("lsh_offsets", 0, 0)->shape[0] == 2 * lp.tables);
  for (int64_t c : {1, 2}) {
    const QuerySettings qs{{"min_collisions", std::to_string(c)}};
    RefQuery rq;
    rq.min_collisions = c;
    Pool host(PoolOptions{});
    host.publish(publish_request(art, art));
    check_queries_equal(host.acquire(art), art, dump, nullptr, "host", nullptr, qs, rq);
    auto dev = std::make_shared<EmulatedDevice>();
    PoolOptions po;
    po.device = dev;
    po.device_budget = 64 << 20;
    Pool device(po);
    device.publish(publish_request(art, art, true));
    int64_t n = 0;
    check_queries_equal(device.acquire(art), art, dump, &n, "device", nullptr, qs, rq);
    CHECK(dev->scoring_calls() >= n);
  }
  // Rows of the second segment are among the answers (c = 1 takes every colliding row).
  SelectorSet direct(r);
  DumpReader d(dump);
  std::vector<float> q(static_cast<size_t>(2 * o.head_dim));
  d.read_q(0, 0, q.data());
  const CandidateReceipt a =
      direct.query(0, 0, q.data() + o.head_dim, 69999, *direct.params({{"min_collisions", "1"}}));
  REQUIRE(!a.candidates.empty());
  CHECK(a.candidates.back() >= 65536);
}

TEST_CASE("pool: the device tier (emulated) answers PQ queries like the host and returns its memory") {
  Fixture f;
  auto dev = std::make_shared<EmulatedDevice>();
  {
    PoolOptions o;
    o.device = dev;
    o.device_budget = 64 << 20;
    Pool pool(o);
    PublishReceipt rc = pool.publish(publish_request("doc", f.pq, true));
    CHECK(rc.device_bytes > 0);
    Lease l = pool.acquire("doc");
    CHECK(l.on_device());
    check_queries_equal(l, f.pq, f.dump);
    std::vector<float> q;
    int64_t pos = first_query(f.dump, 1, 2, q);
    CHECK(l.query(1, 2, q.data(), pos, *l.params({{"budget", "16"}})).tier == "device");
  }
  CHECK(dev->device_bytes_live() == 0);
  CHECK(dev->host_bytes_live() == 0);
}

TEST_CASE("pool: refusals name a reason and leave nothing visible or allocated") {
  Fixture f;
  TempDir t2;
  Pool pool(PoolOptions{});
  SECTION("missing file") {
    CHECK(reason_of([&] { pool.publish(publish_request("k", f.tmp.file("none.kvi"))); }) == "IO_ERROR");
  }
  SECTION("wrong content digest") {
    PublishRequest r = publish_request("k", f.pq);
    r.expected_content_digest = std::string(64, '0');
    CHECK(reason_of([&] { pool.publish(r); }) == "CONTENT_MISMATCH");
  }
  SECTION("wrong tenant") {
    PublishRequest r = publish_request("k", f.pq);
    r.tenant = "acme";
    CHECK(reason_of([&] { pool.publish(r); }) == "TENANT_MISMATCH");
  }
  SECTION("unsigned with a required signature") {
    PublishRequest r = publish_request("k", f.pq);
    r.trust.require_signature = true;
    CHECK(reason_of([&] { pool.publish(r); }) == "SIGNATURE_REQUIRED");
  }
  SECTION("signature policy: untrusted key, bad signature, trusted key") {
    generate_keypair(t2.file("team.pem"));
    generate_keypair(t2.file("other.pem"));
    std::string signed_art = t2.file("s.kvi");
    write_bytes(signed_art, read_bytes(f.pq));
    sign_artifact(signed_art, SigningKey::load(t2.file("team.pem")));
    PublishRequest r = publish_request("k", signed_art);
    r.trust.trusted = {load_public_key(t2.file("other.pub.pem"))};
    CHECK(reason_of([&] { pool.publish(r); }) == "UNTRUSTED_KEY");
    PoolHooks h;  // the signature block is at the end, before the 80-byte footer
    h.after_host_copy = [](uint8_t* p, size_t n) { p[n - 80 - 30] ^= 0x01; };
    pool.set_hooks(h);
    r.trust.trusted = {load_public_key(t2.file("team.pub.pem"))};
    CHECK(reason_of([&] { pool.publish(r); }) == "BAD_SIGNATURE");
    pool.set_hooks({});
    r.trust.require_signature = true;
    CHECK(pool.publish(r).generation > 0);
    CHECK(pool.retire("k"));
  }
  SECTION("device tier without a device") {
    CHECK(reason_of([&] { pool.publish(publish_request("k", f.pq, true)); }) == "DEVICE_UNAVAILABLE");
  }
  SECTION("corrupted byte in the copied image") {
    PoolHooks h;
    h.after_host_copy = [](uint8_t* p, size_t n) { p[n / 3] ^= 0x40; };
    pool.set_hooks(h);
    std::string why = reason_of([&] { pool.publish(publish_request("k", f.pq)); });
    INFO(why);
    CHECK((why == "SECTION_DIGEST" || why == "DECOMPRESS_FAILED"));
  }
  SECTION("over the host budget") {
    Pool small(PoolOptions{f.size(), 0, nullptr});
    CHECK(reason_of([&] { small.publish(publish_request("k", f.pq)); }) == "HOST_BUDGET_EXCEEDED");
    CHECK(small.stats().host_used == 0);
  }
  SECTION("an older index generation after a newer one") {
    std::string g2 = t2.file("g2.kvi");
    write_bytes(g2, read_bytes(f.pq));
    rewrite_manifest(g2, [](json& m) { m["index_generation"] = 2; });
    pool.publish(publish_request("k", g2));
    CHECK(reason_of([&] { pool.publish(publish_request("k", f.pq)); }) == "STALE_GENERATION");
    CHECK(pool.acquire("k").artifact().manifest()["index_generation"] == 2);
    CHECK(pool.retire("k"));
  }
  CHECK(reason_of([&] { pool.acquire("k"); }) == "NOT_PUBLISHED");
  CHECK(pool.stats().host_used == 0);
  CHECK(pool.stats().in_flight == 0);
}

TEST_CASE("pool: fences — a cancelled copy never becomes visible, a reused slot is not fooled by the old completion") {
  Fixture f;
  auto dev = std::make_shared<EmulatedDevice>(false);  // copies land only when delivered
  PoolOptions o;
  o.device = dev;
  o.device_budget = 64 << 20;
  {
    Pool pool(o);
    PublishTicket a = pool.begin(publish_request("doc", f.pq, true));
    REQUIRE(dev->started() == 1);
    CHECK_FALSE(pool.ready(a));
    pool.cancel(a);  // mid-copy
    CHECK(pool.stats().orphaned_transfers == 1);
    PublishTicket b = pool.begin(publish_request("doc", f.pq, true));  // takes the freed slot
    CHECK(b.id() != a.id());
    dev->deliver(0);  // A's stale completion lands first
    CHECK_FALSE(pool.ready(b));
    CHECK(pool.reap() == 1);  // A's buffers returned
    CHECK(pool.stats().orphaned_transfers == 0);
    CHECK(reason_of([&] { pool.acquire("doc"); }) == "NOT_PUBLISHED");
    // A delayed completion: commit blocks until B's own copy lands.
    std::thread late([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      dev->deliver(1);
    });
    PublishReceipt rb = pool.commit(b);
    late.join();
    CHECK(rb.copy_s >= 0.03);
    CHECK(pool.acquire("doc").generation() == rb.generation);
    CHECK(reason_of([&] { pool.commit(a); }) == "USAGE");
    check_queries_equal(pool.acquire("doc"), f.pq, f.dump);

    // A commit of a ticket whose slot was taken over is refused.
    PublishTicket c = pool.begin(publish_request("doc2", f.pq, true));
    dev->deliver_all();
    pool.cancel(c);
    CHECK(reason_of([&] { pool.commit(c); }) == "USAGE");

    // A byte corrupted in device memory after the copy: refused, old generation still served.
    PoolHooks h;
    h.after_device_copy = [](void* p, size_t n) { static_cast<uint8_t*>(p)[n / 2] ^= 1; };
    pool.set_hooks(h);
    PublishTicket d = pool.begin(publish_request("doc", f.pq, true));
    dev->deliver_all();
    CHECK(reason_of([&] { pool.commit(d); }) == "DEVICE_COPY_MISMATCH");
    CHECK(pool.acquire("doc").generation() == rb.generation);
    pool.set_hooks({});
    // An abandoned or overwritten ticket cancels itself; its copy is reaped when it lands.
    { PublishTicket e = pool.begin(publish_request("doc", f.pq, true)); }
    PublishTicket g = pool.begin(publish_request("doc", f.pq, true));
    g = pool.begin(publish_request("doc3", f.pq, true));
    CHECK(pool.stats().in_flight == 1);
    pool.cancel(g);
    dev->deliver_all();
    pool.reap();
    CHECK(pool.stats().in_flight == 0);
    CHECK(pool.retire("doc"));
    CHECK(pool.stats().host_used == 0);
    CHECK(pool.stats().device_used == 0);
  }
  CHECK(dev->device_bytes_live() == 0);
  CHECK(dev->host_bytes_live() == 0);
}

TEST_CASE("pool: leases pin a generation across publish and retire, receipts name it") {
  Fixture f;
  Pool pool(PoolOptions{});
  PublishReceipt r1 = pool.publish(publish_request("doc", f.pq));
  Lease held = pool.acquire("doc");
  PublishReceipt r2 = pool.publish(publish_request("doc", f.pq));
  CHECK(r2.replaced_generation == r1.generation);
  CHECK(held.generation() == r1.generation);
  CHECK(pool.acquire("doc").generation() == r2.generation);
  CHECK(pool.stats().retiring == 1);
  CHECK(pool.stats().host_used == r1.host_bytes + r2.host_bytes);
  std::vector<float> q;
  int64_t pos = first_query(f.dump, 0, 0, q);
  CHECK(held.query(0, 0, q.data(), pos, *held.params({{"budget", "8"}})).pool_generation == r1.generation);
  CHECK(pool.query("doc", 0, 0, q.data(), pos, {{"budget", "8"}}).pool_generation == r2.generation);
  // retire waits for the leases of the generation it retires.
  Lease current = pool.acquire("doc");
  std::atomic<bool> retired{false};
  std::thread t([&] {
    pool.retire("doc", true);
    retired = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(retired.load());
  CHECK(reason_of([&] { pool.acquire("doc"); }) == "NOT_PUBLISHED");  // hidden at once
  current = Lease();
  t.join();
  CHECK(retired.load());
  CHECK(pool.stats().host_used == r1.host_bytes);  // the older generation is still leased
  held = Lease();
  CHECK(pool.stats().host_used == 0);
  CHECK(pool.stats().retiring == 0);
}

TEST_CASE("pool: least recently used unleased generations are evicted to admit a publish, leased ones never") {
  Fixture f;
  const int64_t one = [&] {
    Pool p(PoolOptions{});
    return p.publish(publish_request("x", f.pq)).host_bytes;
  }();
  // A publish reserves its selector state at an upper bound first (2 x raw section bytes + 4 KiB a
  // part) and shrinks it once built: the budget must hold that peak on top of the residents.
  ArtifactReader r(f.pq);
  int64_t raw = 0;
  for (const auto& sec : r.sections()) raw += static_cast<int64_t>(sec.raw_size);
  const int64_t peak = static_cast<int64_t>(r.file_size()) + 2 * raw + 4096 * 4;
  REQUIRE(peak > one);
  Pool pool(PoolOptions{2 * one + peak, 0, nullptr});
  pool.publish(publish_request("a", f.pq));
  pool.publish(publish_request("b", f.pq));
  pool.publish(publish_request("c", f.pq));
  pool.acquire("a");  // a is now more recent than b
  PublishReceipt rd = pool.publish(publish_request("d", f.pq));
  CHECK(rd.evicted == std::vector<std::string>{"b"});
  Lease la = pool.acquire("c"), lb = pool.acquire("a"), lc = pool.acquire("d");
  CHECK(reason_of([&] { pool.publish(publish_request("e", f.pq)); }) == "HOST_BUDGET_EXCEEDED");
  CHECK(pool.keys() == std::vector<std::string>({"a", "c", "d"}));
  lb = Lease();
  CHECK(pool.publish(publish_request("e", f.pq)).evicted == std::vector<std::string>{"a"});
}

TEST_CASE("pool: every kind on both tiers agrees with the independent reference scorer under other settings") {
  // Artifacts over the first 240 rows of a dump with queries at positions 200..299: 61 queries
  // per (layer, q head) at or after the coverage end, and 40 in squeeze's observation window.
  TempDir tmp;
  const std::string dump = tmp.file("d.h5"), pq = tmp.file("pq.kvi"), ck = tmp.file("ck.kvi"),
                    lsh = tmp.file("lsh.kvi"), sq = tmp.file("sq.kvi"), pq16 = tmp.file("pq16.kvi"),
                    ck16 = tmp.file("ck16.kvi"), pq2 = tmp.file("pq2.kvi");
  kind_dump(dump, 300, 11, 100);
  auto opts = [](const std::string& out) {
    BuildOptions b = quiet_build(out, 1, 1);
    b.prefix = 240;
    return b;
  };
  PqParams pp;
  pp.subspaces = 4;
  pp.bits = 4;
  pp.iters = 6;
  build_artifact(dump, opts(pq), PqBuilder(pp));
  ClusterKvParams cp;
  cp.clusters = 8;
  build_artifact(dump, opts(ck), ClusterKvBuilder(cp));
  // f16 codebooks and centroids: the device image widens them (KindSpec::device_f32_sections).
  pp.codebook_dtype = "f16";
  pp.bits = 5;
  build_artifact(dump, opts(pq16), PqBuilder(pp));
  // m 2, b 3: 64 code pairs for 239 rows, so the selector lists rows by code pair (some pairs empty).
  pp.subspaces = 2;
  pp.bits = 3;
  build_artifact(dump, opts(pq2), PqBuilder(pp));
  cp.centroid_dtype = "f16";
  cp.clusters = 20;
  build_artifact(dump, opts(ck16), ClusterKvBuilder(cp));
  LshParams lp;
  lp.bits = 4;
  lp.tables = 24;
  build_artifact(dump, opts(lsh), LshBuilder(lp));
  SqueezeParams sp;
  sp.observation_window = 40;
  build_artifact(dump, opts(sq), SqueezeBuilder(sp));
  struct Case {
    std::string art;
    QuerySettings settings;
    RefQuery rq;
  };
  auto rq = [](double frac, int64_t rows, int64_t c, const char* quant, bool flat) {
    RefQuery r;
    r.budget_fraction = frac;
    r.budget_rows = rows;
    r.min_collisions = c;
    r.quantile = quant;
    r.flat = flat;
    return r;
  };
  const std::vector<Case> cases = {
      {pq, {{"budget", "37"}}, rq(0, 37, 2, "", false)},
      {pq, {{"budget", "0.5"}}, rq(0.5, -1, 2, "", false)},
      {ck, {{"budget", "45"}}, rq(0, 45, 2, "", false)},
      {ck, {{"budget", "0.03"}}, rq(0.03, -1, 2, "", false)},
      {pq16, {{"budget", "0.2"}}, rq(0.2, -1, 2, "", false)},
      {pq2, {{"budget", "0.03"}}, rq(0.03, -1, 2, "", false)},
      {pq2, {{"budget", "0.5"}}, rq(0.5, -1, 2, "", false)},
      {pq2, {{"budget", "37"}}, rq(0, 37, 2, "", false)},
      {ck16, {{"budget", "30"}}, rq(0, 30, 2, "", false)},
      {lsh, {{"min_collisions", "1"}}, rq(0.1, -1, 1, "", false)},
      {lsh, {{"min_collisions", "5"}}, rq(0.1, -1, 5, "", false)},
      {sq, {{"quantile", "0.9"}, {"flat", "true"}}, rq(0.1, -1, 2, "0.9", true)},
      {sq, {{"quantile", "0.7"}, {"flat", "false"}}, rq(0.1, -1, 2, "0.7", false)},
      {sq, {{"rank_budget", "23"}}, rq(0, 23, 2, "", false)},
      {sq, {{"rank_budget", "0.25"}, {"quantile", "0.9"}}, rq(0.25, -1, 2, "0.9", false)},
  };
  auto dev = std::make_shared<EmulatedDevice>();
  PoolOptions o;
  o.device = dev;
  o.device_budget = 64 << 20;
  Pool host(PoolOptions{}), device(o);
  Compared tally;
  std::set<std::string> published;
  for (const auto& c : cases) {
    INFO(c.art << " " << json(c.settings).dump());
    if (published.insert(c.art).second) {
      host.publish(publish_request(c.art, c.art));
      device.publish(publish_request(c.art, c.art, true));
    }
    check_queries_equal(host.acquire(c.art), c.art, dump, nullptr, "host", &tally, c.settings, c.rq);
    check_queries_equal(device.acquire(c.art), c.art, dump, nullptr, "device", &tally, c.settings, c.rq);
    // Batches: one layer's queries in one call equal the single queries, on both tiers,
    // on the caller's thread and spread over three.
    check_batch_equals_singles(host.acquire(c.art), dump, c.settings, 1);
    check_batch_equals_singles(host.acquire(c.art), dump, c.settings, 3);
    const int64_t calls = dev->scoring_calls();
    check_batch_equals_singles(device.acquire(c.art), dump, c.settings, 3);
    CHECK(dev->scoring_calls() > calls);  // the batch was scored on the device tier
    // A few queries per head: every kind's parts are answered by the device's batched path
    // (buffers reserved at publish), on the caller's stream, with the single queries' answers.
    const int64_t batches = dev->batch_calls();
    int stream_tag = 0;
    check_batch_equals_singles(device.acquire(c.art), dump, c.settings, 2, 5, &stream_tag);
    CHECK(dev->batch_calls() > batches);
    CHECK(dev->last_stream() == &stream_tag);
    CHECK(dev->last_prepared_stream() == &stream_tag);
  }
  // The batch buffers are the backend's, shown beside the device budget (not charged to it).
  CHECK(device.stats().device_batch_bytes > 0);
  CHECK(device.stats().device_batch_bytes == dev->batch_buffer_bytes());
  CHECK(device.stats().to_json()["device"]["batch_buffers"] == dev->batch_buffer_bytes());
  CHECK(host.stats().device_batch_bytes == 0);
  // A decode step kept on the device (Lease::plan_device_step): every query head of a layer in one
  // plan, enqueued into "device" buffers, gives the single queries' rows and scores; kinds that
  // finish on the host, host-tier generations and bad heads are refused.
  for (const std::string& art : {pq, pq16}) {
    const Lease dl = device.acquire(art);
    const auto& geo = dl.artifact().source().geo;
    const auto params = dl.params({{"budget", "37"}});
    std::vector<int64_t> heads;
    std::vector<float> q, one;
    std::vector<int64_t> positions;
    std::vector<int64_t> order;  // heads interleaved (0, 2, ..., 1, 3, ...): the plan groups them
    for (int64_t h = 0; h < geo.q_heads; h += 2) order.push_back(h);
    for (int64_t h = 1; h < geo.q_heads; h += 2) order.push_back(h);
    for (int64_t h : order) {
      positions.push_back(first_query(dump, 1, h, one));
      heads.push_back(h);
      q.insert(q.end(), one.begin(), one.end());
    }
    const int64_t n = static_cast<int64_t>(heads.size());
    DeviceStepPlan plan = dl.plan_device_step(1, heads.data(), n, *params);
    REQUIRE(plan.count() == n);
    const int64_t per = plan.rows_per_query();
    std::vector<int64_t> ids(static_cast<size_t>(n * per), -1);
    std::vector<float> scores(ids.size());
    int stream_tag = 0;
    plan.enqueue(q.data(), ids.data(), scores.data(), &stream_tag);
    for (int64_t i = 0; i < n; ++i) {
      const CandidateReceipt rc = dl.query(1, heads[i], q.data() + i * geo.head_dim, positions[i], *params);
      REQUIRE(static_cast<int64_t>(rc.candidates.size()) == per);
      CHECK(std::equal(rc.candidates.begin(), rc.candidates.end(), ids.begin() + i * per));
      CHECK(std::equal(rc.scores.begin(), rc.scores.end(), scores.begin() + i * per));
    }
    const int64_t bad_head = geo.q_heads;
    CHECK_THROWS_WITH(dl.plan_device_step(1, &bad_head, 1, *params), Catch::Contains("is outside"));
    CHECK_THROWS_WITH(dl.plan_device_step(1, heads.data(), 0, *params), Catch::Contains("1..65535 queries"));
    CHECK_THROWS_WITH(host.acquire(art).plan_device_step(1, heads.data(), n, *params),
                      Catch::Contains("generation on the device tier"));
  }
  {
    const Lease ckl = device.acquire(ck);
    const int64_t h0 = 0;
    CHECK_THROWS_WITH(ckl.plan_device_step(0, &h0, 1, *ckl.params()), Catch::Contains("runs whole on the device"));
  }
  // PoolOptions::device_batch_queries sizes the batch buffers: groups of 5 queries per part above a
  // reservation of 2 go in several batches, and 0 reserves nothing (query by query); the answers
  // stay the single queries'. squeeze's two-level pass by the factor rule is checked here too.
  for (int64_t reserved : {2, 0}) {
    auto small = std::make_shared<EmulatedDevice>();
    PoolOptions so = o;
    so.device = small;
    so.device_batch_queries = reserved;
    Pool p(so);
    for (const std::string& art : {pq, ck, lsh, sq}) {
      INFO(art << " with " << reserved << " queries reserved per part");
      p.publish(publish_request(art, art, true));
      const int64_t before = small->batch_calls();
      const QuerySettings factor = {{"coarse_rule", "factor"}};
      check_batch_equals_singles(p.acquire(art), dump, art == sq ? factor : QuerySettings{}, 2, 5);
      CHECK((small->batch_calls() > before) == (reserved > 0));
    }
    CHECK((p.stats().device_batch_bytes > 0) == (reserved > 0));
  }
  o.device_batch_queries = -1;
  CHECK_THROWS_WITH(Pool(o), Catch::Contains("device_batch_queries must be in 0..65535"));
  UNSCOPED_INFO("reference comparisons: " << tally.queries << " queries, " << tally.rows << " rows, " << tally.boundary
                                          << " boundary ties");
  CHECK(tally.queries ==
        static_cast<int64_t>(cases.size()) * 2 * 2 * 4 * 61);  // cases x tiers x layers x q heads x queries
  CHECK(tally.rows > 10000);
}

TEST_CASE("pool: batch refusals are USAGE, checked before any query runs") {
  Fixture f;
  Pool pool(PoolOptions{});
  pool.publish(publish_request("doc", f.pq));
  Lease l = pool.acquire("doc");
  const auto params = l.params({{"budget", "5"}});
  const int64_t d = l.artifact().source().geo.head_dim, pos = l.artifact().source().coverage_end;
  std::vector<float> q(static_cast<size_t>(2 * d), 0.5f);
  std::vector<int64_t> heads = {0, 1}, positions = {pos, pos}, ids(10), counts(2);
  QueryBatch b{0, 2, heads.data(), q.data(), positions.data(), nullptr};
  const BatchAnswers out{5, ids.data(), counts.data(), nullptr, nullptr};
  CHECK_NOTHROW(l.query_batch(b, *params, out, 2));
  CHECK(counts == std::vector<int64_t>{5, 5});
  heads[1] = 99;
  CHECK(reason_of([&] { l.query_batch(b, *params, out, 2); }) == "USAGE");
  heads[1] = 1;
  positions[0] = 0;
  CHECK(reason_of([&] { l.query_batch(b, *params, out, 2); }) == "USAGE");
  positions[0] = pos;
  b.layer = -1;
  CHECK(reason_of([&] { l.query_batch(b, *params, out, 2); }) == "USAGE");
  b.layer = 0;
  CHECK(reason_of([&] { l.query_batch(b, *params, {5, ids.data(), nullptr, nullptr, nullptr}, 2); }) == "USAGE");
  CHECK(reason_of([&] { l.query_batch(b, *params, {5, nullptr, counts.data(), nullptr, nullptr}, 2); }) == "USAGE");
  CHECK(reason_of([&] { l.query_batch(b, *params, out, 0); }) == "USAGE");
  CHECK(reason_of([&] { l.query_batch(b, *params, out, 100000); }) == "USAGE");
  CHECK_NOTHROW(l.query_batch(b, *params, out, 1024));  // allowed; runs on at most the CPU count
  b.count = -1;
  CHECK(reason_of([&] { l.query_batch(b, *params, out, 2); }) == "USAGE");
  b.count = 0;  // an empty batch answers nothing and needs no buffers
  CHECK_NOTHROW(l.query_batch(b, *params, {0, nullptr, nullptr, nullptr, nullptr}, 2));
  CHECK(reason_of([&] { Lease{}.query_batch(b, *params, out, 1); }) == "USAGE");
}
