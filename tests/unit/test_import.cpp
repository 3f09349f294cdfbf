// kvtool/import.h: the .npy, .npz and safetensors readers on good and hostile bytes (every claimed
// size checked before allocation), and import_snapshot end to end through DumpReader.
#include <zlib.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>

#include "kvtool/dump.h"
#include "kvtool/half.h"
#include "kvtool/import.h"
#include "kvtool/tensor_file.h"
#include "test_util.h"

using namespace kvtool;

namespace {

using Bytes = std::string;

void put(const std::string& path, const Bytes& b) { std::ofstream(path, std::ios::binary) << b; }

Bytes le_bytes(uint64_t v, int n) {
  Bytes b;
  for (int i = 0; i < n; ++i) b.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return b;
}

// An .npy image: version `major`, header dict `dict`, then `data`.
Bytes npy(const std::string& dict, const Bytes& data, int major = 1) {
  Bytes h = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64) h += ' ';
  h += '\n';
  Bytes b = "\x93NUMPY";
  b += static_cast<char>(major);
  b += '\0';
  b += major == 1 ? le_bytes(h.size(), 2) : le_bytes(h.size(), 4);
  return b + h + data;
}

Bytes floats(const std::vector<float>& v) { return Bytes(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

std::vector<float> iota(size_t n, float scale = 0.5f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i) - 3.f;
  return v;
}

Bytes safetensors(const std::string& header, const Bytes& data) { return le_bytes(header.size(), 8) + header + data; }

// A zip with one member `name` (stored or raw-deflated), as np.savez writes it. With `zip64`, the
// central entry's sizes are 0xFFFFFFFF with a zip64 extra field and the end record points to a
// zip64 end record, as zip writers do for members of 4 GiB or more.
Bytes zip_one(const std::string& name, const Bytes& payload, bool compress, bool zip64 = false) {
  Bytes body = payload;
  if (compress) {
    z_stream z{};
    REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
    body.assign(deflateBound(&z, payload.size()), '\0');
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(payload.data()));
    z.avail_in = static_cast<uInt>(payload.size());
    z.next_out = reinterpret_cast<Bytef*>(body.data());
    z.avail_out = static_cast<uInt>(body.size());
    REQUIRE(::deflate(&z, Z_FINISH) == Z_STREAM_END);
    body.resize(z.total_out);
    deflateEnd(&z);
  }
  const uint32_t crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
  const uint16_t method = compress ? 8 : 0;
  Bytes local = le_bytes(0x04034b50, 4) + le_bytes(20, 2) + le_bytes(0, 2) + le_bytes(method, 2) + le_bytes(0, 4) +
                le_bytes(crc, 4) + le_bytes(body.size(), 4) + le_bytes(payload.size(), 4) + le_bytes(name.size(), 2) +
                le_bytes(0, 2) + name;
  const Bytes extra =
      zip64 ? le_bytes(1, 2) + le_bytes(16, 2) + le_bytes(payload.size(), 8) + le_bytes(body.size(), 8) : Bytes();
  Bytes central = le_bytes(0x02014b50, 4) + le_bytes(45, 2) + le_bytes(45, 2) + le_bytes(0, 2) + le_bytes(method, 2) +
                  le_bytes(0, 4) + le_bytes(crc, 4) + le_bytes(zip64 ? 0xffffffffu : body.size(), 4) +
                  le_bytes(zip64 ? 0xffffffffu : payload.size(), 4) + le_bytes(name.size(), 2) +
                  le_bytes(extra.size(), 2) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 4) +
                  le_bytes(0, 4) + name + extra;
  const size_t cd_off = local.size() + body.size();
  Bytes z64;
  if (zip64) {
    const size_t rec = cd_off + central.size();
    z64 = le_bytes(0x06064b50, 4) + le_bytes(44, 8) + le_bytes(45, 2) + le_bytes(45, 2) + le_bytes(0, 4) +
          le_bytes(0, 4) + le_bytes(1, 8) + le_bytes(1, 8) + le_bytes(central.size(), 8) + le_bytes(cd_off, 8) +
          le_bytes(0x07064b50, 4) + le_bytes(0, 4) + le_bytes(rec, 8) + le_bytes(1, 4);
  }
  Bytes eocd = le_bytes(0x06054b50, 4) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(zip64 ? 0xffff : 1, 2) +
               le_bytes(zip64 ? 0xffff : 1, 2) + le_bytes(central.size(), 4) +
               le_bytes(zip64 ? 0xffffffffu : cd_off, 4) + le_bytes(0, 2);
  return local + body + central + z64 + eocd;
}

