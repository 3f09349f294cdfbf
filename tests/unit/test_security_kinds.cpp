// Regression tests for the kinds' structure validation and the one admission path
// (lib/runtime/include/kvtool/admission.h): re-packed artifacts whose every digest is right but
// whose structure is not are refused with a reason by verify, the pool and the query path alike.
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

#include "clusterkv/clusterkv_builder.h"
#include "kvtool/admission.h"
#include "kvtool/loader.h"
#include "kvtool/query.h"
#include "kvtool/report.h"
#include "lsh/lsh_builder.h"
#include "pq/pq_builder.h"
#include "squeeze/squeeze_builder.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

// One small dump and an artifact of each kind over it (2 layers, 2 kv heads, d 16).
struct Artifacts {
  TempDir tmp;
  std::string dump = tmp.file("d.h5");
  std::string pq = tmp.file("pq.kvi"), lsh = tmp.file("lsh.kvi"), ck = tmp.file("ck.kvi"), sq = tmp.file("sq.kvi");
  Artifacts() {
    kind_dump(dump, 200, 5, 24);
    PqParams p;
    p.subspaces = 4;
    p.bits = 4;
    p.iters = 4;
    build_artifact(dump, quiet_build(pq, 1, 1), PqBuilder(p));
    LshParams l;
    l.bits = 4;
    l.tables = 8;
    build_artifact(dump, quiet_build(lsh, 1, 1), LshBuilder(l));
    ClusterKvParams c;
    c.tokens_per_cluster = 16;
    c.iters = 4;
    build_artifact(dump, quiet_build(ck, 1, 1), ClusterKvBuilder(c));
    SqueezeParams s;
    s.percent_clusters = 10;
    s.observation_window = 20;
    s.iters = 4;
    BuildOptions o = quiet_build(sq, 1, 1);
    o.prefix = 180;
    build_artifact(dump, o, SqueezeBuilder(s));
  }
  std::string repack(const std::string& in, const Repack& rp) const {
    static int n = 0;
    std::string out = tmp.file("r" + std::to_string(++n) + ".kvi");
    repack_artifact(in, out, rp);
    return out;
  }
};

// The reason each reader gives: verify (the library call of `kvtool verify`), the pool publish
// and the query path (admission, then the selectors answering every part). All must agree.
std::string verify_reason(const std::string& art) {
  return reason_of([&] { verify_artifact(art, VerifyOptions{}); });
}
std::string publish_reason(const std::string& art) {
  return reason_of([&] {
    Pool pool(PoolOptions{});
    pool.publish(publish_request("k", art));
  });
}
std::string query_reason(const std::string& art) {
  return reason_of([&] {
    ArtifactReader r(art);
    admit_artifact(r, {});
    SelectorSet sel(r);
    const auto params = sel.params({});
    std::vector<float> q(static_cast<size_t>(r.source().geo.head_dim), 0.25f);
    for (int64_t l = 0; l < r.source().geo.layers; ++l)
      for (int64_t h = 0; h < r.source().geo.q_heads; ++h) sel.query(l, h, q.data(), r.source().coverage_end, *params);
  });
}
void refused_everywhere(const std::string& art, const std::string& reason) {
  CHECK(verify_reason(art) == reason);
  CHECK(publish_reason(art) == reason);
  CHECK(query_reason(art) == reason);
}

}  // namespace

