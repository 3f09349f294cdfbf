// Regression tests for the container, manifest and signature readers: each builds a hostile file
// (valid digests around broken structure, forged signatures, bombs) and checks the reader's answer.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "kvtool/admission.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/prng.h"
#include "kvtool/report.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

uint64_t le64(const std::vector<uint8_t>& b, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[off + i];
  return v;
}
void put64(std::vector<uint8_t>& b, size_t off, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[off + i] = static_cast<uint8_t>(v >> (8 * i));
}

// Replaces the manifest bytes of an unsigned artifact by `text` (any text: no parsing here) and
// fixes the footer digest and sizes: what a forger who knows the format writes.
void replace_manifest_text(const std::string& path, const std::string& text) {
  auto b = read_bytes(path);
  const size_t f = b.size() - kKviFooterSize;
  std::vector<uint8_t> footer(b.begin() + static_cast<long>(f), b.end());
  std::vector<uint8_t> out(b.begin(), b.begin() + static_cast<long>(le64(b, f)));
  out.insert(out.end(), text.begin(), text.end());
  put64(footer, 8, text.size());
  put64(footer, 16, 0);
  put64(footer, 24, 0);
  Digest d = sha256(text);
  std::memcpy(footer.data() + 32, d.data(), 32);
  out.insert(out.end(), footer.begin(), footer.end());
  put64(out, 16, out.size());
  write_bytes(path, out);
}

// Peak resident memory growth of `f`, in bytes: the high-water mark is reset first (Linux
// /proc/self/clear_refs "5"), so earlier tests in this process do not count.
uint64_t status_kb(const char* field) {
  std::ifstream s("/proc/self/status");
  std::string line;
  while (std::getline(s, line))
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(std::strlen(field)));
  return 0;
}
uint64_t peak_rss_growth(const std::function<void()>& f) {
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const uint64_t before = status_kb("VmRSS:");
  f();
  const uint64_t peak = status_kb("VmHWM:");
  return peak > before ? (peak - before) * 1024 : 0;
}

// A zstd frame of `raw` zero bytes made of RLE blocks of 128 KiB: 4 bytes per block, so 1 GiB
// takes 32 KiB. The header states the content size and a 1 MiB window (not single-segment).
std::vector<uint8_t> rle_frame(uint64_t raw) {
  std::vector<uint8_t> f = {0x28, 0xb5, 0x2f, 0xfd, 0xc0, 10 << 3};
  for (int i = 0; i < 8; ++i) f.push_back(static_cast<uint8_t>(raw >> (8 * i)));
  const uint64_t block = 128 << 10;
  for (uint64_t done = 0; done < raw; done += block) {
    const uint64_t n = std::min(block, raw - done);
    const uint32_t hdr = (done + n == raw ? 1u : 0u) | (1u << 1) | static_cast<uint32_t>(n << 3);
    f.insert(f.end(), {static_cast<uint8_t>(hdr), static_cast<uint8_t>(hdr >> 8), static_cast<uint8_t>(hdr >> 16), 0});
  }
  return f;
}

std::string zeros_sha256(uint64_t n) {
  std::vector<uint8_t> z(1 << 20);
  Sha256 h;
  for (uint64_t done = 0; done < n; done += z.size()) h.update(z.data(), std::min<uint64_t>(z.size(), n - done));
  return to_hex(h.finish());
}

// A container-test artifact over the small dump whose one section is `stored` with the entry's
// claims (a "re-packed" artifact: every digest can be right).
void write_claiming(const std::string& dump, const std::string& out, const SectionEntry& e,
                    const std::vector<uint8_t>& stored, const SigningKey* key = nullptr) {
  write_test_artifact(dump, out + ".base", nullptr, 40, 0);
  ArtifactReader base(out + ".base");
  ArtifactWriter w(out, 0);
  w.add_stored_section(e, stored.data());
  ManifestCore core;
  core.kind = "container-test";
  core.params = base.manifest()["params"];
  core.source = base.source();
  w.finish(core, key);
}

SectionEntry note_entry(uint64_t raw, uint64_t stored, const std::string& sha) {
  SectionEntry e;
  e.name = "note";
  e.dtype = "u8";
  e.shape = {static_cast<int64_t>(raw)};
  e.codec = "zstd";
  e.raw_size = raw;
  e.stored_size = stored;
  e.sha256 = sha;
  return e;
}

}  // namespace

