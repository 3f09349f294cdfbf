#include "kvtool/dump.h"

#include <hdf5.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>

#include "kvtool/atomic_file.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/sha256.h"
#include "impl/h5util.h"

namespace kvtool {

using namespace h5;

namespace {

// Classifies a K/V/Q dataset's stored type.
DType classify(hid_t ds, const char* name) {
  Hid ft(H5Dget_type(ds), H5Tclose);
  H5T_class_t c = H5Tget_class(ft);
  size_t sz = H5Tget_size(ft);
  KVT_CHECK(H5Tget_order(ft) == H5T_ORDER_LE, UNSUPPORTED_DTYPE, name << " is not little-endian");
  if (c == H5T_FLOAT && sz == 4) return DType::f32;
  if (c == H5T_FLOAT && sz == 2) {
    size_t spos, epos, esize, mpos, msize;
    H5Tget_fields(ft, &spos, &epos, &esize, &mpos, &msize);
    KVT_CHECK(esize == 5 && msize == 10, UNSUPPORTED_DTYPE, name << " is a 16-bit float that is not IEEE half");
    return DType::f16;
  }
  if (c == H5T_INTEGER && sz == 2) {
    std::string tag = read_str_attr(ds, "dtype", false, name);
    KVT_CHECK(tag == "bfloat16", UNSUPPORTED_DTYPE,
              name << " is a 16-bit integer dataset without attribute dtype=bfloat16");
    return DType::bf16;
  }
  KVT_THROW(UNSUPPORTED_DTYPE, name << " has an unsupported dtype (class " << static_cast<int>(c) << ", " << sz
                                    << " bytes); expected float16, float32 or bfloat16");
}

hid_t mem_type(DType t) {
  switch (t) {
    case DType::f32:
      return H5T_IEEE_F32LE;
    case DType::f16:
      return f16_type();
    case DType::bf16:
      return H5T_STD_U16LE;
  }
  return H5T_IEEE_F32LE;
}

void convert_to_f32(DType t, const void* src, float* dst, size_t n) {
  if (t == DType::f32) {
    std::memcpy(dst, src, n * 4);
  } else {
    const uint16_t* s = static_cast<const uint16_t*>(src);
    if (t == DType::f16)
      f16_to_f32_array(s, dst, n);
    else
      for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
  }
}

void convert_from_f32(DType t, const float* src, void* dst, size_t n) {
  if (t == DType::f32) {
    std::memcpy(dst, src, n * 4);
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    if (t == DType::f16)
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
    else
      for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
  }
}

}  // namespace

bool looks_like_hdf5(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char sig[8] = {};
  f.read(sig, 8);
  return f.gcount() == 8 && std::memcmp(sig, "\x89HDF\r\n\x1a\n", 8) == 0;
}

struct DumpReader::Impl {
  Hid file, k, v, q;
};

DumpReader::DumpReader(const std::string& path) : impl_(std::make_unique<Impl>()), path_(path) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  silence_h5();
  {
    std::ifstream probe(path, std::ios::binary);
    KVT_CHECK(probe.good(), IO_ERROR, "cannot open '" << path << "' for reading");
  }
  KVT_CHECK(looks_like_hdf5(path), NOT_A_DUMP, "'" << path << "' is not an HDF5 file");
  impl_->file = Hid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  KVT_CHECK(impl_->file.ok(), HDF5_ERROR, "the HDF5 library cannot open '" << path << "' (damaged or truncated?)");
  hid_t f = impl_->file;
  KVT_CHECK(H5Lexists(f, "/kv", H5P_DEFAULT) > 0 && H5Lexists(f, "/kv/k", H5P_DEFAULT) > 0 &&
                H5Lexists(f, "/kv/v", H5P_DEFAULT) > 0,
            NOT_A_DUMP, "'" << path << "' has no /kv/k and /kv/v datasets; it is not a kvdump file");

