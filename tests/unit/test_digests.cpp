#include <catch2/catch.hpp>

#include "kvtool/error.h"
#include "kvtool/source_binding.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

TEST_CASE("content digest: every content field changes it, generations and frontier do not") {
  DumpIdentity id;
  id.model_artifact_sha256 = std::string(64, 'a');
  id.adapter_set_sha256 = empty_adapter_set_digest();
  id.rope_config = R"({"theta":10000.0})";
  id.representation = "full-kv-fp16-post-rope-v1";
  id.q_to_kv_head = {0, 0, 1, 1};
  DumpGeometry g{2, 2, 100, 16, 4, 0, DType::f16};
  Digest payload = sha256("payload");
  Digest base = content_digest(id, g, 50, payload);

  std::vector<std::pair<std::string, std::function<void(DumpIdentity&, DumpGeometry&)>>> content = {
      {"model", [](auto& i, auto&) { i.model_artifact_sha256 = std::string(64, 'b'); }},
      {"checkpoint", [](auto& i, auto&) { i.checkpoint_generation = 1; }},
      {"adapter", [](auto& i, auto&) { i.adapter_set_sha256 = std::string(64, 'c'); }},
      {"position_contract", [](auto& i, auto&) { i.position_contract = "post-rope-relative-v1"; }},
      {"rope", [](auto& i, auto&) { i.rope_config = R"({"theta":500000.0})"; }},
      {"representation", [](auto& i, auto&) { i.representation = "full-kv-bf16-post-rope-v1"; }},
      {"tenant", [](auto& i, auto&) { i.tenant_namespace = "acme"; }},
      {"head map",
       [](auto& i, auto&) {
         i.q_to_kv_head = {0, 1, 0, 1};
       }},
      {"layers", [](auto&, auto& geo) { geo.layers = 3; }},
      {"kv heads", [](auto&, auto& geo) { geo.kv_heads = 1; }},
      {"head dim", [](auto&, auto& geo) { geo.head_dim = 32; }},
      {"dtype", [](auto&, auto& geo) { geo.dtype = DType::bf16; }},
  };
  for (auto& [name, edit] : content) {
    DumpIdentity i2 = id;
    DumpGeometry g2 = g;
    edit(i2, g2);
    INFO(name);
    CHECK(content_digest(i2, g2, 50, payload) != base);
  }
  CHECK(content_digest(id, g, 51, payload) != base);
  CHECK(content_digest(id, g, 50, sha256("payload2")) != base);
  // rope_config is compared in canonical form: key order and whitespace do not matter.
  DumpIdentity ir = id;
  ir.rope_config = R"({ "theta" : 10000.0 })";
  CHECK(content_digest(ir, g, 50, payload) == base);

  std::vector<std::pair<std::string, std::function<void(DumpIdentity&, DumpGeometry&)>>> provenance = {
      {"namespace generation", [](auto& i, auto&) { i.namespace_generation = 9; }},
      {"request generation", [](auto& i, auto&) { i.request_generation = 9; }},
      {"cache generation", [](auto& i, auto&) { i.cache_generation = 9; }},
      {"publication generation", [](auto& i, auto&) { i.publication_generation = 9; }},
      {"tokens T", [](auto&, auto& geo) { geo.tokens = 200; }},
  };
  Digest snap = snapshot_digest(id, g, 80, base);
  for (auto& [name, edit] : provenance) {
    DumpIdentity i2 = id;
    DumpGeometry g2 = g;
    edit(i2, g2);
    INFO(name);
    CHECK(content_digest(i2, g2, 50, payload) == base);
    CHECK(snapshot_digest(i2, g2, 80, base) != snap);
  }
  CHECK(snapshot_digest(id, g, 81, base) != snap);
}

TEST_CASE("content digest over real rows: any K/V element in range changes it, rows beyond do not") {
  TempDir tmp;
  small_dump(tmp.file("base.h5"));
  const int64_t E = 32;
  std::string base;
  {
    DumpReader r(tmp.file("base.h5"));
    base = bind_source(r, E).content_digest;
  }
  struct Poke {
    int64_t l, h;
    bool k;
    int64_t row, ch;
    bool changes;
  };
  std::vector<Poke> pokes = {{0, 0, true, 0, 0, true},   {1, 1, true, 31, 15, true}, {0, 1, false, 5, 7, true},
                             {1, 0, false, 31, 0, true}, {1, 1, true, 32, 0, false}, {0, 0, false, 47, 15, false}};
  int n = 0;
  for (const auto& p : pokes) {
    std::string path = tmp.file("p" + std::to_string(n++) + ".h5");
    copy_dump(tmp.file("base.h5"), path, {}, [&](int64_t l, int64_t h, auto& k, auto& v) {
      if (l == p.l && h == p.h) (p.k ? k : v)[p.row * 16 + p.ch] += 0.5f;
    });
    DumpReader r(path);
    INFO("layer " << p.l << " head " << p.h << (p.k ? " K" : " V") << " row " << p.row);
    CHECK((bind_source(r, E).content_digest != base) == p.changes);
  }
  // Generations and the frontier change the snapshot digest only.
  copy_dump(tmp.file("base.h5"), tmp.file("gen.h5"), [](DumpSpec& s) {
    s.id.request_generation = 5;
    s.id.cache_generation = 6;
    s.committed_frontier = 40;
  });
  DumpReader a(tmp.file("base.h5")), b(tmp.file("gen.h5"));
  SourceBinding ba = bind_source(a, E), bb = bind_source(b, E);
  CHECK(ba.content_digest == bb.content_digest);
  CHECK(ba.snapshot_digest != bb.snapshot_digest);
  CHECK(ba.prefix_tokens_sha256 == bb.prefix_tokens_sha256);
  CHECK_THROWS_AS(bind_source(b, 41), Error);  // beyond the committed frontier
}