TEST_CASE("finding 3: a manifest nesting 100,000 arrays is refused before parsing", "[security]") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("a.kvi"), nullptr, 40, 0);
  std::string text = ArtifactReader(tmp.file("a.kvi")).manifest_text();
  const std::string anchor = "\"kind_data\":{";
  const size_t at = text.find(anchor);
  REQUIRE(at != std::string::npos);
  text.insert(at + anchor.size(), "\"deep\":" + std::string(100000, '[') + std::string(100000, ']') + ",");
  CHECK(text.size() > 200000);
  replace_manifest_text(tmp.file("a.kvi"), text);
  CHECK(reason_of([&] { ArtifactReader r(tmp.file("a.kvi")); }) == "BAD_MANIFEST");
  CHECK(reason_of([&] { verify_artifact(tmp.file("a.kvi"), {}); }) == "BAD_MANIFEST");

  // The scan counts only structure: brackets inside strings (escaped quotes included) do not nest.
  const std::string deep64 = std::string(64, '[') + std::string(64, ']');
  CHECK(parse_untrusted_json(deep64, "t", Reason::BAD_MANIFEST).is_array());
  CHECK(reason_of([&] { parse_untrusted_json("[" + deep64 + "]", "t", Reason::BAD_MANIFEST); }) == "BAD_MANIFEST");
  CHECK(reason_of([&] { parse_untrusted_json("[" + deep64 + "]", "t", Reason::BAD_ATTRIBUTE); }) == "BAD_ATTRIBUTE");
  const std::string quoted = "[\"\\\"" + std::string(100, '[') + "\\\\\",{\"a\":\"{{{{\"}]";
  CHECK(parse_untrusted_json(quoted, "t", Reason::BAD_MANIFEST).size() == 2);
  CHECK(reason_of([&] { parse_untrusted_json("[1]", "t", Reason::BAD_MANIFEST, 64, 2); }) == "BAD_MANIFEST");
  CHECK(reason_of([&] { parse_json("{\"a\":", Reason::BAD_ATTRIBUTE, "t"); }) == "BAD_ATTRIBUTE");
}

TEST_CASE("finding 4: tiny artifacts claiming a 1 GiB section verify in bounded memory", "[security]") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  const uint64_t gib = 1ull << 30;
  const uint64_t limit = 100ull << 20;

  // (a) A fake frame header claiming 1 GiB followed by junk: refused from the header, nothing
  // allocated, by verify_sections and by read_section alike.
  std::vector<uint8_t> fake = rle_frame(gib);
  fake.resize(14);
  SplitMix64 rng(5);
  while (fake.size() < 9000) fake.push_back(static_cast<uint8_t>(rng.next()));
  write_claiming(tmp.file("d.h5"), tmp.file("fake.kvi"), note_entry(gib, fake.size(), std::string(64, '0')), fake);
  CHECK(read_bytes(tmp.file("fake.kvi")).size() < 12000);
  {
    ArtifactReader r(tmp.file("fake.kvi"));
    std::string reason;
    CHECK(peak_rss_growth([&] { reason = reason_of([&] { r.verify_sections(); }); }) < limit);
    CHECK(reason == "DECOMPRESS_FAILED");
    CHECK(peak_rss_growth([&] { reason = reason_of([&] { r.read_section(r.sections()[0]); }); }) < limit);
    CHECK(reason == "DECOMPRESS_FAILED");
  }

  // (b) A real 32 KiB RLE frame of 1 GiB with the right digest: a valid container-test artifact.
  // verify streams it (bounded memory); a materializing read over the budget is refused first.
  const std::vector<uint8_t> rle = rle_frame(gib);
  const std::string gib_sha = zeros_sha256(gib);
  write_claiming(tmp.file("d.h5"), tmp.file("rle.kvi"), note_entry(gib, rle.size(), gib_sha), rle);
  CHECK(read_bytes(tmp.file("rle.kvi")).size() < 45000);
  {
    ArtifactReader r(tmp.file("rle.kvi"));
    std::string reason;
    CHECK(peak_rss_growth([&] { reason = reason_of([&] { admit_artifact(r, {}); }); }) < limit);
    CHECK(reason == "OK");
    CHECK(peak_rss_growth([&] { reason = reason_of([&] { verify_artifact(tmp.file("rle.kvi"), {}); }); }) < limit);
    CHECK(reason == "OK");
    r.set_memory_budget(64ull << 20);
    CHECK(peak_rss_growth([&] { reason = reason_of([&] { r.read_section(r.sections()[0]); }); }) < limit);
    CHECK(reason == "OUT_OF_MEMORY");
  }
}