Reason reason_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.reason();
  }
  return Reason::INTERNAL;  // "did not throw"
}

const std::string kDict24 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }";

}  // namespace

TEST_CASE("import: npy versions 1-3 read back exactly, f16 converted", "[import]") {
  test::TempDir dir;
  const auto v = iota(24);
  for (int major : {1, 2, 3}) {
    const std::string p = dir.file("a" + std::to_string(major) + ".npy");
    put(p, npy(kDict24, floats(v), major));
    TensorFile f(p);
    REQUIRE(f.tensors().size() == 1);
    CHECK(f.tensors()[0].name == "a" + std::to_string(major));
    CHECK(f.tensors()[0].shape == std::vector<int64_t>{2, 3, 4});
    std::vector<float> out(10);
    f.read_f32(0, 7, 10, out.data());
    CHECK(std::equal(out.begin(), out.end(), v.begin() + 7));
  }
  Bytes half;
  for (float x : v) half += le_bytes(f32_to_f16(x), 2);
  put(dir.file("h.npy"), npy("{'descr': '<f2', 'fortran_order': False, 'shape': (24,), }", half));
  std::vector<float> out(24);
  TensorFile(dir.file("h.npy")).read_f32(0, 0, 24, out.data());
  CHECK(out == v);  // multiples of 0.5 are exact in f16
}

TEST_CASE("import: hostile npy headers get reason codes before any allocation", "[import]") {
  test::TempDir dir;
  const std::string p = dir.file("x.npy");
  auto reason = [&](const Bytes& b) {
    put(p, b);
    return reason_of([&] { TensorFile f(p); });
  };
  const Bytes data = floats(iota(24));
  CHECK(reason(npy(kDict24, data).substr(0, 100)) == Reason::TRUNCATED);             // data cut
  CHECK(reason(npy(kDict24, data + "xxxx")) == Reason::BAD_LAYOUT);                  // bytes after the array
  CHECK(reason(npy(kDict24, data).substr(0, 9)) == Reason::TRUNCATED);               // header length cut
  CHECK(reason("\x93NUMPY\x01\x00\xff\xff" + Bytes(40, ' ')) == Reason::TRUNCATED);  // header beyond file
  CHECK(reason(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776, 1024), }", data)) ==
        Reason::TRUNCATED);  // 2^50 elements claimed by a small file: refused, not allocated
  CHECK(reason(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", data)) ==
        Reason::SHAPE_MISMATCH);  // the product overflows
  CHECK(reason(npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4), }", data)) == Reason::BAD_TENSOR_FILE);
  CHECK(reason(npy("{'descr': '<f4', 'shape': (2, 3, 4), }", data)) == Reason::BAD_TENSOR_FILE);
  CHECK(reason(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3, 4), }", data)) ==
        Reason::BAD_TENSOR_FILE);
  CHECK(reason(npy("[1, 2]", data)) == Reason::BAD_TENSOR_FILE);
  CHECK(reason(npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data)) ==
        Reason::UNSUPPORTED_DTYPE);
  CHECK(reason("\x93NUMPY\x07\x00\x10\x00" + Bytes(64, ' ')) == Reason::BAD_TENSOR_FILE);  // version 7
  CHECK(reason("garbage!garbage!") == Reason::BAD_TENSOR_FILE);
  CHECK(reason("abc") == Reason::TRUNCATED);
  // A big-endian array lists, but reading it as floats is refused.
  put(p, npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3, 4), }", data));
  TensorFile f(p);
  std::vector<float> out(24);
  CHECK(reason_of([&] { f.read_f32(0, 0, 24, out.data()); }) == Reason::UNSUPPORTED_DTYPE);
}

