// The snapshot interface (kvtool/snapshot.h) and what import and verify do over it: the registry
// picks readers by name and by content; every format goes through one value check, so a value a
// bf16 or f16 dump cannot hold is refused whatever the reader (a finite f32 3.4e38 once became +Inf
// in some import paths); compare_snapshot_with_dump matches rows by position.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <limits>

#include "kvtool/dump.h"
#include "kvtool/import.h"
#include "kvtool/report.h"
#include "kvtool/snapshot.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

// A snapshot held in memory: K = V = f(layer, head, row, i), positions given or 0..T-1.
class MemorySnapshot final : public KvSnapshot {
 public:
  MemorySnapshot(int64_t layers, int64_t heads, int64_t tokens, int64_t d) {
    info_.geo.layers = layers;
    info_.geo.kv_heads = heads;
    info_.geo.tokens = tokens;
    info_.geo.head_dim = d;
    info_.geo.dtype = DType::f32;
    info_.format = "memory";
    info_.source_dtype = "f32";
  }
  SnapshotInfo& mutable_info() { return info_; }
  const SnapshotInfo& info() const override { return info_; }
  float value(int64_t l, int64_t h, int64_t t, int64_t i) const {
    if (l == big_layer && h == 0 && t == 1 && i == 0) return big;
    return static_cast<float>(l * 1000 + h * 100 + t) + 0.25f * static_cast<float>(i);
  }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override {
    const auto& g = info_.geo;
    k.resize(static_cast<size_t>(g.kv_heads * g.tokens * g.head_dim));
    for (int64_t h = 0; h < g.kv_heads; ++h)
      for (int64_t t = 0; t < g.tokens; ++t)
        for (int64_t i = 0; i < g.head_dim; ++i)
          k[static_cast<size_t>((h * g.tokens + t) * g.head_dim + i)] = value(layer, h, t, i);
    v = k;
  }
  void complete_meta(json& meta) const override {
    if (!meta.contains("model_artifact_sha256")) meta["model_artifact_sha256"] = std::string(64, 'b');
    if (!meta.contains("rope_config")) meta["rope_config"] = llama_rope_config(info_.geo.head_dim);
  }
  int64_t big_layer = -1;
  float big = 0;

 private:
  SnapshotInfo info_;
};

ImportOptions with_dtype(std::optional<DType> dt) {
  ImportOptions o;
  o.dtype = dt;
  return o;
}

void put_f32(const std::string& path, const std::vector<float>& x) {
  std::vector<uint8_t> b(x.size() * 4);
  std::memcpy(b.data(), x.data(), b.size());
  write_bytes(path, b);
}

}  // namespace

TEST_CASE("snapshot: import checks every value against the dump dtype, once for every reader", "[snapshot]") {
  TempDir t;
  MemorySnapshot s(2, 2, 5, 4);
  // The largest finite float rounds to bf16 +Inf, and anything above 65504 does not fit f16.
  s.big_layer = 1;
  s.big = 3.4e38f;
  CHECK(reason_of([&] { import_snapshot(s, with_dtype(DType::bf16), t.file("bf16.h5")); }) == "NON_FINITE");
  CHECK_FALSE(exists(t.file("bf16.h5")));
  CHECK(reason_of([&] { import_snapshot(s, with_dtype(DType::f16), t.file("f16.h5")); }) == "NON_FINITE");
  CHECK_FALSE(exists(t.file("f16.h5")));
  import_snapshot(s, with_dtype(std::nullopt), t.file("f32.h5"));  // f32 holds it
  DumpReader d(t.file("f32.h5"));
  std::vector<float> rows(5 * 4);
  d.read_k(1, 0, 0, 5, rows.data());
  CHECK(rows[1 * 4] == 3.4e38f);
  s.big = std::numeric_limits<float>::quiet_NaN();
  CHECK(reason_of([&] { import_snapshot(s, with_dtype(std::nullopt), t.file("nan.h5")); }) == "NON_FINITE");
  CHECK_FALSE(exists(t.file("nan.h5")));

  // The same through a real reader (LMCache v1 raw chunks, KV_2LTD f32): bf16 refuses, f32 keeps.
  std::vector<float> chunk(2 * 1 * 3 * 2, 1.f);  // [2, L=1, T=3, H*d=2]
  chunk[2] = 3.4e38f;
  put_f32(t.file("c0.pt"), chunk);
  SnapshotRequest r;
  r.inputs = std::vector<std::string>{t.file("c0.pt")};
  r.format = "lmcache-raw";
  r.chunks.memory_format = "KV_2LTD";
  r.chunks.src_dtype = "f32";
  r.chunks.layers = 1, r.chunks.kv_heads = 1, r.chunks.head_dim = 2;
  ImportOptions o = with_dtype(DType::bf16);
  o.meta = json{{"model_artifact_sha256", std::string(64, 'a')}, {"rope_config", json::object()}};
  CHECK(reason_of([&] { import_snapshot(r, o, t.file("lm.h5")); }) == "NON_FINITE");
  CHECK_FALSE(exists(t.file("lm.h5")));
  o.dtype = DType::f32;
  CHECK(import_snapshot(r, o, t.file("lm.h5")).geo.tokens == 3);
}

