#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <unistd.h>

#include "kvtool/canonical.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/json.h"
#include "kvtool/mapped_file.h"
#include "kvtool/prng.h"
#include "kvtool/sha256.h"
#include "test_util.h"

using namespace kvtool;

TEST_CASE("float16 conversion matches IEEE half on known values and round-trips every half") {
  CHECK(f32_to_f16(1.0f) == 0x3c00);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(1e6f) == 0x7c00);                    // overflow to +Inf
  CHECK(f32_to_f16(5.960464477539063e-08f) == 0x0001);  // smallest subnormal
  CHECK(f16_to_f32(0x3555) == Approx(0.333251953125f));
  CHECK(std::isnan(f16_to_f32(f32_to_f16(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t x = static_cast<uint16_t>(h);
    float f = f16_to_f32(x);
    if (std::isnan(f)) continue;
    REQUIRE(f32_to_f16(f) == x);
  }
  // Round to nearest even between 1 and the next half (1 + 2^-10).
  CHECK(f32_to_f16(1.0f + 0x1.0p-11f) == 0x3c00);
  CHECK(f32_to_f16(1.0f + 0x1.8p-11f) == 0x3c01);
}

TEST_CASE("bulk float16 conversion equals f16_to_f32 bit for bit on every half, NaN payloads included") {
  // Every half once, at every offset from 0 to 8 (the vector path's groups of 8 and its tail),
  // with a NaN or Inf inside some groups and not others.
  std::vector<uint16_t> in(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) in[h] = static_cast<uint16_t>(h * 40503u);  // a permutation
  for (size_t offset = 0; offset <= 8; ++offset) {
    std::vector<float> out(in.size() - offset);
    f16_to_f32_array(in.data() + offset, out.data(), out.size());
    for (size_t i = 0; i < out.size(); ++i) {
      const float want = f16_to_f32(in[offset + i]);
      REQUIRE(std::memcmp(&out[i], &want, sizeof want) == 0);
    }
  }
}

TEST_CASE("bfloat16 conversion rounds to nearest even and keeps NaN") {
  CHECK(f32_to_bf16(1.0f) == 0x3f80);
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (!std::isnan(f)) REQUIRE(f32_to_bf16(f) == h);
  }
}

TEST_CASE("SplitMix64 reproduces the reference sequence documented in formats/kvi-v1.md") {
  SplitMix64 g(0);
  CHECK(g.next() == 0xe220a8397b1dcdafull);
  CHECK(g.next() == 0x6e789e6aa1b965f4ull);
  CHECK(g.next() == 0x06c45d188009454full);
  SplitMix64 a(42), b(42);
  for (int i = 0; i < 100; ++i) REQUIRE(a.normal() == b.normal());
  // Moments of the documented normal transform.
  SplitMix64 n(1);
  double s = 0, s2 = 0;
  const int N = 200000;
  for (int i = 0; i < N; ++i) {
    double x = n.normal();
    s += x;
    s2 += x * x;
  }
  CHECK(std::fabs(s / N) < 0.01);
  CHECK(std::fabs(s2 / N - 1.0) < 0.02);
  CHECK(part_seed(1, 0, 0) != part_seed(1, 0, 1));
  CHECK(part_seed(1, 1, 0) != part_seed(1, 0, 1));
  CHECK(part_seed(1, 2, 3) == part_seed(1, 2, 3));
}

TEST_CASE("SHA-256 matches the FIPS test vector and hex round-trips") {
  CHECK(to_hex(sha256("abc")) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Digest d;
  REQUIRE(from_hex(to_hex(sha256("x")), d));
  CHECK(d == sha256("x"));
  CHECK_FALSE(from_hex("zz", d));
}

TEST_CASE("canonical encoding is typed and length-prefixed (no concatenation ambiguity)") {
  auto h = [](auto f) {
    CanonicalHasher c("test");
    f(c);
    return c.finish();
  };
  Digest a = h([](CanonicalHasher& c) {
    c.str(1, "ab");
    c.str(2, "c");
  });
  Digest b = h([](CanonicalHasher& c) {
    c.str(1, "a");
    c.str(2, "bc");
  });
  Digest c1 = h([](CanonicalHasher& c) { c.u64(1, 5); });
  Digest c2 = h([](CanonicalHasher& c) { c.i64(1, 5); });
  Digest t1 = h([](CanonicalHasher& c) { c.str(1, "x"); });
  Digest t2 = h([](CanonicalHasher& c) { c.str(2, "x"); });
  CHECK(a != b);
  CHECK(c1 != c2);
  CHECK(t1 != t2);
}

TEST_CASE("canonical JSON sorts keys, has no whitespace and prints shortest round-trip numbers") {
  json j = json::parse(R"({"b": 1, "a": [1.5, 0.1, 10000.0], "c": {"z": true, "y": null}})");
  CHECK(canonical_json(j) == R"({"a":[1.5,0.1,10000.0],"b":1,"c":{"y":null,"z":true}})");
}

TEST_CASE("every reason code maps to a documented exit code, by enum and by name") {
  CHECK(exit_code_for(Reason::USAGE) == ExitCode::usage);
  CHECK(exit_code_for(Reason::IO_ERROR) == ExitCode::io);
  CHECK(exit_code_for(Reason::INTERNAL) == ExitCode::internal);
  CHECK(exit_code_for(Reason::BAD_MAGIC) == ExitCode::invalid);
  CHECK(exit_code_for(Reason::CODE_OUT_OF_RANGE) == ExitCode::invalid);
  std::set<std::string> seen;
  for (size_t i = 0; i < all_reasons().size(); ++i) {
    const auto& r = all_reasons()[i];
    REQUIRE(seen.insert(r.code).second);
    CHECK(static_cast<size_t>(r.reason) == i);  // reason_info indexes the table by enum value
    CHECK(std::string(reason_name(r.reason)) == r.code);
    CHECK(reason_from_name(r.code) == r.reason);
  }
  CHECK(!reason_from_name("NO_SUCH_REASON"));
}

TEST_CASE("one mapping of exceptions to reasons: bad_alloc is OUT_OF_MEMORY everywhere") {
  CHECK(error_from_exception(std::make_exception_ptr(std::bad_alloc())).reason() == Reason::OUT_OF_MEMORY);
  CHECK(error_from_exception(std::make_exception_ptr(std::runtime_error("x"))).reason() == Reason::INTERNAL);
  CHECK(error_from_exception(std::make_exception_ptr(Error(Reason::TRUNCATED, "t"))).reason() == Reason::TRUNCATED);
}

TEST_CASE("a mapped file reads in bounds, refuses past its size, and turns a file cut under the map into TRUNCATED") {
  test::TempDir dir;
  const std::string path = dir.file("m.bin");
  std::string bytes(3 * 4096, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  RandomAccessFile file(path);
  MappedFile map(file);
  REQUIRE(map.size() == bytes.size());
  uint64_t sum = 0, want = 0;
  for (size_t i = 5000; i < 9000; ++i) want += static_cast<uint8_t>(bytes[i]);
  map.read(5000, 4000, [&](const uint8_t* p) {
    for (size_t i = 0; i < 4000; ++i) sum += p[i];
  });
  CHECK(sum == want);
  CHECK(test::reason_of([&] { map.read(12000, 289, [](const uint8_t*) {}); }) == "TRUNCATED");
  CHECK(test::reason_of([&] { map.read(UINT64_MAX, 1, [](const uint8_t*) {}); }) == "TRUNCATED");
  // An exception from the reader passes through, and leaves no fault target behind.
  CHECK(test::reason_of([&] { map.read(0, 1, [](const uint8_t*) { throw Error(Reason::BAD_MODEL, "x"); }); }) ==
        "BAD_MODEL");
  REQUIRE(truncate(path.c_str(), 0) == 0);  // someone else cuts the file: its pages now fault
  volatile uint64_t touched = 0;
  std::string message;
  try {
    map.read(4096, 4096, [&](const uint8_t* p) {
      for (size_t i = 0; i < 4096; i += 512) touched = touched + p[i];
    });
  } catch (const Error& e) {
    message = std::string(e.reason_name()) + ": " + e.what();
  }
  CHECK(message == "TRUNCATED: '" + path + "' became shorter while it was read");
  // The guard is per read: a second faulting read is caught the same way.
  CHECK(test::reason_of([&] { map.read(0, 1, [&](const uint8_t* p) { touched = p[0]; }); }) == "TRUNCATED");
}
