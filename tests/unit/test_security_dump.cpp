// Regression tests for hostile dumps and source bindings: the dump reader
// and an artifact's source binding accept exactly what formats/kvdump-v1.md allows, builds apply
// the same checks as `verify`, and a dump's claimed shape never drives memory or time.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>

#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/identity.h"
#include "kvtool/report.h"
#include "kvtool/source_binding.h"
#include "pq/pq_builder.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

// What DumpWriter, which writes whatever it is given, puts into a hostile dump.
struct Hostile {
  DumpSpec spec;
  std::vector<int64_t> q_positions{28, 29, 30, 31};
  std::vector<int64_t> positions;  // empty: no /kv/positions
  float q_poison = 0;              // when not 0, stored at one query value
  bool write_data = true;          // false: declare the datasets, write no chunk
};

Hostile base() {
  Hostile h;
  auto& s = h.spec;
  s.id.model_artifact_sha256 = std::string(64, 'a');
  s.id.adapter_set_sha256 = empty_adapter_set_digest();
  s.id.rope_config = llama_rope_config(16);
  s.id.representation = "full-kv-fp32-post-rope-v1";
  s.id.tenant_namespace = "acme";
  s.id.q_to_kv_head = {0, 0, 1, 1};
  s.geo = {2, 2, 32, 16, 4, 4, DType::f32};
  return h;
}

std::string write(const TempDir& tmp, const std::string& name, const Hostile& h) {
  std::string p = tmp.file(name);
  const auto& g = h.spec.geo;
  DumpWriter w(p, h.spec);
  if (h.write_data) {
    std::vector<float> k(static_cast<size_t>(g.tokens * g.head_dim)), q(static_cast<size_t>(g.q_tokens * g.head_dim));
    for (size_t i = 0; i < k.size(); ++i) k[i] = std::sin(0.1f * static_cast<float>(i));
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::cos(0.1f * static_cast<float>(i));
    for (int64_t l = 0; l < g.layers; ++l)
      for (int64_t kh = 0; kh < g.kv_heads; ++kh) w.write_kv(l, kh, k.data(), k.data());
    for (int64_t l = 0; l < g.layers; ++l)
      for (int64_t qh = 0; qh < g.q_heads; ++qh) {
        std::vector<float> qq = q;
        if (h.q_poison != 0 && l == 1 && qh == 3) qq[2 * g.head_dim + 5] = h.q_poison;
        w.write_q(l, qh, qq.data());
      }
    w.write_q_positions(h.q_positions);
    if (!h.positions.empty()) w.write_positions(h.positions);
  }
  w.commit();
  return p;
}

std::string write(const TempDir& tmp, const std::string& name, const std::function<void(Hostile&)>& edit) {
  Hostile h = base();
  edit(h);
  return write(tmp, name, h);
}

// A valid source binding as an artifact's manifest records it.
json good_binding(const TempDir& tmp) {
  DumpReader r(write(tmp, "good.h5", base()));
  return bind_source(r, r.info().committed_frontier).to_json();
}

std::string binding_reason(json j, const std::function<void(json&)>& edit) {
  edit(j);
  return reason_of([&] { SourceBinding::from_json(j); });
}

struct ChildUse {
  bool ok = false;  // the child threw an Error with the expected reason
  long max_rss_kb = 0;
  double seconds = 0;
};

// Runs `f` in a child process and reports whether it threw `reason`, its peak RSS and its time, so
// that a runaway allocation neither kills the test runner nor hides in the parent's peak.
ChildUse in_child(const std::function<void()>& f, const std::string& reason) {
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    std::string got = reason_of(f);
    _exit(got == reason ? 0 : 1);
  }
  int status = 0;
  struct rusage ru {};
  REQUIRE(wait4(pid, &status, 0, &ru) == pid);
  ChildUse u;
  u.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  u.max_rss_kb = ru.ru_maxrss;
  u.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return u;
}

}  // namespace