  int64_t version = read_int_scalar(f, "kvdump_version", true, 0);
  KVT_CHECK(version == 1, UNSUPPORTED_VERSION,
            "kvdump_version " << version << " is not supported (this kvtool reads version 1)");
  auto& id = info_.id;
  const std::string root = "the dump root";
  id.model_artifact_sha256 = read_str_attr(f, "model_artifact_sha256", true, root);
  id.checkpoint_generation = read_int_scalar(f, "checkpoint_generation", true, 0);
  id.adapter_set_sha256 = read_str_attr(f, "adapter_set_sha256", true, root);
  id.position_contract = read_str_attr(f, "position_contract", true, root);
  id.rope_config = read_str_attr(f, "rope_config", true, root);
  id.tenant_namespace = read_str_attr(f, "tenant_namespace", true, root);
  id.namespace_generation = read_int_scalar(f, "namespace_generation", true, 0);
  id.request_generation = read_int_scalar(f, "request_generation", true, 0);
  id.cache_generation = read_int_scalar(f, "cache_generation", true, 0);
  id.publication_generation = read_int_scalar(f, "publication_generation", true, 0);
  id.representation = read_str_attr(f, "representation", true, root);
  for (int64_t h : read_int_attr(f, "q_to_kv_head", true, root)) {
    KVT_CHECK(h >= INT32_MIN && h <= INT32_MAX, BAD_HEAD_MAP, "q_to_kv_head entry " << h << " is out of range");
    id.q_to_kv_head.push_back(static_cast<int32_t>(h));
  }
  info_.committed_frontier = read_int_scalar(f, "committed_frontier", true, 0);
  info_.generator = read_str_attr(f, "generator", false, root);
  info_.synthetic = read_int_scalar(f, "synthetic", false, 0) != 0;

  impl_->k = Hid(H5Dopen2(f, "/kv/k", H5P_DEFAULT), H5Dclose);
  impl_->v = Hid(H5Dopen2(f, "/kv/v", H5P_DEFAULT), H5Dclose);
  KVT_CHECK(impl_->k.ok() && impl_->v.ok(), NOT_A_DUMP, "/kv/k or /kv/v is not a dataset");
  auto kd = dims_of(impl_->k), vd = dims_of(impl_->v);
  KVT_CHECK(kd.size() == 4, SHAPE_MISMATCH, "/kv/k must have rank 4 [L, H_kv, T, d], has rank " << kd.size());
  KVT_CHECK(kd == vd, SHAPE_MISMATCH, "/kv/k and /kv/v have different shapes");
  DType kt = classify(impl_->k, "/kv/k"), vt = classify(impl_->v, "/kv/v");
  KVT_CHECK(kt == vt, SHAPE_MISMATCH, "/kv/k is " << dtype_name(kt) << " but /kv/v is " << dtype_name(vt));
  auto& g = info_.geo;
  g.layers = kd[0];
  g.kv_heads = kd[1];
  g.tokens = kd[2];
  g.head_dim = kd[3];
  g.dtype = kt;
  g.q_heads = static_cast<int64_t>(id.q_to_kv_head.size());
  KVT_CHECK(g.layers > 0 && g.kv_heads > 0 && g.head_dim > 0, SHAPE_MISMATCH,
            "/kv/k has an empty dimension [" << g.layers << ", " << g.kv_heads << ", " << g.tokens << ", " << g.head_dim
                                             << "]");
  KVT_CHECK(g.q_heads > 0, BAD_HEAD_MAP, "q_to_kv_head is empty");
  KVT_CHECK(g.q_heads % g.kv_heads == 0, BAD_HEAD_MAP,
            "q_to_kv_head has " << g.q_heads << " query heads, not a multiple of " << g.kv_heads << " kv heads");
  for (size_t i = 0; i < id.q_to_kv_head.size(); ++i)
    KVT_CHECK(id.q_to_kv_head[i] >= 0 && id.q_to_kv_head[i] < g.kv_heads, BAD_HEAD_MAP,
              "q_to_kv_head[" << i << "] = " << id.q_to_kv_head[i] << " is not a kv head in [0, " << g.kv_heads << ")");
  KVT_CHECK(info_.committed_frontier >= 0 && info_.committed_frontier <= g.tokens, FRONTIER_BEYOND_T,
            "committed_frontier " << info_.committed_frontier << " is outside [0, T=" << g.tokens << "]");

