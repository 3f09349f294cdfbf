#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <set>
#include <filesystem>

#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/prng.h"
#include "kvtool/report.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;
namespace fs = std::filesystem;

namespace {

std::string verify_reason(const std::string& path, const VerifyOptions& o = {}) {
  try {
    verify_artifact(path, o);
  } catch (const Error& e) {
    return e.reason_name();
  }
  return "OK";
}

uint64_t le64(const std::vector<uint8_t>& b, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[off + i];
  return v;
}

size_t temp_files_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
  return n;
}

}  // namespace

TEST_CASE("artifacts round-trip: header, alignment, sections, manifest, binding") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("a.kvi"));
  ArtifactReader r(tmp.file("a.kvi"));
  CHECK(r.kind() == "container-test");
  CHECK(r.sections().size() == 2 * 2 * 2 + 1);
  for (const auto& s : r.sections()) CHECK(s.offset % 64 == 0);
  CHECK(r.manifest()["semantics"] == "candidate_ids_only");
  CHECK(r.manifest()["coverage"] == json({0, 48}));
  CHECK(r.manifest_text() == canonical_json(r.manifest()));
  const SectionEntry* keys = r.find("keys", 1, 0);
  REQUIRE(keys);
  auto bytes = r.read_section(*keys);
  std::vector<float> expect(48 * 16);
  DumpReader d(tmp.file("d.h5"));
  d.read_k(1, 0, 0, 48, expect.data());
  REQUIRE(bytes.size() == expect.size() * 4);
  CHECK(std::memcmp(bytes.data(), expect.data(), bytes.size()) == 0);
  bool any_zstd = false;
  for (const auto& s : r.sections()) any_zstd = any_zstd || s.codec == "zstd";
  CHECK(any_zstd);
  CHECK(verify_reason(tmp.file("a.kvi")) == "OK");
  VerifyOptions o;
  o.source = tmp.file("d.h5");
  o.strict_snapshot = true;
  CHECK(verify_reason(tmp.file("a.kvi"), o) == "OK");
}

TEST_CASE("same inputs give byte-identical artifacts, level 0 stores sections uncompressed") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("a.kvi"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("b.kvi"));
  CHECK(read_bytes(tmp.file("a.kvi")) == read_bytes(tmp.file("b.kvi")));
  write_test_artifact(tmp.file("d.h5"), tmp.file("raw.kvi"), nullptr, -1, 0);
  ArtifactReader r(tmp.file("raw.kvi"));
  for (const auto& s : r.sections()) CHECK(s.codec == "none");
  CHECK(verify_reason(tmp.file("raw.kvi")) == "OK");
}

TEST_CASE("a failed write leaves nothing at the output path and no temporary behind") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  {
    ArtifactWriter w(tmp.file("x.kvi"));
    std::vector<uint8_t> b(10);
    w.add_section("s", "u8", {10}, b.data(), b.size());
    CHECK(temp_files_in(tmp.path) == 1);
    // destroyed without finish(): simulated failure
  }
  CHECK_FALSE(fs::exists(tmp.file("x.kvi")));
  CHECK(temp_files_in(tmp.path) == 0);
  // A failing build over an existing artifact keeps the old one intact.
  write_test_artifact(tmp.file("d.h5"), tmp.file("keep.kvi"));
  auto before = read_bytes(tmp.file("keep.kvi"));
  CHECK_THROWS_AS(write_test_artifact(tmp.file("d.h5"), tmp.file("keep.kvi"), nullptr, 49), Error);
  CHECK(read_bytes(tmp.file("keep.kvi")) == before);
  CHECK(temp_files_in(tmp.path) == 0);
  // Writing into a directory that does not exist is an I/O error.
  try {
    ArtifactWriter w(tmp.file("no/such/dir/a.kvi"));
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.exit_code() == ExitCode::io);
  }
}

