// A pool publication decompresses each zstd section once: admission keeps the digest-checked raw
// bytes for the kind validation, the selectors and the device staging (ArtifactReader's retaining
// mode, lib/format/include/kvtool/artifact.h), and a tampered zstd section is still refused.
#include <zstd.h>

#include <catch2/catch.hpp>
#include <memory>

#include "emulated_device.h"
#include "kvtool/admission.h"
#include "kvtool/artifact.h"
#include "kvtool/builder.h"
#include "kvtool/error.h"
#include "kvtool/pool.h"
#include "pq/pq_builder.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

struct PqArtifact {
  TempDir tmp;
  std::string dump = tmp.file("d.h5"), pq = tmp.file("pq.kvi");
  uint64_t zstd_sections = 0;
  PqArtifact() {
    kind_dump(dump, 300, 11, 8);
    PqParams p;
    p.subspaces = 4;
    p.bits = 4;
    p.iters = 6;
    build_artifact(dump, quiet_build(pq, 1, 3), PqBuilder(p));
    ArtifactReader r(pq);
    for (const auto& s : r.sections()) zstd_sections += s.codec == "zstd";
  }
};

// A zstd section of `image` replaced by another frame of exactly the same size that decompresses to
// different raw bytes: one raw byte changed, recompressed until the sizes agree. Only the section
// digest can tell; everything structural (frame, sizes, offsets, manifest) still holds.
bool tamper_zstd_payload(std::vector<uint8_t>& image, const SectionEntry& s, const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> frame(ZSTD_compressBound(raw.size()));
  for (size_t pos = 0; pos < raw.size(); pos += 7)
    for (int bit = 0; bit < 8; ++bit)
      for (int level = 1; level <= 19; ++level) {
        std::vector<uint8_t> edited = raw;
        edited[pos] ^= static_cast<uint8_t>(1u << bit);
        size_t n = ZSTD_compress(frame.data(), frame.size(), edited.data(), edited.size(), level);
        if (ZSTD_isError(n) || n != s.stored_size) continue;
        std::copy(frame.begin(), frame.begin() + static_cast<std::ptrdiff_t>(n),
                  image.begin() + static_cast<std::ptrdiff_t>(s.offset));
        return true;
      }
  return false;
}

// Whether section_view() served `s` through read_section() into `scratch` (the call comes first:
// the operands of == are evaluated in no fixed order).
bool served_from_scratch(const ArtifactReader& r, const SectionEntry& s, std::vector<uint8_t>& scratch) {
  const uint8_t* p = r.section_view(s, scratch).data();
  return p == scratch.data();
}

}  // namespace

TEST_CASE("pool publish: each zstd section is decompressed once, on the host and device tiers") {
  PqArtifact a;
  REQUIRE(a.zstd_sections > 0);
  // Without the retained bytes a publish decompresses each section at least three times
  // (admission, the kind's validation, the selectors) and a device publish a fourth.
  SECTION("host tier") {
    Pool pool(PoolOptions{});
    pool.publish(publish_request("doc", a.pq));
    Lease l = pool.acquire("doc");
    CHECK(l.artifact().zstd_decompressions() == a.zstd_sections);
    // The retained bytes were released after the publication: a later read decompresses again.
    const SectionEntry* s = nullptr;
    for (const auto& e : l.artifact().sections())
      if (!s && e.codec == "zstd") s = &e;
    REQUIRE(s);
    CHECK(!l.artifact().read_section(*s).empty());
    CHECK(l.artifact().zstd_decompressions() == a.zstd_sections + 1);
  }
  SECTION("device tier (emulated)") {
    PoolOptions o;
    o.device = std::make_shared<EmulatedDevice>();
    o.device_budget = 64 << 20;
    Pool pool(o);
    pool.publish(publish_request("doc", a.pq, true));
    Lease l = pool.acquire("doc");
    CHECK(l.on_device());
    CHECK(l.artifact().zstd_decompressions() == a.zstd_sections);
  }
}

