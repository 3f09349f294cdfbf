#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/producers.h"
#include "kvtool/report.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {
DumpSpec tiny_spec(DType dt) {
  DumpSpec s;
  s.id.model_artifact_sha256 = std::string(64, 'a');
  s.id.adapter_set_sha256 = empty_adapter_set_digest();
  s.id.rope_config = llama_rope_config(4);
  s.id.representation = "test";
  s.id.q_to_kv_head = {0, 0, 1, 1};
  s.geo = {2, 2, 5, 4, 4, 0, dt};
  return s;
}
}  // namespace

TEST_CASE("dumps round-trip in every dtype through the streaming reader") {
  TempDir tmp;
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    std::string p = tmp.file(std::string("rt_") + dtype_name(dt) + ".h5");
    DumpSpec s = tiny_spec(dt);
    {
      DumpWriter w(p, s);
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h) {
          std::vector<float> k(20), v(20);
          for (int i = 0; i < 20; ++i) {
            k[i] = 0.25f * static_cast<float>(i) + l - h;  // exactly representable in all dtypes
            v[i] = -0.5f * static_cast<float>(i + l + h);
          }
          w.write_kv(l, h, k.data(), v.data());
        }
      w.write_tokens({1, 2, 3, 4, 5});
      w.commit();
    }
    DumpReader r(p);
    CHECK(r.info().geo.dtype == dt);
    CHECK(r.info().committed_frontier == 5);
    CHECK(r.tokens() == std::vector<int64_t>{1, 2, 3, 4, 5});
    CHECK(r.positions() == std::vector<int64_t>{0, 1, 2, 3, 4});
    std::vector<float> k(8);
    r.read_k(1, 0, 2, 4, k.data());  // rows 2..3 of layer 1, head 0
    for (int i = 0; i < 8; ++i) CHECK(k[i] == 0.25f * static_cast<float>(8 + i) + 1);
    r.read_v(0, 1, 4, 5, k.data());
    for (int i = 0; i < 4; ++i) CHECK(k[i] == -0.5f * static_cast<float>(16 + i + 1));
  }
}

TEST_CASE("the dump reader rejects structural problems with their own reasons") {
  TempDir tmp;
  auto make = [&](const std::string& name, const std::function<void(DumpSpec&)>& edit) {
    DumpSpec s = tiny_spec(DType::f32);
    edit(s);
    std::string p = tmp.file(name);
    DumpWriter w(p, s);
    std::vector<float> k(static_cast<size_t>(s.geo.tokens * s.geo.head_dim), 1.f);
    for (int l = 0; l < s.geo.layers; ++l)
      for (int h = 0; h < s.geo.kv_heads; ++h) w.write_kv(l, h, k.data(), k.data());
    w.commit();
    return p;
  };
  CHECK(reason_of([&] { DumpReader r(make("f.h5", [](DumpSpec& s) { s.committed_frontier = 6; })); }) ==
        "FRONTIER_BEYOND_T");
  CHECK(reason_of([&] {
          DumpReader r(make("h1.h5", [](DumpSpec& s) { s.id.q_to_kv_head = {0, 0, 2, 1}; }));
        }) == "BAD_HEAD_MAP");
  CHECK(reason_of([&] {
          DumpReader r(make("h2.h5", [](DumpSpec& s) { s.id.q_to_kv_head = {0, 0, 1}; }));
        }) == "BAD_HEAD_MAP");
  CHECK(reason_of([&] { verify_dump(make("m.h5", [](DumpSpec& s) { s.id.model_artifact_sha256 = "nope"; })); }) ==
        "BAD_ATTRIBUTE");
  CHECK(reason_of([&] { verify_dump(make("r.h5", [](DumpSpec& s) { s.id.rope_config = "theta=1"; })); }) ==
        "BAD_ATTRIBUTE");
  CHECK(reason_of([&] { DumpReader r(tmp.file("missing.h5")); }) == "IO_ERROR");
  write_bytes(tmp.file("junk.h5"), std::vector<uint8_t>(100, 7));
  CHECK(reason_of([&] { DumpReader r(tmp.file("junk.h5")); }) == "NOT_A_DUMP");
  // A truncated HDF5 file: the signature is there, the rest is not.
  std::string good = make("good.h5", [](DumpSpec&) {});
  auto bytes = read_bytes(good);
  bytes.resize(bytes.size() / 3);
  write_bytes(tmp.file("trunc.h5"), bytes);
  std::string r = reason_of([&] { verify_dump(tmp.file("trunc.h5")); });
  CHECK((r == "HDF5_ERROR" || r == "NOT_A_DUMP"));
}

TEST_CASE("verify finds NaN/Inf below the frontier but tolerates it in uncommitted rows") {
  TempDir tmp;
  small_dump(tmp.file("base.h5"));
  copy_dump(tmp.file("base.h5"), tmp.file("nan.h5"), {}, [](int64_t l, int64_t h, auto& k, auto&) {
    if (l == 1 && h == 1) k[10 * 16 + 3] = NAN;
  });
  copy_dump(
      tmp.file("base.h5"), tmp.file("inf_tail.h5"), [](DumpSpec& s) { s.committed_frontier = 40; },
      [](int64_t l, int64_t h, auto&, auto& v) {
        if (l == 0 && h == 1) v[45 * 16] = INFINITY;
      });
  try {
    verify_dump(tmp.file("nan.h5"));
    FAIL("NaN not detected");
  } catch (const Error& e) {
    CHECK(e.reason() == kvtool::Reason::NON_FINITE);
    CHECK(std::string(e.what()).find("row 10") != std::string::npos);
  }
  DumpVerification ok = verify_dump(tmp.file("inf_tail.h5"));
  CHECK(ok.uncommitted_rows == 8);
  DumpInspection ins = inspect_dump(tmp.file("inf_tail.h5"));
  CHECK(ins.health_summary.inf == 1);
  CHECK(ins.health_summary.nonfinite_committed == 0);
}

TEST_CASE("synth is deterministic, plausible and marked synthetic") {
  TempDir tmp;
  small_dump(tmp.file("a.h5"), 3, DType::f16);
  small_dump(tmp.file("b.h5"), 3, DType::f16);
  small_dump(tmp.file("c.h5"), 4, DType::f16);
  DumpReader a(tmp.file("a.h5")), b(tmp.file("b.h5")), c(tmp.file("c.h5"));
  CHECK(a.info().synthetic);
  std::vector<float> ka(48 * 16), kb(48 * 16), kc(48 * 16);
  a.read_k(1, 1, 0, 48, ka.data());
  b.read_k(1, 1, 0, 48, kb.data());
  c.read_k(1, 1, 0, 48, kc.data());
  CHECK(ka == kb);
  CHECK(ka != kc);
  // The sink row has the largest norm; an outlier channel dominates the mean magnitude.
  auto norm = [&](int t) {
    double s = 0;
    for (int i = 0; i < 16; ++i) s += ka[t * 16 + i] * ka[t * 16 + i];
    return s;
  };
  for (int t = 1; t < 48; ++t) CHECK(norm(0) > norm(t));
  DumpInspection j = inspect_dump(tmp.file("a.h5"));
  CHECK(j.synthetic == true);
  CHECK(j.geometry.q_tokens == 8);
  CHECK(a.q_positions().front() == 40);
}