TEST_CASE("snapshot: the registry picks readers by name and by content", "[snapshot]") {
  TempDir t;
  std::vector<std::string> names;
  for (const SnapshotFormat& f : snapshot_formats()) names.push_back(f.name);
  CHECK(names ==
        std::vector<std::string>{"llama-state", "lmcache-raw", "lmcache-fs", "lmcache-v0", "sglang-page", "tensors"});
  SnapshotRequest r;
  r.format = "no-such-format";
  CHECK(reason_of([&] { snapshot_format_for(r); }) == "USAGE");
  write_bytes(t.file("s.bin"), {'q', 's', 'g', 'g', 3, 0, 0, 0});  // the ggsq magic, little-endian
  write_bytes(t.file("x.npy"), {0x93, 'N', 'U', 'M', 'P', 'Y'});
  r.format.clear();
  r.inputs = std::vector<std::string>{t.file("s.bin")};
  CHECK(std::string(snapshot_format_for(r).name) == "llama-state");
  r.inputs = std::vector<std::string>{t.file("x.npy")};
  CHECK(std::string(snapshot_format_for(r).name) == "tensors");
  r.inputs = std::vector<std::string>{t.file("s.bin"), t.file("x.npy")};  // a state file is read alone
  CHECK(std::string(snapshot_format_for(r).name) == "tensors");
  // A state file needs its model, whatever else is given.
  r.inputs = std::vector<std::string>{t.file("s.bin")};
  CHECK(reason_of([&] { open_snapshot(r); }) == "USAGE");
}

TEST_CASE("snapshot: compare_snapshot_with_dump matches rows by position", "[snapshot]") {
  TempDir t;
  MemorySnapshot s(2, 2, 6, 4);
  import_snapshot(s, with_dtype(std::nullopt), t.file("d.h5"));
  SnapshotComparison c = compare_snapshot_with_dump(s, t.file("d.h5"));
  CHECK(c.max_rel_err_k == 0);
  CHECK(c.max_rel_err_v == 0);
  CHECK(c.layer_rel_err.size() == 2);
  // Rows at positions 2..5 of a 4-row snapshot are the dump's rows 2..5: the values differ (they
  // are a function of the row index), by exactly the dump's row offset.
  MemorySnapshot later(2, 2, 4, 4);
  later.mutable_info().positions = {2, 3, 4, 5};
  c = compare_snapshot_with_dump(later, t.file("d.h5"));
  CHECK(c.max_rel_err_k > 0);
  later.mutable_info().positions = {2, 3, 4, 9};  // the dump has no position 9
  CHECK(reason_of([&] { compare_snapshot_with_dump(later, t.file("d.h5")); }) == "PAYLOAD_MISMATCH");
  MemorySnapshot other(2, 3, 6, 4);
  CHECK(reason_of([&] { compare_snapshot_with_dump(other, t.file("d.h5")); }) == "GEOMETRY_MISMATCH");
}