  if (H5Lexists(f, "/kv/q", H5P_DEFAULT) > 0) {
    impl_->q = Hid(H5Dopen2(f, "/kv/q", H5P_DEFAULT), H5Dclose);
    KVT_CHECK(impl_->q.ok(), NOT_A_DUMP, "/kv/q is not a dataset");
    auto qd = dims_of(impl_->q);
    KVT_CHECK(qd.size() == 4 && static_cast<int64_t>(qd[0]) == g.layers && static_cast<int64_t>(qd[1]) == g.q_heads &&
                  static_cast<int64_t>(qd[3]) == g.head_dim,
              SHAPE_MISMATCH,
              "/kv/q must have shape [L=" << g.layers << ", H_q=" << g.q_heads << ", T_q, d=" << g.head_dim << "]");
    KVT_CHECK(classify(impl_->q, "/kv/q") == g.dtype, SHAPE_MISMATCH, "/kv/q has another dtype than /kv/k");
    g.q_tokens = qd[2];
    info_.has_q = true;
    KVT_CHECK(H5Lexists(f, "/kv/q_positions", H5P_DEFAULT) > 0, SHAPE_MISMATCH,
              "/kv/q is present but /kv/q_positions is missing");
    KVT_CHECK(static_cast<int64_t>(q_positions().size()) == g.q_tokens, SHAPE_MISMATCH,
              "/kv/q_positions must have T_q=" << g.q_tokens << " entries");
  }
  info_.has_tokens = H5Lexists(f, "/kv/tokens", H5P_DEFAULT) > 0;
  info_.has_positions = H5Lexists(f, "/kv/positions", H5P_DEFAULT) > 0;
  if (info_.has_tokens)
    KVT_CHECK(static_cast<int64_t>(tokens().size()) == g.tokens, SHAPE_MISMATCH,
              "/kv/tokens must have T=" << g.tokens << " entries");
  if (info_.has_positions)
    KVT_CHECK(static_cast<int64_t>(positions().size()) == g.tokens, SHAPE_MISMATCH,
              "/kv/positions must have T=" << g.tokens << " entries");
}

DumpReader::~DumpReader() {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  impl_.reset();
}

namespace {
void read_rows(hid_t ds, DType t, const DumpGeometry& g, int64_t a, int64_t b, int64_t r0, int64_t r1,
               int64_t rows_total, void* out, const char* what) {
  KVT_CHECK(a >= 0 && b >= 0 && r0 >= 0 && r0 <= r1 && r1 <= rows_total, INTERNAL,
            "read of " << what << " rows [" << r0 << ", " << r1 << ") out of range");
  if (r1 == r0) return;
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  Hid fs(H5Dget_space(ds), H5Sclose);
  hsize_t start[4] = {static_cast<hsize_t>(a), static_cast<hsize_t>(b), static_cast<hsize_t>(r0), 0};
  hsize_t count[4] = {1, 1, static_cast<hsize_t>(r1 - r0), static_cast<hsize_t>(g.head_dim)};
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
  // Same-shape memory space: HDF5 then copies whole rows instead of iterating element by element.
  Hid ms(H5Screate_simple(4, count, nullptr), H5Sclose);
  // Read in the dataset's own type: no HDF5 conversion path (its soft float conversions are slow);
  // the class, size and byte order were checked when the dump was opened.
  (void)t;
  Hid ft(H5Dget_type(ds), H5Tclose);
  KVT_CHECK(H5Dread(ds, ft, ms, fs, H5P_DEFAULT, out) >= 0, HDF5_ERROR,
            "cannot read " << what << " (file damaged or truncated?)");
}
}  // namespace