TEST_CASE("finding 4: zstd sections are one sized frame with a bounded window, the signature comes first",
          "[security]") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  const uint64_t gib = 1ull << 30;
  const uint64_t limit = 100ull << 20;
  // A frame without a content size, a second frame after the first, or a window beyond 2^24.
  auto reason_for = [&](std::vector<uint8_t> frame, uint64_t raw, const std::string& name) {
    write_claiming(tmp.file("d.h5"), tmp.file(name), note_entry(raw, frame.size(), zeros_sha256(raw)), frame);
    ArtifactReader r(tmp.file(name));
    return reason_of([&] { r.verify_sections(); }) + "/" + reason_of([&] { r.read_section(r.sections()[0]); });
  };
  std::vector<uint8_t> small = rle_frame(1 << 20);
  CHECK(reason_for(small, 1 << 20, "ok.kvi") == "OK/OK");
  std::vector<uint8_t> no_size = small;
  no_size[4] = 0x00;                                         // no content size field...
  no_size.erase(no_size.begin() + 6, no_size.begin() + 14);  // ...and none stored
  CHECK(reason_for(no_size, 1 << 20, "nosize.kvi") == "DECOMPRESS_FAILED/DECOMPRESS_FAILED");
  std::vector<uint8_t> two = rle_frame(1 << 19);
  auto second = rle_frame(1 << 19);
  two.insert(two.end(), second.begin(), second.end());
  CHECK(reason_for(two, 1 << 19, "two.kvi") == "DECOMPRESS_FAILED/DECOMPRESS_FAILED");
  std::vector<uint8_t> wide = small;
  wide[5] = 15 << 3;  // 2^25-byte window
  CHECK(reason_for(wide, 1 << 20, "wide.kvi") == "DECOMPRESS_FAILED/DECOMPRESS_FAILED");

  // (d) Signature first: a signed bomb whose manifest was edited fails on the signature, before a
  // single section byte is decompressed (so within milliseconds and no memory).
  generate_keypair(tmp.file("k.pem"));
  SigningKey key = SigningKey::load(tmp.file("k.pem"));
  const std::vector<uint8_t> rle = rle_frame(gib);
  write_claiming(tmp.file("d.h5"), tmp.file("signed.kvi"), note_entry(gib, rle.size(), std::string(64, '0')), rle,
                 &key);
  rewrite_manifest(tmp.file("signed.kvi"), [](json& m) { m["index_generation"] = 2; });
  {
    ArtifactReader r(tmp.file("signed.kvi"));
    std::string reason;
    auto t0 = std::chrono::steady_clock::now();
    CHECK(peak_rss_growth([&] { reason = reason_of([&] { admit_artifact(r, {{key.public_key()}, true}); }); }) < limit);
    CHECK(reason == "BAD_SIGNATURE");
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(200));
  }
}