TEST_CASE("keygen writes 0600 keys, refuses to overwrite, signatures verify and bind the manifest") {
  TempDir tmp;
  std::string pub = generate_keypair(tmp.file("key.pem"));
  CHECK(pub == tmp.file("key.pub.pem"));
  struct stat st {};
  REQUIRE(stat(tmp.file("key.pem").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  try {
    generate_keypair(tmp.file("key.pem"));
    FAIL("overwrote");
  } catch (const Error& e) {
    CHECK(e.reason() == kvtool::Reason::OUTPUT_EXISTS);
  }
  SigningKey key = SigningKey::load(tmp.file("key.pem"));
  CHECK(load_public_key(pub) == key.public_key());
  small_dump(tmp.file("d.h5"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("s.kvi"), &key);
  VerifyOptions o;
  o.trusted_keys = {key.public_key()};
  o.require_signature = true;
  CHECK(verify_reason(tmp.file("s.kvi"), o) == "OK");
  // Sign after the fact: same manifest digest, now signed.
  write_test_artifact(tmp.file("d.h5"), tmp.file("u.kvi"));
  Digest before = ArtifactReader(tmp.file("u.kvi")).manifest_digest();
  sign_artifact(tmp.file("u.kvi"), key);
  ArtifactReader r(tmp.file("u.kvi"));
  CHECK(r.is_signed());
  CHECK(r.manifest_digest() == before);
  CHECK(verify_reason(tmp.file("u.kvi"), o) == "OK");
  CHECK(read_bytes(tmp.file("u.kvi")) == read_bytes(tmp.file("s.kvi")));  // Ed25519 is deterministic
}

TEST_CASE("mutation corpus: every single mutation is rejected with its expected reason, never a crash") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  generate_keypair(tmp.file("a.pem"));
  generate_keypair(tmp.file("b.pem"));
  SigningKey ka = SigningKey::load(tmp.file("a.pem"));
  SigningKey kb = SigningKey::load(tmp.file("b.pem"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("plain.kvi"), nullptr, 40, 0);  // uncompressed sections
  write_test_artifact(tmp.file("d.h5"), tmp.file("zstd.kvi"), nullptr, 40, 3);
  write_test_artifact(tmp.file("d.h5"), tmp.file("signed.kvi"), &ka, 40, 3);
  const auto plain = read_bytes(tmp.file("plain.kvi"));
  const auto signed_bytes = read_bytes(tmp.file("signed.kvi"));
  ArtifactReader pr(tmp.file("plain.kvi"));
  const uint64_t moff = pr.manifest_end() - pr.manifest_text().size();
  const SectionEntry s0 = pr.sections()[0], s2 = pr.sections()[2];
  const size_t fsz = plain.size();

  struct Case {
    std::string name, expect;
    std::function<std::string()> make;  // returns the path to verify
    VerifyOptions opt;
  };
  int counter = 0;
  auto bytes_case = [&](std::vector<uint8_t> b) {
    std::string p = tmp.file("m" + std::to_string(counter++) + ".kvi");
    write_bytes(p, b);
    return p;
  };
  auto flip = [&](const std::vector<uint8_t>& src, size_t off) {
    auto b = src;
    b[off] ^= 0x40;
    return bytes_case(b);
  };
  auto manifest_case = [&](const std::string& src, std::function<void(json&)> edit, bool canonical = true) {
    std::string p = tmp.file("m" + std::to_string(counter++) + ".kvi");
    fs::copy_file(src, p);
    rewrite_manifest(p, edit, canonical);
    return p;
  };
  auto dump_case = [&](std::function<void(DumpSpec&)> edit,
                       std::function<void(int64_t, int64_t, std::vector<float>&, std::vector<float>&)> poke = {}) {
    std::string p = tmp.file("src" + std::to_string(counter++) + ".h5");
    copy_dump(tmp.file("d.h5"), p, edit, poke);
    return p;
  };
  auto with_source = [](const std::string& src, bool strict = false) {
    VerifyOptions o;
    o.source = src;
    o.strict_snapshot = strict;
    return o;
  };
  VerifyOptions trust_b;
  trust_b.trusted_keys = {kb.public_key()};
  VerifyOptions require;
  require.require_signature = true;

  std::vector<Case> cases = {
      {"header magic", "BAD_MAGIC", [&] { return flip(plain, 0); }, {}},
      {"header major version",
       "UNSUPPORTED_VERSION",
       [&] {
         auto b = plain;
         b[4] = 2;
         return bytes_case(b);
       },
       {}},
      {"header size field",
       "BAD_LAYOUT",
       [&] {
         auto b = plain;
         b[12] = 65;
         return bytes_case(b);
       },
       {}},
      {"footer magic", "BAD_MAGIC", [&] { return flip(plain, fsz - 1); }, {}},
      {"footer version",
       "UNSUPPORTED_VERSION",
       [&] {
         auto b = plain;
         b[fsz - 80 + 68] = 3;
         return bytes_case(b);
       },
       {}},
      {"footer size field", "BAD_LAYOUT", [&] { return flip(plain, fsz - 80 + 64); }, {}},
      {"truncated to 0 bytes", "TRUNCATED", [&] { return bytes_case({}); }, {}},
      {"truncated to 3 bytes",
       "TRUNCATED",
       [&] {
         return bytes_case({plain.begin(), plain.begin() + 3});
       },
       {}},
      {"truncated inside header",
       "TRUNCATED",
       [&] {
         return bytes_case({plain.begin(), plain.begin() + 40});
       },
       {}},
      {"truncated inside sections",
       "TRUNCATED",
       [&] {
         return bytes_case({plain.begin(), plain.begin() + static_cast<long>(fsz / 3)});
       },
       {}},
      {"truncated by one byte",
       "TRUNCATED",
       [&] {
         return bytes_case({plain.begin(), plain.end() - 1});
       },
       {}},
      {"trailing garbage",
       "BAD_LAYOUT",
       [&] {
         auto b = plain;
         b.push_back(0);
         return bytes_case(b);
       },
       {}},
      {"manifest byte", "MANIFEST_DIGEST", [&] { return flip(plain, moff + 10); }, {}},
      {"footer manifest digest", "MANIFEST_DIGEST", [&] { return flip(plain, fsz - 80 + 40); }, {}},
      {"footer manifest offset",
       "BAD_LAYOUT",
       [&] {
         auto b = plain;
         b[fsz - 80 + 5] = 0x7f;
         return bytes_case(b);
       },
       {}},
      {"footer manifest size",
       "BAD_LAYOUT",
       [&] {
         auto b = plain;
         b[fsz - 80 + 8 + 6] = 1;
         return bytes_case(b);
       },
       {}},
      {"section byte (uncompressed)", "SECTION_DIGEST", [&] { return flip(plain, s0.offset + 5); }, {}},
      {"swapped sections",
       "SECTION_DIGEST",
       [&] {
         auto b = plain;
         REQUIRE(s0.stored_size == s2.stored_size);
         std::swap_ranges(b.begin() + static_cast<long>(s0.offset),
                          b.begin() + static_cast<long>(s0.offset + s0.stored_size),
                          b.begin() + static_cast<long>(s2.offset));
         return bytes_case(b);
       },
       {}},
      {"section digest in manifest",
       "SECTION_DIGEST",
       [&] {
         return manifest_case(tmp.file("plain.kvi"),
                              [](json& m) { m["sections"][1]["sha256"] = std::string(64, '0'); });
       },
       {}},
      {"codec claims zstd",
       "DECOMPRESS_FAILED",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["sections"][0]["codec"] = "zstd"; }); },
       {}},
      {"section offset unaligned",
       "BAD_LAYOUT",
       [&] {
         return manifest_case(tmp.file("plain.kvi"), [](json& m) {
           m["sections"][1]["offset"] = m["sections"][1]["offset"].get<uint64_t>() + 8;
         });
       },
       {}},
      {"section beyond manifest",
       "BAD_LAYOUT",
       [&] {
         return manifest_case(tmp.file("plain.kvi"), [](json& m) {
           m["sections"][8]["stored_size"] = 1u << 30;
           m["sections"][8]["raw_size"] = 1u << 30;
           m["sections"][8]["shape"] = {1u << 30};
         });
       },
       {}},
      {"overlapping sections",
       "BAD_LAYOUT",
       [&] {
         return manifest_case(tmp.file("plain.kvi"),
                              [](json& m) { m["sections"][1]["offset"] = m["sections"][0]["offset"]; });
       },
       {}},
      {"raw size vs shape",
       "SHAPE_MISMATCH",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) {
               m["sections"][0]["shape"] = {40, 15};
             }); },
       {}},
      {"unknown section dtype",
       "BAD_MANIFEST",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["sections"][0]["dtype"] = "f64"; }); },
       {}},
      {"params changed",
       "PARAMS_DIGEST",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["params"]["zstd_level"] = 9; }); },
       {}},
      {"unknown kind",
       "UNKNOWN_KIND",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["kind"] = "btree"; }); },
       {}},
      {"non-canonical manifest",
       "BAD_MANIFEST",
       [&] {
         return manifest_case(
             tmp.file("plain.kvi"), [](json&) {}, false);
       },
       {}},
      {"semantics changed",
       "BAD_MANIFEST",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["semantics"] = "reconstructed_keys"; }); },
       {}},
      {"schema version 2",
       "UNSUPPORTED_VERSION",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["schema_version"] = 2; }); },
       {}},
      {"coverage disagrees with binding",
       "BAD_MANIFEST",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) {
               m["coverage"] = {0, 41};
             }); },
       {}},
      {"source binding field missing",
       "BAD_MANIFEST",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["source"].erase("payload_sha256"); }); },
       {}},
      {"part outside geometry",
       "SHAPE_MISMATCH",
       [&] { return manifest_case(tmp.file("plain.kvi"), [](json& m) { m["sections"][0]["layer"] = 7; }); },
       {}},
      {"signed manifest rewritten",
       "BAD_SIGNATURE",
       [&] { return manifest_case(tmp.file("signed.kvi"), [](json& m) { m["index_generation"] = 2; }); },
       {}},
      {"signature byte",
       "BAD_SIGNATURE",
       [&] { return flip(signed_bytes, le64(signed_bytes, signed_bytes.size() - 80 + 16) + 50); },
       {}},
      {"signature block magic",
       "BAD_SIGNATURE",
       [&] { return flip(signed_bytes, le64(signed_bytes, signed_bytes.size() - 80 + 16)); },
       {}},
      {"signed public key swapped",
       "BAD_SIGNATURE",
       [&] {
         auto b = signed_bytes;
         size_t off = le64(b, b.size() - 80 + 16) + 8;
         std::memcpy(b.data() + off, kb.public_key().data(), 32);
         return bytes_case(b);
       },
       {}},
      {"wrong key", "UNTRUSTED_KEY", [&] { return tmp.file("signed.kvi"); }, trust_b},
      {"unsigned but required", "SIGNATURE_REQUIRED", [&] { return tmp.file("zstd.kvi"); }, require},
      {"wrong tenant", "TENANT_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.tenant_namespace = "other"; }))},
      {"other model", "MODEL_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.model_artifact_sha256 = std::string(64, 'f'); }))},
      {"other checkpoint", "CHECKPOINT_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.checkpoint_generation = 3; }))},
      {"other adapter", "ADAPTER_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.adapter_set_sha256 = std::string(64, 'e'); }))},
      {"other rope", "ROPE_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.rope_config = R"({"theta":500000.0})"; }))},
      {"other position contract", "POSITION_CONTRACT_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.position_contract = "post-rope-relative-v1"; }))},
      {"other representation", "REPRESENTATION_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.representation = "x"; }))},
      {"other head map", "HEAD_MAP_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) {
         s.id.q_to_kv_head = {1, 1, 0, 0};
       }))},
      {"other geometry", "GEOMETRY_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.geo.head_dim = 8; }))},
      {"frontier below coverage", "COVERAGE_BEYOND_FRONTIER", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.committed_frontier = 39; }))},
      {"stale payload", "PAYLOAD_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case({},
                             [](int64_t l, int64_t h, auto& k, auto&) {
                               if (l == 1 && h == 0) k[39 * 16 + 2] *= 1.001f;
                             }))},
      {"strict snapshot, new generation", "SNAPSHOT_MISMATCH", [&] { return tmp.file("zstd.kvi"); },
       with_source(dump_case([](DumpSpec& s) { s.id.request_generation = 4; }), true)},
      {"recorded content digest forged", "STALE_SOURCE",
       [&] {
         return manifest_case(tmp.file("zstd.kvi"),
                              [](json& m) { m["source"]["content_digest"] = std::string(64, '1'); });
       },
       with_source(tmp.file("d.h5"))},
  };
  // Sanity: the unmutated artifacts pass, and rows beyond coverage may change freely.
  CHECK(verify_reason(tmp.file("plain.kvi")) == "OK");
  CHECK(verify_reason(tmp.file("signed.kvi"),
                      with_source(dump_case({}, [](int64_t, int64_t, auto& k, auto&) { k[45 * 16] = 9; }))) == "OK");
  CHECK(verify_reason(tmp.file("zstd.kvi"), with_source(dump_case([](DumpSpec& s) { s.id.request_generation = 4; }))) ==
        "OK");
  std::set<std::string> names;
  for (auto& c : cases) {
    INFO("mutation: " << c.name);
    REQUIRE(names.insert(c.name).second);
    std::string path = c.make();
    CHECK(verify_reason(path, c.opt) == c.expect);
  }
  // Exact sizes: dropping a case, or collapsing cases onto fewer reasons, fails here.
  std::set<std::string> reasons;
  for (auto& c : cases) reasons.insert(c.expect);
  CHECK(cases.size() == 52);
  CHECK(reasons.size() == 27);
}