void DumpReader::read_k_raw(int64_t l, int64_t h, int64_t r0, int64_t r1, void* out) const {
  KVT_CHECK(l < info_.geo.layers && h < info_.geo.kv_heads, INTERNAL, "slice out of range");
  read_rows(impl_->k, info_.geo.dtype, info_.geo, l, h, r0, r1, info_.geo.tokens, out, "/kv/k");
}
void DumpReader::read_v_raw(int64_t l, int64_t h, int64_t r0, int64_t r1, void* out) const {
  KVT_CHECK(l < info_.geo.layers && h < info_.geo.kv_heads, INTERNAL, "slice out of range");
  read_rows(impl_->v, info_.geo.dtype, info_.geo, l, h, r0, r1, info_.geo.tokens, out, "/kv/v");
}

void DumpReader::read_k(int64_t l, int64_t h, int64_t r0, int64_t r1, float* out) const {
  size_t n = static_cast<size_t>((r1 - r0) * info_.geo.head_dim);
  if (info_.geo.dtype == DType::f32) return read_k_raw(l, h, r0, r1, out);
  std::vector<uint16_t> tmp(n);
  read_k_raw(l, h, r0, r1, tmp.data());
  convert_to_f32(info_.geo.dtype, tmp.data(), out, n);
}
void DumpReader::read_v(int64_t l, int64_t h, int64_t r0, int64_t r1, float* out) const {
  size_t n = static_cast<size_t>((r1 - r0) * info_.geo.head_dim);
  if (info_.geo.dtype == DType::f32) return read_v_raw(l, h, r0, r1, out);
  std::vector<uint16_t> tmp(n);
  read_v_raw(l, h, r0, r1, tmp.data());
  convert_to_f32(info_.geo.dtype, tmp.data(), out, n);
}

void DumpReader::read_q(int64_t l, int64_t qh, float* out) const {
  KVT_CHECK(info_.has_q, INTERNAL, "dump has no /kv/q");
  KVT_CHECK(l < info_.geo.layers && qh < info_.geo.q_heads, INTERNAL, "q slice out of range");
  size_t n = static_cast<size_t>(info_.geo.q_tokens * info_.geo.head_dim);
  if (info_.geo.dtype == DType::f32) {
    read_rows(impl_->q, DType::f32, info_.geo, l, qh, 0, info_.geo.q_tokens, info_.geo.q_tokens, out, "/kv/q");
    return;
  }
  std::vector<uint16_t> tmp(n);
  read_rows(impl_->q, info_.geo.dtype, info_.geo, l, qh, 0, info_.geo.q_tokens, info_.geo.q_tokens, tmp.data(),
            "/kv/q");
  convert_to_f32(info_.geo.dtype, tmp.data(), out, n);
}

namespace {
std::vector<int64_t> read_int_dataset(hid_t f, const char* name) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  Hid ds(H5Dopen2(f, name, H5P_DEFAULT), H5Dclose);
  KVT_CHECK(ds.ok(), NOT_A_DUMP, name << " is not a dataset");
  Hid ft(H5Dget_type(ds), H5Tclose);
  KVT_CHECK(H5Tget_class(ft) == H5T_INTEGER, UNSUPPORTED_DTYPE, name << " must hold integers");
  auto d = dims_of(ds);
  KVT_CHECK(d.size() == 1, SHAPE_MISMATCH, name << " must be one-dimensional");
  KVT_CHECK(d[0] < (1ull << 40), SHAPE_MISMATCH, name << " is implausibly large");
  std::vector<int64_t> v(d[0]);
  if (!v.empty())
    KVT_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0, HDF5_ERROR,
              "cannot read " << name);
  return v;
}
}  // namespace

std::vector<int64_t> DumpReader::q_positions() const { return read_int_dataset(impl_->file, "/kv/q_positions"); }
std::vector<int64_t> DumpReader::tokens() const {
  return info_.has_tokens || H5Lexists(impl_->file, "/kv/tokens", H5P_DEFAULT) > 0
             ? read_int_dataset(impl_->file, "/kv/tokens")
             : std::vector<int64_t>{};
}
std::vector<int64_t> DumpReader::positions() const {
  if (info_.has_positions || H5Lexists(impl_->file, "/kv/positions", H5P_DEFAULT) > 0)
    return read_int_dataset(impl_->file, "/kv/positions");
  std::vector<int64_t> p(static_cast<size_t>(info_.geo.tokens));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int64_t>(i);
  return p;
}