TEST_CASE("finding 2: a head map has exactly q_heads entries, each a kv head, in dumps and bindings", "[security]") {
  TempDir tmp;
  json j = good_binding(tmp);
  CHECK(reason_of([&] { SourceBinding::from_json(j); }) == "OK");
  // The out-of-bounds read: q_heads larger than the map, then `query --q-head 500`.
  CHECK(binding_reason(j, [](json& b) { b["q_heads"] = 512; }) == "BAD_MANIFEST");
  CHECK(binding_reason(j, [](json& b) { b["q_heads"] = 2; }) == "BAD_MANIFEST");
  CHECK(binding_reason(j, [](json& b) { b["q_to_kv_head"][1] = 99; }) == "BAD_MANIFEST");
  CHECK(binding_reason(j, [](json& b) { b["q_to_kv_head"][1] = -5; }) == "BAD_MANIFEST");
  CHECK(binding_reason(j, [](json& b) { b["q_to_kv_head"][1] = int64_t(1) << 40; }) == "BAD_MANIFEST");
  CHECK(binding_reason(j, [](json& b) { b["q_to_kv_head"] = json::array({0, 0, 1}); }) == "BAD_MANIFEST");
  // The same through an artifact whose manifest a forger re-wrote with a correct digest.
  std::string art = tmp.file("a.kvi");
  write_test_artifact(tmp.file("good.h5"), art);
  rewrite_manifest(art, [](json& m) { m["source"]["q_heads"] = 500; });
  CHECK(reason_of([&] { ArtifactReader r(art); }) == "BAD_MANIFEST");
  // Dumps: a map entry outside [0, H_kv) or a map that is not a multiple of H_kv.
  CHECK(reason_of([&] { DumpReader r(write(tmp, "m1.h5", [](Hostile& h) { h.spec.id.q_to_kv_head[3] = 99; })); }) ==
        "BAD_HEAD_MAP");
  CHECK(reason_of([&] {
          DumpReader r(write(tmp, "m2.h5", [](Hostile& h) { h.spec.id.q_to_kv_head = {0, 0, 1, 1, 0}; }));
        }) == "BAD_HEAD_MAP");
}

TEST_CASE("finding 14: source bindings with impossible fields are BAD_MANIFEST", "[security]") {
  TempDir tmp;
  json j = good_binding(tmp);
  const std::vector<std::pair<const char*, std::function<void(json&)>>> cases = {
      {"layers 2^62", [](json& b) { b["layers"] = int64_t(1) << 62; }},
      {"layers 0", [](json& b) { b["layers"] = 0; }},
      {"kv_heads 5000", [](json& b) { b["kv_heads"] = 5000; }},
      {"head_dim 2^20", [](json& b) { b["head_dim"] = 1 << 20; }},
      {"tokens 2^40", [](json& b) { b["tokens"] = int64_t(1) << 40; }},
      {"tokens 2^64-1", [](json& b) { b["tokens"] = std::numeric_limits<uint64_t>::max(); }},
      {"tenant empty", [](json& b) { b["tenant_namespace"] = ""; }},
      {"tenant ..", [](json& b) { b["tenant_namespace"] = ".."; }},
      {"tenant path", [](json& b) { b["tenant_namespace"] = "../../etc/passwd"; }},
      {"model sha short", [](json& b) { b["model_artifact_sha256"] = "abc"; }},
      {"adapter sha non-hex", [](json& b) { b["adapter_set_sha256"] = std::string(64, 'z'); }},
      {"payload digest short", [](json& b) { b["payload_sha256"] = "00"; }},
      {"content digest non-hex", [](json& b) { b["content_digest"] = std::string(64, 'g'); }},
      {"prefix digest short", [](json& b) { b["prefix_tokens_sha256"] = "ab"; }},
      {"coverage beyond frontier", [](json& b) { b["coverage_end"] = b["committed_frontier"].get<int64_t>() + 1; }},
      {"frontier beyond T", [](json& b) { b["committed_frontier"] = b["tokens"].get<int64_t>() + 1; }},
      {"rope not JSON", [](json& b) { b["rope_config"] = "{"; }},
      {"rope nested 100,000 deep",
       [](json& b) { b["rope_config"] = std::string(100000, '[') + std::string(100000, ']'); }},
      {"empty representation", [](json& b) { b["representation"] = ""; }},
  };
  for (const auto& [name, edit] : cases) {
    INFO(name);
    CHECK(binding_reason(j, edit) == "BAD_MANIFEST");
  }
  std::string art = tmp.file("a.kvi");
  write_test_artifact(tmp.file("good.h5"), art);
  rewrite_manifest(art, [](json& m) { m["source"]["layers"] = int64_t(1) << 62; });
  CHECK(reason_of([&] { verify_artifact(art, {}); }) == "BAD_MANIFEST");
}