TEST_CASE("finding 10: every version, flag, reserved and padding byte of the container is checked", "[security]") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  generate_keypair(tmp.file("k.pem"));
  SigningKey key = SigningKey::load(tmp.file("k.pem"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("plain.kvi"), nullptr, 40, 0);
  write_test_artifact(tmp.file("d.h5"), tmp.file("signed.kvi"), &key, 40, 3);
  int checked = 0;
  for (const std::string name : {"plain.kvi", "signed.kvi"}) {
    const auto bytes = read_bytes(tmp.file(name));
    REQUIRE(reason_of([&] { verify_artifact(tmp.file(name), {}); }) == "OK");
    const size_t fsz = bytes.size(), foot = fsz - kKviFooterSize;
    // Offsets that must hold what the writer writes: header minor, flags and reserved bytes...
    std::vector<std::pair<size_t, std::string>> offs = {{6, "UNSUPPORTED_VERSION"}, {7, "UNSUPPORTED_VERSION"}};
    for (size_t i = 8; i < 12; ++i) offs.push_back({i, "BAD_LAYOUT"});
    for (size_t i = 24; i < 64; ++i) offs.push_back({i, "BAD_LAYOUT"});
    // ...the footer's minor version and reserved bytes...
    offs.push_back({foot + 70, "UNSUPPORTED_VERSION"});
    offs.push_back({foot + 71, "UNSUPPORTED_VERSION"});
    for (size_t i = 72; i < 76; ++i) offs.push_back({foot + i, "BAD_LAYOUT"});
    // ...and every padding byte: before each section, the manifest and the signature.
    ArtifactReader r(tmp.file(name));
    uint64_t prev = kKviHeaderSize;
    auto pad = [&](uint64_t from, uint64_t to) {
      for (uint64_t i = from; i < to; ++i) offs.push_back({i, "BAD_LAYOUT"});
    };
    for (const auto& s : r.sections()) {
      pad(prev, s.offset);
      prev = s.offset + s.stored_size;
    }
    const uint64_t moff = le64(bytes, foot), mend = moff + le64(bytes, foot + 8), soff = le64(bytes, foot + 16);
    pad(prev, moff);
    if (soff) pad(mend, soff);
    for (const auto& [off, expect] : offs) {
      auto b = bytes;
      b[off] ^= 0x01;
      write_bytes(tmp.file("m.kvi"), b);
      INFO(name << " byte " << off);
      CHECK(reason_of([&] { verify_artifact(tmp.file("m.kvi"), {}); }) == expect);
      ++checked;
    }
    // Parts placed beyond the next 64-byte boundary (zero gaps, offsets fixed up) are refused too.
    auto gap = bytes;
    gap.insert(gap.begin() + static_cast<long>(foot), 64, 0);
    put64(gap, 16, gap.size());
    write_bytes(tmp.file("gap.kvi"), gap);
    CHECK(reason_of([&] { verify_artifact(tmp.file("gap.kvi"), {}); }) == "BAD_LAYOUT");
  }
  CHECK(checked > 200);
}

