// fuzz_import_layout: structure-aware `kvtool import`. Control bytes choose a layout (axes of the
// K/V tensors, with or without a 2 axis, a merged Hd axis, L last), a container (.npz of stored
// .npy members, or safetensors), a dtype, whether queries and tokens come along, --kv-heads and
// --dtype; then one size per axis from a table that mixes small sizes with 0 and 2^31 / 2^40. The
// harness writes valid headers for those claims followed by the input's remaining bytes as payload
// (short or long), and runs import_snapshot as the command does, so that the geometry checks (claimed
// counts against the bytes present, also when another axis is 0) are what gets fuzzed rather than
// the header syntax fuzz_import covers.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/import.h"

using kvtool::fuzz::FuzzBytes;

namespace {

struct Layout {
  const char* axes;
  bool kv_in_one;  // a 2 axis: one "kv_cache" tensor
};
const Layout kLayouts[] = {{"L,H,T,d", false}, {"L,T,H,d", false},  {"T,H,d,L", false},  {"L,T,Hd", false},
                           {"L,2,T,Hd", true}, {"L,2,H,T,d", true}, {"2,L,T,H,d", true}, {"L,H,d,T", false}};

int64_t axis_size(uint8_t b) {
  static const int64_t table[] = {1, 2, 3, 4, 2, 3, 5, 8, 0, int64_t(1) << 31, int64_t(1) << 40, 1};
  return table[b % (sizeof table / sizeof table[0])];
}

struct Tensor {
  std::string name, dtype;  // dtype as numpy descr ("<f4") / safetensors ("F32")
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;
};

std::string npy_bytes(const Tensor& t) {
  std::string dict = "{'descr': '" + t.dtype + "', 'fortran_order': False, 'shape': (";
  for (int64_t s : t.shape) dict += std::to_string(s) + ", ";
  dict += "), }";
  const size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(dict.size() & 0xff);
  out += static_cast<char>(dict.size() >> 8);
  out += dict;
  out.append(t.data.begin(), t.data.end());
  return out;
}

void put16(std::string& s, uint32_t v) { s += static_cast<char>(v & 0xff), s += static_cast<char>(v >> 8 & 0xff); }
void put32(std::string& s, uint32_t v) { put16(s, v & 0xffff), put16(s, v >> 16); }

// A zip of stored members, as numpy.savez writes for small arrays.
std::string npz_bytes(const std::vector<Tensor>& ts) {
  std::string out, dir;
  uint32_t count = 0;
  for (const auto& t : ts) {
    const std::string name = t.name + ".npy", body = npy_bytes(t);
    const uint32_t crc =
        static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size())));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    for (std::string* h : {&out, &dir}) {
      put32(*h, h == &out ? 0x04034b50 : 0x02014b50);
      if (h == &dir) put16(*h, 20);
      for (uint32_t v : {20u, 0u, 0u, 0u, 0u}) put16(*h, v);  // version, flags, method, time, date
      put32(*h, crc);
      put32(*h, static_cast<uint32_t>(body.size()));
      put32(*h, static_cast<uint32_t>(body.size()));
      put16(*h, static_cast<uint32_t>(name.size()));
      put16(*h, 0);
      if (h == &dir) {
        for (uint32_t v : {0u, 0u, 0u}) put16(*h, v);  // comment, disk, internal attributes
        put32(*h, 0);
        put32(*h, offset);
      }
      *h += name;
    }
    out += body;
    ++count;
  }
  const uint32_t dir_at = static_cast<uint32_t>(out.size());
  out += dir;
  put32(out, 0x06054b50);
  for (uint32_t v : {0u, 0u, count, count}) put16(out, v);
  put32(out, static_cast<uint32_t>(dir.size()));
  put32(out, dir_at);
  put16(out, 0);
  return out;
}