TEST_CASE("finding 13: NaN or Inf in /kv/q is rejected by verify, builds and every query read", "[security]") {
  TempDir tmp;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::string p = write(tmp, "q.h5", [&](Hostile& h) { h.q_poison = bad; });
    CHECK(reason_of([&] { verify_dump(p); }) == "NON_FINITE");
    DumpReader r(p);
    std::vector<float> q(64);
    CHECK(reason_of([&] { r.read_q(1, 3, q.data()); }) == "NON_FINITE");
    CHECK(reason_of([&] { r.read_q(0, 0, q.data()); }) == "OK");
    CHECK(reason_of([&] { bind_source(r, 32); }) == "NON_FINITE");  // what every build binds
    PqParams pp;
    pp.subspaces = 4;
    pp.bits = 4;
    CHECK(reason_of([&] { build_artifact(p, quiet_build(tmp.file("q.kvi")), PqBuilder(pp)); }) == "NON_FINITE");
  }
}

TEST_CASE("finding 13: q_positions must be rows 0 to T - 1", "[security]") {
  TempDir tmp;
  CHECK(reason_of([&] {
          DumpReader r(write(tmp, "n.h5", [](Hostile& h) { h.q_positions = {-1, 1, 2, 3}; }));
        }) == "BAD_ATTRIBUTE");
  CHECK(reason_of([&] {
          DumpReader r(write(tmp, "t.h5", [](Hostile& h) { h.q_positions = {0, 1, 2, 32}; }));
        }) == "BAD_ATTRIBUTE");
  CHECK(reason_of([&] {
          DumpReader r(write(tmp, "ok.h5", [](Hostile& h) { h.q_positions = {0, 1, 2, 31}; }));
        }) == "OK");
}

TEST_CASE("finding 13: a tenant follows the store key part rule", "[security]") {
  for (std::string bad : {std::string(""), std::string("."), std::string(".."), std::string("../../etc/passwd"),
                          std::string("a/b"), std::string("a\\b"), std::string("a\0b", 3), std::string("a\tb"),
                          std::string("a\x7f"), std::string(257, 'x')}) {
    INFO(bad);
    CHECK(!key_part_problem(bad).empty());
  }
  CHECK(key_part_problem("acme").empty());
  CHECK(key_part_problem(std::string(256, 'x')).empty());
  CHECK(key_part_problem("caf\xc3\xa9").empty());
  TempDir tmp;
  for (std::string bad : {"../../etc/passwd", "..", "a/b", "tab\there"}) {
    INFO(bad);
    std::string p = write(tmp, "t.h5", [&](Hostile& h) { h.spec.id.tenant_namespace = bad; });
    CHECK(reason_of([&] { DumpReader r(p); }) == "BAD_ATTRIBUTE");
  }
}

TEST_CASE("finding 13: builds reject the dumps verify rejects", "[security]") {
  TempDir tmp;
  const std::vector<std::pair<const char*, std::function<void(Hostile&)>>> cases = {
      {"empty tenant", [](Hostile& h) { h.spec.id.tenant_namespace = ""; }},
      {"short model sha", [](Hostile& h) { h.spec.id.model_artifact_sha256 = "abc123"; }},
      {"non-hex model sha", [](Hostile& h) { h.spec.id.model_artifact_sha256 = std::string(64, 'z'); }},
      {"positions not increasing",
       [](Hostile& h) {
         for (int64_t i = 0; i < 32; ++i) h.positions.push_back(i == 20 ? 5 : i);
       }},
  };
  PqParams pp;
  pp.subspaces = 4;
  pp.bits = 4;
  for (const auto& [name, edit] : cases) {
    INFO(name);
    std::string p = write(tmp, "b.h5", edit);
    std::string verified = reason_of([&] { verify_dump(p); });
    CHECK(verified == "BAD_ATTRIBUTE");
    CHECK(reason_of([&] { build_artifact(p, quiet_build(tmp.file("b.kvi")), PqBuilder(pp)); }) == verified);
  }
}