TEST_CASE("finding 11: small-order keys and non-canonical signatures are BAD_SIGNATURE", "[security]") {
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  generate_keypair(tmp.file("k.pem"));
  SigningKey key = SigningKey::load(tmp.file("k.pem"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("s.kvi"), &key, 40, 0);
  const auto bytes = read_bytes(tmp.file("s.kvi"));
  const size_t blk = le64(bytes, bytes.size() - kKviFooterSize + 16);
  auto forge = [&](const PublicKeyRaw& pub, const SignatureRaw& sig) {
    auto b = bytes;
    std::memcpy(b.data() + blk + 8, pub.data(), 32);
    std::memcpy(b.data() + blk + 40, sig.data(), 64);
    write_bytes(tmp.file("f.kvi"), b);
    VerifyOptions require;
    require.require_signature = true;
    return reason_of([&] { verify_artifact(tmp.file("f.kvi"), require); });
  };
  // Identity key, R = identity, S = 0: "valid" for every message under plain Ed25519.
  PublicKeyRaw identity{};
  identity[0] = 1;
  SignatureRaw forged{};
  forged[0] = 1;
  CHECK(forge(identity, forged) == "BAD_SIGNATURE");
  CHECK(is_weak_public_key(identity));
  CHECK_FALSE(verify_signature(identity, "any message", forged));

  // All small-order y values and their non-canonical aliases, with either sign bit.
  const char* weak[] = {
      "0000000000000000000000000000000000000000000000000000000000000000",
      "0100000000000000000000000000000000000000000000000000000000000000",
      "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
      "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
      "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
      "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
      "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
      "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
  };
  for (const char* h : weak) {
    Digest d;
    REQUIRE(from_hex(h, d));
    PublicKeyRaw k;
    std::memcpy(k.data(), d.data(), 32);
    INFO(h);
    CHECK(is_weak_public_key(k));
    k[31] |= 0x80;
    CHECK(is_weak_public_key(k));
  }
  CHECK_FALSE(is_weak_public_key(key.public_key()));

  // S must be below L: an honest signature with L added to S is refused; the honest one passes.
  SignatureRaw honest;
  std::memcpy(honest.data(), bytes.data() + blk + 40, 64);
  CHECK(is_canonical_signature(honest));
  CHECK(forge(key.public_key(), honest) == "OK");
  const uint8_t order[32] = {0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7,
                             0xa2, 0xde, 0xf9, 0xde, 0x14, 0,    0,    0,    0,    0,    0,
                             0,    0,    0,    0,    0,    0,    0,    0,    0,    0x10};
  SignatureRaw plus_l = honest;
  unsigned carry = 0;
  for (int i = 0; i < 32; ++i) {
    unsigned v = plus_l[32 + i] + order[i] + carry;
    plus_l[32 + i] = static_cast<uint8_t>(v);
    carry = v >> 8;
  }
  CHECK_FALSE(is_canonical_signature(plus_l));
  CHECK(forge(key.public_key(), plus_l) == "BAD_SIGNATURE");
  SignatureRaw s_is_l = honest;
  std::memcpy(s_is_l.data() + 32, order, 32);
  CHECK_FALSE(is_canonical_signature(s_is_l));
}

TEST_CASE("finding 16: canonical floats are the shortest round-trip form, 0.1.0 spellings still verify", "[security]") {
  const double x = 0.007559482473880053;
  CHECK(canonical_json(json(x)) == "0.007559482473880053");
  CHECK(legacy_canonical_json(json(x)) == "0.0075594824738800526");
  CHECK(canonical_json(json::parse(R"({"b":1,"a":[1.5,0.1,10000.0,-0.0,1e-05,1e+16,1.5e+300,0.0001]})")) ==
        R"({"a":[1.5,0.1,10000.0,-0.0,1e-05,1e+16,1.5e+300,0.0001],"b":1})");
  // Random doubles across the whole range: shortest digits read back exactly, and the layout is
  // nlohmann's wherever it wrote as many digits.
  SplitMix64 rng(16);
  int differ = 0;
  for (int i = 0; i < 200000; ++i) {
    uint64_t bits = rng.next();
    double v;
    std::memcpy(&v, &bits, 8);
    if (!std::isfinite(v)) continue;
    if (i % 2) v = static_cast<double>(bits >> 11) * std::pow(10.0, static_cast<int>(bits % 40) - 20) * 0x1p-53;
    const std::string c = canonical_json(json(v)), l = legacy_canonical_json(json(v));
    INFO(l);
    REQUIRE(json::parse(c).get<double>() == v);
    REQUIRE(c.size() <= l.size());
    if (c != l) ++differ;
    if (c.size() == l.size()) {  // same digit count (Grisu2 may pick other digits): same layout
      auto shape = [](std::string t) {
        for (auto& ch : t)
          if (ch >= '0' && ch <= '9') ch = 'd';
        return t;
      };
      REQUIRE(shape(c) == shape(l));
    }
  }
  CHECK(differ > 0);

  // Writer and reader agree on the shortest form; a manifest of kvtool 0.1.0 (legacy digits in the
  // manifest and in the params digest) still verifies; other spellings do not.
  TempDir tmp;
  small_dump(tmp.file("d.h5"));
  write_test_artifact(tmp.file("d.h5"), tmp.file("a.kvi"), nullptr, 40, 0);
  rewrite_manifest(tmp.file("a.kvi"), [&](json& m) {
    m["params"]["scale"] = x;
    m["params_digest"] = to_hex(sha256(canonical_json(m["params"])));
  });
  const std::string text = ArtifactReader(tmp.file("a.kvi")).manifest_text();
  CHECK(text.find("0.007559482473880053") != std::string::npos);
  CHECK(reason_of([&] { verify_artifact(tmp.file("a.kvi"), {}); }) == "OK");
  json m = json::parse(text);
  auto with_text = [&](const std::string& name, const std::string& t) {
    write_bytes(tmp.file(name), read_bytes(tmp.file("a.kvi")));
    replace_manifest_text(tmp.file(name), t);
    return reason_of([&] { verify_artifact(tmp.file(name), {}); });
  };
  json legacy = m;
  legacy["params_digest"] = to_hex(sha256(legacy_canonical_json(legacy["params"])));
  CHECK(legacy_canonical_json(legacy).find("0.0075594824738800526") != std::string::npos);
  CHECK(with_text("legacy.kvi", legacy_canonical_json(legacy)) == "OK");
  CHECK(with_text("mixed.kvi", legacy_canonical_json(m)) == "PARAMS_DIGEST");
  std::string other = text;
  other.replace(other.find("0.007559482473880053"), 20, "0.0075594824738800530");
  CHECK(with_text("other.kvi", other) == "BAD_MANIFEST");
}