// ---------------------------------------------------------------------------------------------

struct DumpWriter::Impl {
  DumpSpec spec;
  std::unique_ptr<AtomicOutput> out;
  Hid file, group, k, v, q;
};

namespace {
Hid create_4d(hid_t group, const char* name, DType t, hsize_t a, hsize_t b, hsize_t rows, hsize_t d) {
  hsize_t dims[4] = {a, b, rows, d};
  Hid sp(H5Screate_simple(4, dims, nullptr), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  // One (layer, head) slice is one chunk (capped below HDF5's 4 GiB chunk limit).
  hsize_t max_rows = std::max<hsize_t>(1, (hsize_t(1) << 31) / (d * dtype_size(t)));
  hsize_t chunk[4] = {1, 1, std::max<hsize_t>(1, std::min(rows, max_rows)), d};
  H5Pset_chunk(dcpl, 4, chunk);
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_obj_track_times(dcpl, 0);  // no timestamps: same inputs give the same bytes
  hid_t ft = t == DType::f32 ? H5T_IEEE_F32LE : t == DType::f16 ? f16_type() : H5T_STD_U16LE;
  Hid ds(H5Dcreate2(group, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  KVT_CHECK(ds.ok(), IO_ERROR, "cannot create dataset " << name);
  if (t == DType::bf16) write_str_attr(ds, "dtype", "bfloat16");
  return ds;
}

void write_rows(hid_t ds, DType t, int64_t a, int64_t b, int64_t rows, int64_t d, const float* src) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  size_t n = static_cast<size_t>(rows * d);
  std::vector<uint8_t> buf(n * dtype_size(t));
  convert_from_f32(t, src, buf.data(), n);
  Hid fs(H5Dget_space(ds), H5Sclose);
  hsize_t start[4] = {static_cast<hsize_t>(a), static_cast<hsize_t>(b), 0, 0};
  hsize_t count[4] = {1, 1, static_cast<hsize_t>(rows), static_cast<hsize_t>(d)};
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, nullptr, count, nullptr);
  Hid ms(H5Screate_simple(4, count, nullptr), H5Sclose);
  KVT_CHECK(H5Dwrite(ds, mem_type(t), ms, fs, H5P_DEFAULT, buf.data()) >= 0, IO_ERROR,
            "cannot write dump slice (disk full?)");
}

void write_int_dataset(hid_t group, const char* name, const std::vector<int64_t>& v, hid_t ftype) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  hsize_t n = v.size();
  Hid sp(H5Screate_simple(1, &n, nullptr), H5Sclose);
  Hid dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_obj_track_times(dcpl, 0);
  Hid ds(H5Dcreate2(group, name, ftype, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  KVT_CHECK(ds.ok() && H5Dwrite(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0, IO_ERROR,
            "cannot write " << name);
}
}  // namespace

DumpWriter::DumpWriter(const std::string& path, const DumpSpec& spec, bool overwrite)
    : impl_(std::make_unique<Impl>()) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  silence_h5();
  auto& s = impl_->spec;
  s = spec;
  const auto& g = s.geo;
  KVT_CHECK(g.layers > 0 && g.kv_heads > 0 && g.tokens > 0 && g.head_dim > 0, USAGE, "dump geometry must be positive");
  KVT_CHECK(!s.id.q_to_kv_head.empty(), USAGE, "q_to_kv_head must not be empty");
  if (s.committed_frontier < 0) s.committed_frontier = g.tokens;
  impl_->out = std::make_unique<AtomicOutput>(path, overwrite);
  impl_->out->release_fd();
  impl_->file = Hid(H5Fcreate(impl_->out->temp_path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  KVT_CHECK(impl_->file.ok(), IO_ERROR, "cannot create HDF5 file for '" << path << "'");
  hid_t f = impl_->file;
  write_i64_attr(f, "kvdump_version", 1);
  write_str_attr(f, "model_artifact_sha256", s.id.model_artifact_sha256);
  write_i64_attr(f, "checkpoint_generation", s.id.checkpoint_generation);
  write_str_attr(f, "adapter_set_sha256", s.id.adapter_set_sha256);
  write_str_attr(f, "position_contract", s.id.position_contract);
  write_str_attr(f, "rope_config", s.id.rope_config);
  write_str_attr(f, "tenant_namespace", s.id.tenant_namespace);
  write_i64_attr(f, "namespace_generation", s.id.namespace_generation);
  write_i64_attr(f, "request_generation", s.id.request_generation);
  write_i64_attr(f, "cache_generation", s.id.cache_generation);
  write_i64_attr(f, "publication_generation", s.id.publication_generation);
  write_i64_attr(f, "committed_frontier", s.committed_frontier);
  write_i32_array_attr(f, "q_to_kv_head", s.id.q_to_kv_head);
  write_str_attr(f, "representation", s.id.representation);
  if (!s.generator.empty()) write_str_attr(f, "generator", s.generator);
  if (s.synthetic) write_i64_attr(f, "synthetic", 1);
  Hid gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_obj_track_times(gcpl, 0);
  impl_->group = Hid(H5Gcreate2(f, "/kv", H5P_DEFAULT, gcpl, H5P_DEFAULT), H5Gclose);
  impl_->k = create_4d(impl_->group, "k", g.dtype, g.layers, g.kv_heads, g.tokens, g.head_dim);
  impl_->v = create_4d(impl_->group, "v", g.dtype, g.layers, g.kv_heads, g.tokens, g.head_dim);
  if (g.q_tokens > 0)
    impl_->q = create_4d(impl_->group, "q", g.dtype, g.layers, s.id.q_to_kv_head.size(), g.q_tokens, g.head_dim);
}

DumpWriter::~DumpWriter() {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  impl_->q.reset();
  impl_->k.reset();
  impl_->v.reset();
  impl_->group.reset();
  impl_->file.reset();
  impl_->out.reset();  // removes the temporary unless committed
}

void DumpWriter::write_kv(int64_t l, int64_t h, const float* k, const float* v) {
  const auto& g = impl_->spec.geo;
  write_rows(impl_->k, g.dtype, l, h, g.tokens, g.head_dim, k);
  write_rows(impl_->v, g.dtype, l, h, g.tokens, g.head_dim, v);
}

void DumpWriter::write_q(int64_t l, int64_t qh, const float* q) {
  const auto& g = impl_->spec.geo;
  KVT_CHECK(impl_->q.ok(), INTERNAL, "dump was created without queries");
  write_rows(impl_->q, g.dtype, l, qh, g.q_tokens, g.head_dim, q);
}

void DumpWriter::write_q_positions(const std::vector<int64_t>& p) {
  KVT_CHECK(static_cast<int64_t>(p.size()) == impl_->spec.geo.q_tokens, INTERNAL, "q_positions length");
  write_int_dataset(impl_->group, "q_positions", p, H5T_STD_I64LE);
}
void DumpWriter::write_tokens(const std::vector<int64_t>& t) {
  KVT_CHECK(static_cast<int64_t>(t.size()) == impl_->spec.geo.tokens, INTERNAL, "tokens length");
  write_int_dataset(impl_->group, "tokens", t, H5T_STD_I32LE);
}
void DumpWriter::write_positions(const std::vector<int64_t>& p) {
  KVT_CHECK(static_cast<int64_t>(p.size()) == impl_->spec.geo.tokens, INTERNAL, "positions length");
  write_int_dataset(impl_->group, "positions", p, H5T_STD_I64LE);
}

void DumpWriter::commit() {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  impl_->q.reset();
  impl_->k.reset();
  impl_->v.reset();
  impl_->group.reset();
  KVT_CHECK(H5Fflush(impl_->file, H5F_SCOPE_GLOBAL) >= 0, IO_ERROR, "cannot flush the dump (disk full?)");
  impl_->file.reset();
  impl_->out->commit();
}

}  // namespace kvtool