TEST_CASE("finding 1: query, eval and load refuse artifacts that verify rejects", "[security]") {
  Artifacts a;
  for (const auto& art : {a.pq, a.lsh, a.ck, a.sq}) {
    CHECK(verify_reason(art) == "OK");
    CHECK(query_reason(art) == "OK");
  }
  SECTION("a pq part without its codes section (was SIGSEGV in query)") {
    refused_everywhere(a.repack(a.pq, {{"pq_codes@0,0"}, {}, {}}), "PART_INVALID");
  }
  SECTION("pq codes of 255 with 4 bits (were read out of bounds and answered)") {
    refused_everywhere(a.repack(a.pq, {{}, {{"pq_codes@1,1", 255}}, {}}), "CODE_OUT_OF_RANGE");
  }
  SECTION("an lsh sink beyond int64 (was heap corruption in eval)") {
    refused_everywhere(a.repack(a.lsh, {{}, {}, {{"/params/sink", json(uint64_t{18446744073709551615ull})}}}),
                       "BAD_MANIFEST");
  }
  SECTION("a clusterkv generation reaching beyond the indexed rows (was an out-of-bounds write)") {
    ArtifactReader r(a.ck);
    json gens = r.manifest()["kind_data"]["parts"][0]["generations"];
    gens[0]["rows"][1] = gens[0]["rows"][1].get<int64_t>() + 1000;
    refused_everywhere(a.repack(a.ck, {{}, {}, {{"/kind_data/parts/0/generations", gens}}}),
                       "GENERATIONS_NOT_CONTIGUOUS");
  }
  SECTION("a squeeze fine cluster listing one row twice (was accepted as a partition)") {
    ArtifactReader r(a.sq);
    std::string out = a.tmp.file("sq-dup.kvi");
    forge_artifact(r, out, 0, 0, [](const SectionEntry& s, std::vector<uint8_t>& b) {
      if (s.name != "sq_fine_members") return;
      std::memcpy(b.data() + 4, b.data(), 4);  // the first two members of cluster 0 (sizes >= 2)
    });
    refused_everywhere(out, "MEMBERS_NOT_PARTITION");
  }
}

TEST_CASE("finding 12: wrongly typed manifest members are BAD_MANIFEST, not internal errors", "[security]") {
  Artifacts a;
  refused_everywhere(a.repack(a.pq, {{}, {}, {{"/params/layers", json::array({"0", "1"})}}}), "BAD_MANIFEST");
  refused_everywhere(a.repack(a.ck, {{}, {}, {{"/kind_data/parts/1/layer", "0"}}}), "BAD_MANIFEST");
  refused_everywhere(a.repack(a.lsh, {{}, {}, {{"/params/seed", "7"}}}), "BAD_MANIFEST");
  refused_everywhere(a.repack(a.sq, {{}, {}, {{"/params/coarse_factor", "half"}}}), "BAD_MANIFEST");
  // A deleted calibration field of one squeeze part.
  std::string cut = a.tmp.file("sq-cut.kvi");
  std::filesystem::copy_file(a.sq, cut);
  rewrite_manifest(cut, [](json& m) { m["kind_data"]["parts"][0].erase("calibration_weights"); });
  refused_everywhere(cut, "BAD_MANIFEST");
  std::string no_parts = a.tmp.file("pq-noparts.kvi");
  std::filesystem::copy_file(a.pq, no_parts);
  rewrite_manifest(no_parts, [](json& m) { m.erase("kind_data"); });
  refused_everywhere(no_parts, "BAD_MANIFEST");
}

TEST_CASE("finding 14: an index relabelled as container-test is refused", "[security]") {
  Artifacts a;
  const std::string art = a.repack(a.pq, {{}, {}, {{"/kind", "container-test"}}});
  CHECK(verify_reason(art) == "PART_INVALID");
  CHECK(publish_reason(art) == "PART_INVALID");
}

TEST_CASE("finding 15: load replays a partial (--layers) artifact on its own parts", "[security]") {
  Artifacts a;
  const std::string part = a.tmp.file("pq-l1.kvi");
  PqParams p;
  p.subspaces = 4;
  p.bits = 4;
  p.iters = 4;
  BuildOptions o = quiet_build(part, 1, 1);
  o.layer_first = o.layer_last = 1;
  build_artifact(a.dump, o, PqBuilder(p));
  LoadOptions lo;
  lo.artifacts = {part};
  lo.source = a.dump;
  LoadReport rep;
  REQUIRE(reason_of([&] { rep = load_artifacts(lo); }) == "OK");
  // Layer 1 only: 4 query heads x the queries at or after the coverage end.
  CHECK(rep.queries.count > 0);
  CHECK(rep.queries.mismatches == 0);
  LoadOptions full = lo;
  full.artifacts = {a.pq};
  CHECK(load_artifacts(full).queries.count == 2 * rep.queries.count);
}