namespace {

// A container-test artifact over the small dump whose artifact-wide "note" sections are the given
// (dtype, bytes) pairs, each written with `filter`.
void write_notes(const std::string& dump, const std::string& out,
                 const std::vector<std::pair<std::string, std::vector<uint8_t>>>& notes, SectionFilter filter) {
  write_test_artifact(dump, out + ".base", nullptr, 40, 0);
  ArtifactReader base(out + ".base");
  ArtifactWriter w(out, 3);
  for (const auto& [dtype, b] : notes) {
    const int64_t n = static_cast<int64_t>(b.size() / section_dtype_size(dtype));
    w.add_section("note", dtype, {n}, b.data(), b.size(), -1, -1, filter);
  }
  ManifestCore core;
  core.kind = "container-test";
  core.params = base.manifest()["params"];
  core.source = base.source();
  w.finish(core);
}

// Sorted-within-runs values of `width` bytes (like CSR ids), wrapping at the type's range.
std::vector<uint8_t> runs_of_ascending(size_t n, size_t width, uint64_t seed) {
  std::vector<uint8_t> b(n * width);
  SplitMix64 g(seed);
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) {
    v = i % 97 == 0 ? g.next() : v + 1 + g.next() % 700;  // a new run, or a small step up
    std::memcpy(b.data() + i * width, &v, width);
  }
  return b;
}

}  // namespace