std::string safetensors_bytes(const std::vector<Tensor>& ts) {
  std::string header = "{", data;
  for (const auto& t : ts) {
    // The declared extent follows the claimed shape; the bytes present may be fewer.
    uint64_t claimed = t.dtype == "F32" || t.dtype == "I32" ? 4 : t.dtype == "F64" || t.dtype == "I64" ? 8 : 2;
    for (int64_t s : t.shape) claimed *= static_cast<uint64_t>(s);
    header += (header.size() > 1 ? ",\"" : "\"") + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," + std::to_string(data.size() + claimed) + "]}";
    data.append(t.data.begin(), t.data.end());
  }
  header += "}";
  std::string out;
  put32(out, static_cast<uint32_t>(header.size()));
  put32(out, 0);
  return out + header + data;
}

struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

// The tensors the control bytes describe, each with a length byte (16-byte units) and its payload
// from the rest of the input.
std::vector<Tensor> tensors(FuzzBytes& in, const Layout& lay, bool safetensors, bool with_q, bool with_tokens) {
  static const char* npy_types[] = {"<f4", "<f2", "<f8", "<i8", ">f4"};
  static const char* st_types[] = {"F32", "F16", "BF16", "F64", "I64"};
  const uint8_t ty = in.u8() % 5;
  std::vector<int64_t> shape;
  std::string axes = lay.axes;
  int64_t tokens = 1;
  for (size_t i = 0; i < axes.size(); i += 2) {
    const char a = axes[i];
    shape.push_back(a == '2' ? 2 : axis_size(in.u8()));
    if (a == 'T') tokens = shape.back();
  }
  std::vector<std::string> names =
      lay.kv_in_one ? std::vector<std::string>{"kv_cache"} : std::vector<std::string>{"k", "v"};
  if (with_q) names.push_back("q");
  std::vector<Tensor> out;
  for (const auto& name : names) {
    Tensor t{name, safetensors ? st_types[ty] : npy_types[ty], shape, {}};
    if (name == "q") t.shape.erase(std::remove(t.shape.begin(), t.shape.end(), 2), t.shape.end());
    t.data = in.take(in.u8() * 16u);
    out.push_back(std::move(t));
  }
  if (with_tokens) {
    Tensor t{"tokens", safetensors ? "I64" : "<i8", {in.u8() % 2 ? tokens : axis_size(in.u8())}, {}};
    t.data = in.take(std::min<size_t>(in.u8() * 8u, 4096));
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempPath src("/dev/shm/kvtool-fuzz-layout-" + std::to_string(getpid()) + ".bin");
  static const TempPath out("/dev/shm/kvtool-fuzz-layout-" + std::to_string(getpid()) + ".h5");
  FuzzBytes in{data, size};
  const Layout& lay = kLayouts[in.u8() % (sizeof kLayouts / sizeof kLayouts[0])];
  const uint8_t flags = in.u8();
  const bool safetensors = flags & 1, with_q = flags & 2, with_tokens = flags & 4;
  kvtool::SnapshotRequest r;
  kvtool::ImportOptions o;
  r.format = "tensors";
  r.tensors.layout = lay.axes;
  o.overwrite = true;
  if (flags & 8) r.tensors.kv_heads = axis_size(in.u8());
  if (flags & 16) o.dtype = kvtool::DType::bf16;
  if (with_q) r.tensors.q = "q";
  if (with_tokens) r.tensors.tokens = "tokens";
  o.meta = {{"model_artifact_sha256", std::string(64, 'a')},
            {"rope_config", {{"theta", 10000.0}, {"scaling", "none"}, {"pairing", "half"}}}};
  const std::vector<Tensor> ts = tensors(in, lay, safetensors, with_q, with_tokens);
  const std::string bytes = safetensors ? safetensors_bytes(ts) : npz_bytes(ts);
  FILE* f = std::fopen(src.path.c_str(), "wb");
  if (!f) return 0;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  std::fclose(f);
  if (!ok) return 0;
  r.inputs = {src.path};
  try {
    kvtool::import_snapshot(r, o, out.path);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  unlink(out.path.c_str());
  return 0;
}