TEST_CASE("pool publish: retaining is off for file-backed readers and above the read budget") {
  PqArtifact a;
  REQUIRE(a.zstd_sections > 0);
  SECTION("a file mapping keeps streaming and re-decompresses on every read") {
    ArtifactReader r(a.pq);
    r.retain_sections();
    admit_artifact(r, {});
    const uint64_t after_admission = r.zstd_decompressions();
    CHECK(after_admission >= a.zstd_sections);
    for (const auto& s : r.sections())
      if (s.codec == "zstd") r.read_section(s);
    CHECK(r.zstd_decompressions() == after_admission + a.zstd_sections);
  }
  SECTION("an in-memory reader over its budget streams and refuses materializing reads") {
    const std::vector<uint8_t> image = read_bytes(a.pq);
    ArtifactReader r(image.data(), image.size(), "image");
    r.set_memory_budget(r.raw_total() - 1);
    r.retain_sections();
    r.verify_sections();
    CHECK(r.zstd_decompressions() == a.zstd_sections);
    for (const auto& s : r.sections())
      if (s.codec == "zstd") CHECK(reason_of([&] { r.read_section(s); }) == "OUT_OF_MEMORY");
  }
}

TEST_CASE("section_view: the checked bytes in place once verified, read_section's otherwise, the same refusals") {
  PqArtifact a;
  const std::vector<uint8_t> image = read_bytes(a.pq);
  ArtifactReader file(a.pq);
  std::vector<uint8_t> scratch;
  SECTION("an in-memory retaining reader serves retained and uncompressed sections without copying") {
    ArtifactReader r(image.data(), image.size(), "image");
    r.retain_sections();
    r.verify_sections();
    const uint64_t after = r.zstd_decompressions();
    for (const auto& s : r.sections()) {
      const auto v = r.section_view(s, scratch);
      CHECK(std::vector<uint8_t>(v.begin(), v.end()) == file.read_section(*file.find(s.name, s.layer, s.kv_head)));
      if (s.codec == "none") CHECK(v.data() == image.data() + s.offset);  // in place
      CHECK(scratch.empty());
    }
    CHECK(r.zstd_decompressions() == after);
    // A copy of an entry is not served in place (its offsets are not the reader's to trust).
    for (SectionEntry s : r.sections())
      if (s.codec == "none" && s.raw_size > 0) CHECK(served_from_scratch(r, s, scratch));
  }
  SECTION("before verification, or from a file, the bytes come through read_section (digest-checked)") {
    ArtifactReader r(image.data(), image.size(), "image");
    for (const auto& s : r.sections())
      if (s.raw_size > 0) CHECK(served_from_scratch(r, s, scratch));
    for (const auto& s : file.sections())
      if (s.raw_size > 0) CHECK(served_from_scratch(file, s, scratch));
  }
  SECTION("over the read budget it refuses like read_section") {
    ArtifactReader r(image.data(), image.size(), "image");
    r.set_memory_budget(r.raw_total() - 1);
    r.verify_sections();
    for (const auto& s : r.sections())
      if (s.raw_size > 0) CHECK(reason_of([&] { r.section_view(s, scratch); }) == "OUT_OF_MEMORY");
  }
}

TEST_CASE("pool publish: a zstd section whose payload decompresses to other bytes is refused with SECTION_DIGEST") {
  PqArtifact a;
  std::vector<uint8_t> image = read_bytes(a.pq);
  bool tampered = false;
  {
    ArtifactReader r(a.pq);
    for (const auto& s : r.sections())
      if (!tampered && s.codec == "zstd") tampered = tamper_zstd_payload(image, s, r.read_section(s));
  }
  REQUIRE(tampered);
  const std::string bad = a.tmp.file("bad.kvi");
  write_bytes(bad, image);
  // The file still parses: the change is inside a section's payload only.
  CHECK(reason_of([&] { ArtifactReader r(bad); }) == "OK");
  Pool pool(PoolOptions{});
  CHECK(reason_of([&] { pool.publish(publish_request("doc", bad)); }) == "SECTION_DIGEST");
  CHECK(reason_of([&] { pool.acquire("doc"); }) == "NOT_PUBLISHED");
  CHECK(pool.stats().host_used == 0);
  // The intact artifact is still published afterwards.
  CHECK(reason_of([&] { pool.publish(publish_request("doc", a.pq)); }) == "OK");
}
