// fuzz_dump_struct: structure-aware dumps. A valid kvdump v1 file (formats/kvdump-v1.md) of a
// fuzz-chosen small geometry, dtype and values (any float bits: NaN, Inf, huge) is written with
// kvtool's DumpWriter, then fuzz-chosen edits through libhdf5 itself — root attributes deleted or
// rewritten as another type, length or value, datasets replaced by ones of another rank, shape or
// type — so that libhdf5 always parses a well-formed container and the mutations reach kvtool's own
// dump checks (DumpReader), which the raw-bytes fuzz_dump cannot reach in CI (fuzz/README.md).
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/dump.h"

namespace {

// Reads the fuzz input front to back; zeros once it runs out.
struct Bytes {
  const uint8_t* p;
  size_t n, at = 0;
  uint8_t u8() { return at < n ? p[at++] : 0; }
  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | u8();
    return v;
  }
  float f32() {
    uint32_t b = 0;
    for (int i = 0; i < 4; ++i) b = b | static_cast<uint32_t>(u8()) << (8 * i);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
};

struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

// The valid dump the edits start from.
void write_valid(const std::string& path, Bytes& in) {
  kvtool::DumpSpec s;
  s.geo.layers = 1 + in.u8() % 3;
  s.geo.kv_heads = 1 + in.u8() % 3;
  s.geo.q_heads = s.geo.kv_heads * (1 + in.u8() % 2);
  s.geo.tokens = 1 + in.u8() % 12;
  s.geo.head_dim = 1 + in.u8() % 8;
  s.geo.q_tokens = in.u8() % 2 ? std::min<int64_t>(s.geo.tokens, 3) : 0;
  static const kvtool::DType dtypes[] = {kvtool::DType::f32, kvtool::DType::f16, kvtool::DType::bf16};
  s.geo.dtype = dtypes[in.u8() % 3];
  s.id.model_artifact_sha256 = std::string(64, 'a');
  s.id.adapter_set_sha256 = kvtool::empty_adapter_set_digest();
  s.id.representation = "full-kv-post-rope-v1";
  s.id.rope_config =
      R"({"theta":10000.0,"scaling":"none","pairing":"interleaved","head_dim":)" + std::to_string(s.geo.head_dim) + "}";
  for (int64_t h = 0; h < s.geo.q_heads; ++h) s.id.q_to_kv_head.push_back(h % s.geo.kv_heads);
  kvtool::DumpWriter w(path, s, true);
  std::vector<float> k(static_cast<size_t>(s.geo.tokens * s.geo.head_dim)), v(k.size());
  for (int64_t l = 0; l < s.geo.layers; ++l)
    for (int64_t h = 0; h < s.geo.kv_heads; ++h) {
      for (size_t i = 0; i < k.size(); ++i) k[i] = in.f32(), v[i] = in.f32();
      w.write_kv(l, h, k.data(), v.data());
    }
  if (s.geo.q_tokens > 0) {
    std::vector<float> q(static_cast<size_t>(s.geo.q_tokens * s.geo.head_dim), 0.5f);
    for (int64_t l = 0; l < s.geo.layers; ++l)
      for (int64_t h = 0; h < s.geo.q_heads; ++h) w.write_q(l, h, q.data());
    std::vector<int64_t> qp;
    for (int64_t i = 0; i < s.geo.q_tokens; ++i) qp.push_back(s.geo.tokens - s.geo.q_tokens + i);
    w.write_q_positions(qp);
  }
  std::vector<int64_t> t, p;
  for (int64_t i = 0; i < s.geo.tokens; ++i) t.push_back(i), p.push_back(i);
  w.write_tokens(t);
  w.write_positions(p);
  w.commit();
}

const char* const kDatasets[] = {"/kv/k", "/kv/v", "/kv/q", "/kv/q_positions", "/kv/tokens", "/kv/positions"};

// Rewrites root attribute `name` as a scalar integer, a string, an integer array or a float.
void rewrite_attribute(hid_t file, const std::string& name, Bytes& in) {
  if (H5Aexists(file, name.c_str()) > 0) H5Adelete(file, name.c_str());
  const uint8_t how = in.u8() % 5;
  if (how == 0) return;  // deleted
  hid_t space = -1, type = -1;
  std::vector<int64_t> ints;
  std::string text;
  if (how == 1 || how == 4) {
    space = H5Screate(H5S_SCALAR);
    ints.push_back(static_cast<int64_t>(in.u64()));
    type = how == 1 ? H5Tcopy(H5T_NATIVE_INT64) : H5Tcopy(H5T_NATIVE_DOUBLE);
  } else if (how == 2) {
    space = H5Screate(H5S_SCALAR);
    const size_t len = in.u8() % 80;
    for (size_t i = 0; i < len; ++i) text.push_back(static_cast<char>(in.u8()));
    type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, std::max<size_t>(text.size(), 1));
    text.resize(std::max<size_t>(text.size(), 1));
  } else {
    const hsize_t n = in.u8() % 9;
    space = H5Screate_simple(1, &n, nullptr);
    for (hsize_t i = 0; i < n; ++i) ints.push_back(static_cast<int8_t>(in.u8()));
    type = H5Tcopy(H5T_NATIVE_INT64);
  }
  const hid_t a = H5Acreate2(file, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  if (a >= 0) {
    const void* buf = how == 2 ? static_cast<const void*>(text.data()) : static_cast<const void*>(ints.data());
    if (!ints.empty() || how == 2) H5Awrite(a, type, buf);
    H5Aclose(a);
  }
  H5Tclose(type);
  H5Sclose(space);
}

// Replaces a dataset by one of a fuzz-chosen rank, shape (a few elements) and type.
void replace_dataset(hid_t file, const char* name, Bytes& in) {
  if (H5Lexists(file, name, H5P_DEFAULT) > 0) H5Ldelete(file, name, H5P_DEFAULT);
  if (in.u8() % 4 == 0) return;  // left out
  const int rank = 1 + in.u8() % 4;
  hsize_t dims[4];
  hsize_t total = 1;
  for (int i = 0; i < rank; ++i) dims[i] = in.u8() % 5, total *= dims[i];
  static const hid_t* types[] = {&H5T_NATIVE_FLOAT, &H5T_NATIVE_DOUBLE, &H5T_NATIVE_INT64,
                                 &H5T_NATIVE_INT32, &H5T_NATIVE_UINT8,  &H5T_NATIVE_INT8};
  const hid_t type = *types[in.u8() % 6];
  const hid_t space = H5Screate_simple(rank, dims, nullptr);
  const hid_t d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d >= 0) {
    std::vector<uint8_t> buf(static_cast<size_t>(total * H5Tget_size(type)));
    for (auto& b : buf) b = in.u8();
    if (!buf.empty()) H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(d);
  }
  H5Sclose(space);
}

void mutate(const std::string& path, Bytes& in) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return;
  const int edits = in.u8() % 4;
  for (int e = 0; e < edits; ++e) {
    if (in.u8() % 2) {
      H5O_info_t info;
      if (H5Oget_info(file, &info) < 0 || info.num_attrs == 0) continue;
      char name[256] = {0};
      const hsize_t idx = in.u8() % info.num_attrs;
      if (H5Aget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, idx, name, sizeof name, H5P_DEFAULT) < 0) continue;
      rewrite_attribute(file, name, in);
    } else {
      replace_dataset(file, kDatasets[in.u8() % 6], in);
    }
  }
  H5Fclose(file);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // libhdf5's error stacks are expected here
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempPath tmp("/dev/shm/kvtool-fuzz-dump-struct-" + std::to_string(getpid()) + ".h5");
  Bytes in{data, size};
  try {
    write_valid(tmp.path, in);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());  // a valid dump must be writable
    return 0;
  }
  mutate(tmp.path, in);
  try {
    kvtool::DumpReader d(tmp.path);
    kvtool::fuzz::read_dump_rows(d);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