TEST_CASE("import: safetensors F32/BF16 with metadata, hostile offsets", "[import]") {
  test::TempDir dir;
  const auto v = iota(6);
  Bytes bf;
  for (float x : v) bf += le_bytes(f32_to_bf16(x), 2);
  const std::string p = dir.file("t.safetensors");
  put(p, safetensors(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
                     R"("b":{"dtype":"BF16","shape":[6],"data_offsets":[24,36]}})",
                     floats(v) + bf));
  TensorFile f(p);
  REQUIRE(f.tensors().size() == 2);
  std::vector<float> out(6);
  f.read_f32(f.find("b"), 0, 6, out.data());
  CHECK(out == v);
  f.read_f32(f.find("a"), 0, 6, out.data());
  CHECK(out == v);
  auto reason = [&](const std::string& header, const Bytes& data) {
    put(p, safetensors(header, data));
    return reason_of([&] { TensorFile t(p); });
  };
  const Bytes d = floats(v);
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,48]}})", d) == Reason::TRUNCATED);
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,24]}})", d) == Reason::BAD_LAYOUT);
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],)"
               R"("data_offsets":[4,12]}})",
               d) == Reason::BAD_LAYOUT);  // overlap
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d) == Reason::BAD_LAYOUT);
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d) == Reason::BAD_TENSOR_FILE);
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[2]}})", d) == Reason::BAD_TENSOR_FILE);
  CHECK(reason(R"({"a":)" + std::string(5000, '[') + "}", d) == Reason::BAD_TENSOR_FILE);  // deep nesting
  CHECK(reason(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", d) == Reason::BAD_TENSOR_FILE);
  put(p, le_bytes(1ull << 40, 8) + "{" + Bytes(20, ' '));  // claims a 1 TiB header
  CHECK(reason_of([&] { TensorFile t(p); }) == Reason::BAD_TENSOR_FILE);
  put(p, le_bytes(1000, 8) + "{" + Bytes(20, ' '));  // header longer than the file
  CHECK(reason_of([&] { TensorFile t(p); }) == Reason::TRUNCATED);
}

TEST_CASE("import: npz stored and deflated members, hostile zips", "[import]") {
  test::TempDir dir;
  const auto v = iota(24);
  const Bytes member = npy(kDict24, floats(v));
  for (int variant = 0; variant < 4; ++variant) {
    const bool deflated = variant & 1, zip64 = variant & 2;
    const std::string p = dir.file("z" + std::to_string(variant) + ".npz");
    put(p, zip_one("keys.npy", member, deflated, zip64));
    TensorFile f(p);
    REQUIRE(f.find("keys") == 0);
    std::vector<float> out(24);
    f.read_f32(0, 12, 12, out.data());  // forward, then backward (the inflater restarts)
    f.read_f32(0, 0, 12, out.data());
    f.read_f32(0, 12, 12, out.data() + 12);
    CHECK(out == v);
  }
  const std::string p = dir.file("bad.npz");
  auto reason = [&](const Bytes& b, bool read) {
    put(p, b);
    return reason_of([&] {
      TensorFile f(p);
      std::vector<float> out(24);
      if (read) f.read_f32(0, 0, 24, out.data());
    });
  };
  Bytes z = zip_one("keys.npy", member, true);
  CHECK(reason(z.substr(0, z.size() - 30), false) == Reason::TRUNCATED);  // end record cut
  Bytes flipped = z;
  flipped[140] = static_cast<char>(flipped[140] ^ 0x55);  // inside the deflated data
  const Reason r = reason(flipped, true);
  CHECK((r == Reason::BAD_TENSOR_FILE || r == Reason::TRUNCATED));
  Bytes lie = zip_one("keys.npy", member, false);
  const size_t cd = lie.rfind(Bytes("\x50\x4b\x01\x02", 4));
  lie.replace(cd + 20, 8, le_bytes(1u << 30, 4) + le_bytes(1u << 30, 4));  // sizes past the file
  CHECK(reason(lie, false) == Reason::TRUNCATED);
  Bytes bomb = zip_one("keys.npy", member, true);
  const size_t cd2 = bomb.rfind(Bytes("\x50\x4b\x01\x02", 4));
  bomb.replace(cd2 + 24, 4, le_bytes(0xfffffff0u, 4));  // 4 GiB from a few hundred bytes
  CHECK(reason(bomb, false) == Reason::BAD_TENSOR_FILE);
}

TEST_CASE("import: read_npy_vector takes d or 1 x d floats only", "[import]") {
  test::TempDir dir;
  const auto v = iota(8);
  put(dir.file("a.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (8,), }", floats(v)));
  put(dir.file("b.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 8), }", floats(v)));
  put(dir.file("c.npy"), npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", floats(v)));
  put(dir.file("i.npy"), npy("{'descr': '<i4', 'fortran_order': False, 'shape': (8,), }", floats(v)));
  CHECK(read_npy_vector(dir.file("a.npy"), 8) == v);
  CHECK(read_npy_vector(dir.file("b.npy"), 8) == v);
  CHECK(reason_of([&] { read_npy_vector(dir.file("c.npy"), 8); }) == Reason::SHAPE_MISMATCH);
  CHECK(reason_of([&] { read_npy_vector(dir.file("a.npy"), 4); }) == Reason::SHAPE_MISMATCH);
  CHECK(reason_of([&] { read_npy_vector(dir.file("i.npy"), 8); }) == Reason::UNSUPPORTED_DTYPE);
}

TEST_CASE("import: T,L,H,d and 2,T,Hd layouts land in the right (layer, head, row)", "[import]") {
  test::TempDir dir;
  const int64_t L = 2, H = 3, T = 5, d = 4;
  // value(l, h, t, i, kv) is unique per element, so a permutation error cannot go unseen.
  auto value = [](int64_t l, int64_t h, int64_t t, int64_t i, int64_t kv) {
    return static_cast<float>(kv * 1000 + l * 100 + h * 20 + t * 4 + i) * 0.25f;
  };
  std::vector<float> tlhd, stacked0, stacked1;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < d; ++i) tlhd.push_back(value(l, h, t, i, 0));
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 2, 3, 4), }";
  put(dir.file("k.npy"), npy(dict, floats(tlhd)));
  put(dir.file("v.npy"), npy(dict, floats(tlhd)));
  SnapshotRequest o;
  o.inputs = {dir.file("k.npy"), dir.file("v.npy")};
  o.tensors.layout = "T,L,H,d";
  ImportOptions io;
  io.meta = json{{"model_artifact_sha256", std::string(64, 'a')}, {"rope_config", json::object()}};
  const ImportSummary s = import_snapshot(o, io, dir.file("a.h5"));
  CHECK(s.geo.layers == L);
  CHECK(s.geo.kv_heads == H);
  DumpReader r(dir.file("a.h5"));
  std::vector<float> rows(static_cast<size_t>(T * d));
  for (int64_t l = 0; l < L; ++l)
    for (int64_t h = 0; h < H; ++h) {
      r.read_k(l, h, 0, T, rows.data());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t i = 0; i < d; ++i) REQUIRE(rows[static_cast<size_t>(t * d + i)] == value(l, h, t, i, 0));
    }
  // Per-layer [2, T, H*d] files (vLLM's kv_cache): V is index 1 of the 2 axis.
  for (int64_t l = 0; l < L; ++l) {
    std::vector<float> kv;
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < d; ++i) kv.push_back(value(l, h, t, i, c));
    put(dir.file("layer" + std::to_string(l) + ".npy"),
        npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 12), }", floats(kv)));
  }
  SnapshotRequest v = o;
  v.inputs.clear();
  v.tensors.layout = "2,T,Hd";
  v.tensors.kv = dir.file("layer{layer}.npy");
  v.tensors.kv_heads = H;
  import_snapshot(v, io, dir.file("b.h5"));
  DumpReader rb(dir.file("b.h5"));
  CHECK(rb.info().geo.layers == L);
  rb.read_v(1, 2, 0, T, rows.data());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < d; ++i) REQUIRE(rows[static_cast<size_t>(t * d + i)] == value(1, 2, t, i, 1));
  v.tensors.kv_heads = 5;  // 12 is not 5 x d
  CHECK(reason_of([&] { import_snapshot(v, io, dir.file("c.h5")); }) == Reason::SHAPE_MISMATCH);
  v.tensors.kv_heads = H;
  v.tensors.layout = "2,T,X";
  CHECK(reason_of([&] { import_snapshot(v, io, dir.file("c.h5")); }) == Reason::USAGE);
}