TEST_CASE("finding 12: a dump whose shape its file does not hold is rejected in bounded memory and time",
          "[security]") {
  TempDir tmp;
  // 7 KB files claiming 2^20 layers, or 4096 x 4096 slices of 2^20 rows: no chunk is ever written.
  std::vector<std::string> files = {write(tmp, "layers.h5",
                                          [](Hostile& h) {
                                            h.spec.geo = {1 << 20, 1, 4, 4, 1, 0, DType::f32};
                                            h.spec.id.q_to_kv_head = {0};
                                            h.write_data = false;
                                          }),
                                    write(tmp, "huge.h5", [](Hostile& h) {
                                      h.spec.geo = {4096, 4096, 1 << 20, 128, 4096, 0, DType::f16};
                                      h.spec.id.q_to_kv_head.assign(4096, 0);
                                      h.write_data = false;
                                    })};
  for (const auto& p : files) {
    INFO(p);
    CHECK(std::filesystem::file_size(p) < 200 * 1024);
    for (const auto& run : std::vector<std::function<void()>>{[&] { DumpReader r(p); }, [&] { verify_dump(p); },
                                                              [&] { inspect_dump(p, 4); }}) {
      ChildUse u = in_child(run, "SHAPE_MISMATCH");
      CHECK(u.ok);
      CHECK(u.max_rss_kb < 200 * 1024);
      CHECK(u.seconds < 5.0);
    }
  }
  // A dump of ordinary size whose writer never wrote a slice: the shape is not backed by data.
  CHECK(reason_of([&] {
          Hostile h = base();
          h.write_data = false;
          DumpReader r(write(tmp, "empty.h5", h));
        }) == "SHAPE_MISMATCH");
}

namespace {

// The fuzz reproducer (fuzz/crashes/README.md), from $KVTOOL_SOURCE or relative to this file.
std::string crash_file(const char* name) {
  const char* src = std::getenv("KVTOOL_SOURCE");
  std::filesystem::path root =
      src ? std::filesystem::path(src) : std::filesystem::path(__FILE__).parent_path() / "../..";
  return (root / "fuzz/crashes" / name).string();
}

std::vector<uint8_t> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void spill(const std::string& p, const std::vector<uint8_t>& b) {
  std::ofstream(p, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

uint64_t le64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + static_cast<size_t>(i)];
  return v;
}

void put_le64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + static_cast<size_t>(i)] = static_cast<uint8_t>(v >> (8 * i));
}

}  // namespace

TEST_CASE("finding 13: a dump whose global heap lies is refused, not read", "[security]") {
  TempDir tmp;
  // The fuzzer's file: one object length of the collection holding the string attributes is 1 GiB.
  const std::string crash = tmp.file("crash.h5");
  std::filesystem::copy_file(crash_file("dump-hdf5-global-heap-vlen-attr.h5"), crash);
  for (const auto& run : std::vector<std::function<void()>>{[&] { DumpReader r(crash); }, [&] { verify_dump(crash); },
                                                            [&] { inspect_dump(crash, 4); }}) {
    ChildUse u = in_child(run, "NOT_A_DUMP");  // a SIGSEGV in libhdf5 before
    CHECK(u.ok);
    CHECK(u.max_rss_kb < 200 * 1024);
    CHECK(u.seconds < 5.0);
  }
  // Lies written into an ordinary dump's collection (one "GCOL" collection in a small dump).
  const std::string good = write(tmp, "good.h5", base());
  const std::vector<uint8_t> clean = slurp(good);
  CHECK(reason_of([&] { DumpReader r(good); }) == "OK");
  const std::string magic = "GCOL";
  const size_t at =
      static_cast<size_t>(std::search(clean.begin(), clean.end(), magic.begin(), magic.end()) - clean.begin());
  REQUIRE(at + 32 < clean.size());
  size_t odd = at + 16;  // the header of the first object whose length is not a multiple of 8
  while (odd + 16 < clean.size() && clean[odd] != 0 && le64(clean, odd + 8) % 8 == 0) odd += 16 + le64(clean, odd + 8);
  REQUIRE(clean[odd] != 0);
  const uint64_t odd_size = le64(clean, odd + 8);
  auto refused = [&](const char* what, const std::function<void(std::vector<uint8_t>&)>& lie) {
    INFO(what);
    std::vector<uint8_t> b = clean;
    lie(b);
    const std::string p = tmp.file("lie.h5");
    spill(p, b);
    ChildUse u = in_child([&] { DumpReader r(p); }, "NOT_A_DUMP");
    CHECK(u.ok);
    CHECK(u.max_rss_kb < 200 * 1024);
  };
  refused("an object larger than its collection", [&](auto& b) { put_le64(b, at + 24, uint64_t(1) << 30); });
  refused("a collection larger than the file", [&](auto& b) { put_le64(b, at + 8, uint64_t(1) << 40); });
  // Same padded size, one byte more than the attribute's own length: libhdf5 would copy it past
  // the buffer it sized from the attribute.
  refused("an object longer than its attribute says", [&](auto& b) { put_le64(b, odd + 8, odd_size + 1); });
  refused("no collection at the address", [&](auto& b) { b[at] = 'X'; });
}