TEST_CASE("codec zstd-delta: sorted unsigned sections shrink, read back and verify exactly, streamed or whole") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  // 300,001 elements: larger than zstd's streaming block, an odd count, every unsigned width.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> notes;
  for (auto [dtype, width] : {std::pair<std::string, size_t>{"u8", 1}, {"u16", 2}, {"u32", 4}, {"u64", 8}})
    notes.push_back({dtype, runs_of_ascending(300001, width, width)});
  write_notes(tmp.file("d.h5"), tmp.file("delta.kvi"), notes, SectionFilter::delta);
  write_notes(tmp.file("d.h5"), tmp.file("plain.kvi"), notes, SectionFilter::none);
  ArtifactReader rd(tmp.file("delta.kvi")), rp(tmp.file("plain.kvi"));
  REQUIRE(rd.sections().size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    const SectionEntry &d = rd.sections()[i], &p = rp.sections()[i];
    INFO(d.dtype);
    CHECK(rd.read_section(d) == notes[i].second);
    CHECK(d.sha256 == p.sha256);  // the digest is of the raw bytes, whatever the codec
    if (d.dtype != "u8") {        // u8 deltas wrap too often to pay; u16+ must
      CHECK(d.codec == "zstd-delta");
      CHECK(d.stored_size < p.stored_size);
    }
  }
  CHECK(verify_reason(tmp.file("delta.kvi")) == "OK");  // file-backed: streamed through the fixed buffer
  auto image = read_bytes(tmp.file("delta.kvi"));
  ArtifactReader mem(image.data(), image.size(), "mem");
  mem.retain_sections();
  mem.verify_sections();  // in memory: whole sections decoded and retained
  for (size_t i = 0; i < 4; ++i) CHECK(mem.read_section(mem.sections()[i]) == notes[i].second);
}

TEST_CASE("codec zstd-delta: refused on non-integer dtypes, and a frame read with the wrong codec fails its digest") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  auto ids = runs_of_ascending(5000, 2, 7);
  write_notes(tmp.file("d.h5"), tmp.file("a.kvi"), {{"u16", ids}}, SectionFilter::delta);
  REQUIRE(ArtifactReader(tmp.file("a.kvi")).sections()[0].codec == "zstd-delta");
  fs::copy_file(tmp.file("a.kvi"), tmp.file("f16.kvi"));
  rewrite_manifest(tmp.file("f16.kvi"), [](json& m) { m["sections"][0]["dtype"] = "f16"; });
  CHECK(verify_reason(tmp.file("f16.kvi")) == "BAD_MANIFEST");
  rewrite_manifest(tmp.file("a.kvi"), [](json& m) { m["sections"][0]["codec"] = "zstd"; });
  CHECK(verify_reason(tmp.file("a.kvi")) == "SECTION_DIGEST");
  std::vector<uint8_t> floats(400);
  CHECK(reason_of([&] {
          ArtifactWriter w(tmp.file("f.kvi"));
          w.add_section("note", "f32", {100}, floats.data(), floats.size(), -1, -1, SectionFilter::delta);
        }) == "INTERNAL");
}
