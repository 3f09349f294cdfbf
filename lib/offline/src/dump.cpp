#include "kvtool/dump.h"

#include <hdf5.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
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

void set_hdf5_error_stacks(bool print) {
  std::lock_guard<std::recursive_mutex> lock(h5_mutex());
  silence_h5();  // the one-time default first, so it cannot undo this later
  h5_error_stacks_wanted() = print;
  apply_h5_error_printing();
}

struct DumpReader::Impl {
  Hid file, k, v, q;
};

namespace {

// Bounds on how a dataset is stored (formats/kvdump-v1.md, "Storage and limits"): every size the
// reader uses comes from the file's real storage, so a small file cannot ask for much memory or time.
constexpr uint64_t kMaxChunksPerRead = 1024;       // chunks one slice read may touch ...
constexpr uint64_t kMinChunkBytes = 4096;          // ... unless each chunk is at least this large
constexpr uint64_t kMaxCompressionRatio = 256;     // logical bytes per stored byte of a filtered dataset
constexpr uint64_t kCompressionFloor = 64u << 20;  // below this many logical bytes any ratio is fine

uint64_t mul_checked(uint64_t a, uint64_t b, const std::string& name) {
  KVT_CHECK(b == 0 || a <= (uint64_t(1) << 62) / b, SHAPE_MISMATCH, name << " has an impossibly large shape");
  return a * b;
}

// Objects of a dump are links inside the file: an external link would make the reader open another
// file named by the dump.
void check_link(hid_t f, const char* name) {
  H5L_info_t li;
  KVT_CHECK(H5Lget_info(f, name, &li, H5P_DEFAULT) >= 0, NOT_A_DUMP, "cannot look up " << name);
  KVT_CHECK(li.type == H5L_TYPE_HARD || li.type == H5L_TYPE_SOFT, NOT_A_DUMP,
            name << " is an external link; a dump is one self-contained file");
}

// Chunked storage: every chunk written (unwritten chunks read as fill values, so a tiny file could
// claim any shape) and no slice read spread over a huge number of tiny chunks (HDF5 keeps a few KB of
// bookkeeping per chunk of a read).
void check_chunks(hid_t ds, hid_t dcpl, const std::string& name, const std::vector<hsize_t>& dims, size_t elem) {
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> c(static_cast<size_t>(rank));
  KVT_CHECK(H5Pget_chunk(dcpl, rank, c.data()) == rank, HDF5_ERROR, "cannot read the chunk shape of " << name);
  uint64_t all = 1, per_read = 1, chunk_bytes = elem;
  for (int a = 0; a < rank; ++a) {
    KVT_CHECK(c[a] > 0, SHAPE_MISMATCH, name << " has an empty chunk dimension");
    const uint64_t n = dims[a] / c[a] + (dims[a] % c[a] != 0);
    all = mul_checked(all, n, name);
    if (rank < 4 || a >= rank - 2) per_read = mul_checked(per_read, n, name);  // reads fix (layer, head)
    chunk_bytes = mul_checked(chunk_bytes, c[a], name);
  }
  KVT_CHECK(per_read <= kMaxChunksPerRead || chunk_bytes >= kMinChunkBytes, SHAPE_MISMATCH,
            name << " is split into chunks of " << chunk_bytes << " bytes, " << per_read
                 << " per (layer, head) slice; chunks under " << kMinChunkBytes << " bytes may number at most "
                 << kMaxChunksPerRead << " per slice");
  hsize_t written = 0;
  Hid space(H5Dget_space(ds), H5Sclose);
  KVT_CHECK(space.ok() && H5Dget_num_chunks(ds, space, &written) >= 0, HDF5_ERROR,
            "cannot count the chunks of " << name);
  KVT_CHECK(written == all, SHAPE_MISMATCH,
            name << " has only " << written << " of its " << all << " chunks written; its shape claims data the file "
                 << "does not hold");
}

// The dataset's shape is backed by real storage in this file before any size derived from it is used.
void check_storage(hid_t f, hid_t ds, const std::string& name, const std::vector<hsize_t>& dims) {
  Hid ft(H5Dget_type(ds), H5Tclose);
  // Before the storage properties: their fill value of a variable-length or reference type would
  // send libhdf5 into the file's global heap unchecked (h5_heap_check.h).
  const H5T_class_t cls = H5Tget_class(ft);
  KVT_CHECK(cls == H5T_INTEGER || cls == H5T_FLOAT, UNSUPPORTED_DTYPE,
            name << " holds neither integers nor floats (HDF5 class " << static_cast<int>(cls) << ")");
  const size_t elem = H5Tget_size(ft);
  KVT_CHECK(elem > 0 && elem <= 16, UNSUPPORTED_DTYPE, name << " has an element size of " << elem << " bytes");
  uint64_t bytes = elem;
  for (hsize_t d : dims) bytes = mul_checked(bytes, d, name);
  Hid dcpl(H5Dget_create_plist(ds), H5Pclose);
  KVT_CHECK(dcpl.ok(), HDF5_ERROR, "cannot read the storage properties of " << name);
  KVT_CHECK(H5Pget_external_count(dcpl) == 0, NOT_A_DUMP,
            name << " keeps its data in an external file; a dump is one self-contained file");
  const H5D_layout_t layout = H5Pget_layout(dcpl);
  KVT_CHECK(layout == H5D_CONTIGUOUS || layout == H5D_CHUNKED || layout == H5D_COMPACT, NOT_A_DUMP,
            name << " has a virtual or unknown storage layout; a dump is one self-contained file");
  if (bytes == 0) return;
  hsize_t file_size = 0;
  KVT_CHECK(H5Fget_filesize(f, &file_size) >= 0, HDF5_ERROR, "cannot read the file size");
  const uint64_t stored = H5Dget_storage_size(ds);
  KVT_CHECK(stored <= file_size, SHAPE_MISMATCH,
            name << " claims " << stored << " bytes of storage in a file of " << file_size << " bytes");
  const bool filtered = layout == H5D_CHUNKED && H5Pget_nfilters(dcpl) > 0;
  if (filtered)
    KVT_CHECK(bytes <= kCompressionFloor || bytes / kMaxCompressionRatio <= stored, SHAPE_MISMATCH,
              name << " claims " << bytes << " bytes compressed into " << stored << "; more than "
                   << kMaxCompressionRatio << ":1 is refused as a decompression bomb");
  else
    KVT_CHECK(stored >= bytes, SHAPE_MISMATCH,
              name << " has a shape of " << bytes << " bytes but the file stores only " << stored
                   << " bytes of it (unwritten or truncated data)");
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t off = H5Dget_offset(ds);
    KVT_CHECK(off != HADDR_UNDEF && off <= file_size && stored <= file_size - off, SHAPE_MISMATCH,
              name << " lies beyond the end of the file");
  }
  if (layout == H5D_CHUNKED) check_chunks(ds, dcpl, name, dims, elem);
}

Hid open_dataset(hid_t f, const char* name, std::vector<hsize_t>& dims) {
  check_link(f, name);
  Hid ds(H5Dopen2(f, name, H5P_DEFAULT), H5Dclose);
  KVT_CHECK(ds.ok(), NOT_A_DUMP, name << " is not a dataset");
  dims = dims_of(ds);
  check_storage(f, ds, name, dims);
  return ds;
}

std::vector<int64_t> read_int_dataset(hid_t f, const char* name) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  std::vector<hsize_t> d;
  Hid ds = open_dataset(f, name, d);
  Hid ft(H5Dget_type(ds), H5Tclose);
  KVT_CHECK(H5Tget_class(ft) == H5T_INTEGER, UNSUPPORTED_DTYPE, name << " must hold integers");
  KVT_CHECK(d.size() == 1, SHAPE_MISMATCH, name << " must be one-dimensional");
  KVT_CHECK(d[0] <= static_cast<hsize_t>(kMaxDumpTokens), SHAPE_MISMATCH, name << " is implausibly large");
  std::vector<int64_t> v(d[0]);
  if (!v.empty())
    KVT_CHECK(H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0, HDF5_ERROR,
              "cannot read " << name);
  return v;
}

// Length of a one-dimensional dataset, checked against its storage, without reading it.
int64_t int_dataset_length(hid_t f, const char* name) {
  std::vector<hsize_t> d;
  Hid ds = open_dataset(f, name, d);
  KVT_CHECK(d.size() == 1, SHAPE_MISMATCH, name << " must be one-dimensional");
  return d[0] <= static_cast<hsize_t>(kMaxDumpTokens) ? static_cast<int64_t>(d[0]) : -1;
}

void read_identity(hid_t f, DumpInfo& info) {
  int64_t version = read_int_scalar(f, "kvdump_version", true, 0);
  KVT_CHECK(version == 1, UNSUPPORTED_VERSION,
            "kvdump_version " << version << " is not supported (this kvtool reads version 1)");
  auto& id = info.id;
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
  auto map = read_int_attr(f, "q_to_kv_head", true, root);
  KVT_CHECK(!map.empty() && map.size() <= static_cast<size_t>(kMaxDumpHeads), BAD_HEAD_MAP,
            "q_to_kv_head has " << map.size() << " entries; expected 1 to " << kMaxDumpHeads);
  for (int64_t h : map) {
    KVT_CHECK(h >= 0 && h < kMaxDumpHeads, BAD_HEAD_MAP, "q_to_kv_head entry " << h << " is out of range");
    id.q_to_kv_head.push_back(static_cast<int32_t>(h));
  }
  info.committed_frontier = read_int_scalar(f, "committed_frontier", true, 0);
  info.generator = read_str_attr(f, "generator", false, root);
  info.synthetic = read_int_scalar(f, "synthetic", false, 0) != 0;
}

// /kv/q and /kv/q_positions: shape of the dump, and every query at a row in [0, T).
Hid open_queries(hid_t f, DumpInfo& info) {
  auto& g = info.geo;
  std::vector<hsize_t> qd;
  Hid q = open_dataset(f, "/kv/q", qd);
  KVT_CHECK(qd.size() == 4 && static_cast<int64_t>(qd[0]) == g.layers && static_cast<int64_t>(qd[1]) == g.q_heads &&
                static_cast<int64_t>(qd[3]) == g.head_dim && qd[2] <= static_cast<hsize_t>(kMaxDumpTokens),
            SHAPE_MISMATCH,
            "/kv/q must have shape [L=" << g.layers << ", H_q=" << g.q_heads << ", T_q, d=" << g.head_dim << "]");
  KVT_CHECK(classify(q, "/kv/q") == g.dtype, SHAPE_MISMATCH, "/kv/q has another dtype than /kv/k");
  g.q_tokens = static_cast<int64_t>(qd[2]);
  info.has_q = true;
  KVT_CHECK(H5Lexists(f, "/kv/q_positions", H5P_DEFAULT) > 0, SHAPE_MISMATCH,
            "/kv/q is present but /kv/q_positions is missing");
  KVT_CHECK(int_dataset_length(f, "/kv/q_positions") == g.q_tokens, SHAPE_MISMATCH,
            "/kv/q_positions must have T_q=" << g.q_tokens << " entries");
  auto qp = read_int_dataset(f, "/kv/q_positions");
  for (size_t i = 0; i < qp.size(); ++i)
    KVT_CHECK(qp[i] >= 0 && qp[i] < g.tokens, BAD_ATTRIBUTE,
              "/kv/q_positions[" << i << "] = " << qp[i] << " is not a row in [0, T=" << g.tokens << ")");
  return q;
}

// /kv/tokens and /kv/positions: length T; positions strictly increasing.
void check_row_datasets(hid_t f, DumpInfo& info) {
  const int64_t T = info.geo.tokens;
  info.has_tokens = H5Lexists(f, "/kv/tokens", H5P_DEFAULT) > 0;
  info.has_positions = H5Lexists(f, "/kv/positions", H5P_DEFAULT) > 0;
  if (info.has_tokens)
    KVT_CHECK(int_dataset_length(f, "/kv/tokens") == T, SHAPE_MISMATCH, "/kv/tokens must have T=" << T << " entries");
  if (info.has_positions) {
    KVT_CHECK(int_dataset_length(f, "/kv/positions") == T, SHAPE_MISMATCH,
              "/kv/positions must have T=" << T << " entries");
    auto p = read_int_dataset(f, "/kv/positions");
    for (size_t i = 1; i < p.size(); ++i)
      KVT_CHECK(p[i] > p[i - 1], BAD_ATTRIBUTE, "/kv/positions is not strictly increasing at row " << i);
  }
}

}  // namespace

// Every check formats/kvdump-v1.md makes on a dump's structure and attributes runs here, so that
// `verify`, builds, `inspect`, `query` and `eval` accept exactly the same dumps. Only the values
// (finite K/V below the frontier, finite queries) are checked as they are read.
DumpReader::DumpReader(const std::string& path) : impl_(std::make_unique<Impl>()), path_(path) {
  std::lock_guard<std::recursive_mutex> lk(h5_mutex());
  silence_h5();
  {
    std::ifstream probe(path, std::ios::binary);
    KVT_CHECK(probe.good(), IO_ERROR, "cannot open '" << path << "' for reading");
  }
  KVT_CHECK(looks_like_hdf5(path), NOT_A_DUMP, "'" << path << "' is not an HDF5 file");
  impl_->file = Hid(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  // The file is readable and starts like HDF5 (checked above): a failed open is damaged input, exit 1.
  KVT_CHECK(impl_->file.ok(), NOT_A_DUMP,
            "'" << path << "' starts like HDF5 but the HDF5 library cannot open it (damaged or truncated)");
  hid_t f = impl_->file;
  KVT_CHECK(H5Lexists(f, "/kv", H5P_DEFAULT) > 0 && H5Lexists(f, "/kv/k", H5P_DEFAULT) > 0 &&
                H5Lexists(f, "/kv/v", H5P_DEFAULT) > 0,
            NOT_A_DUMP, "'" << path << "' has no /kv/k and /kv/v datasets; it is not a kvdump file");
  check_link(f, "/kv");
  read_identity(f, info_);

  std::vector<hsize_t> kd, vd;
  impl_->k = open_dataset(f, "/kv/k", kd);
  impl_->v = open_dataset(f, "/kv/v", vd);
  KVT_CHECK(kd.size() == 4, SHAPE_MISMATCH, "/kv/k must have rank 4 [L, H_kv, T, d], has rank " << kd.size());
  KVT_CHECK(kd == vd, SHAPE_MISMATCH, "/kv/k and /kv/v have different shapes");
  DType kt = classify(impl_->k, "/kv/k"), vt = classify(impl_->v, "/kv/v");
  KVT_CHECK(kt == vt, SHAPE_MISMATCH, "/kv/k is " << dtype_name(kt) << " but /kv/v is " << dtype_name(vt));
  auto& g = info_.geo;
  // The storage check bounds each dimension's product; the identity check bounds each dimension.
  g.layers = static_cast<int64_t>(kd[0]);
  g.kv_heads = static_cast<int64_t>(kd[1]);
  g.tokens = static_cast<int64_t>(kd[2]);
  g.head_dim = static_cast<int64_t>(kd[3]);
  g.dtype = kt;
  g.q_heads = static_cast<int64_t>(info_.id.q_to_kv_head.size());
  check_dump_identity(info_.id, g, info_.committed_frontier);

  if (H5Lexists(f, "/kv/q", H5P_DEFAULT) > 0) impl_->q = open_queries(f, info_);
  check_row_datasets(f, info_);
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

namespace {
// 16-bit rows are read and converted to f32 a block of at most this many elements at a time,
// through one buffer per thread: a fresh buffer of a whole part's K (megabytes) per read was
// faulted in page by page every time (eval reads a part's K and V, a builder its K), and the
// thread holds 256 KiB between reads, not a part's worth.
constexpr int64_t kConvertElements = int64_t{1} << 17;

template <typename ReadRaw>
void read_converted(const DumpInfo& info, int64_t r0, int64_t r1, float* out, ReadRaw&& read_raw) {
  const int64_t d = info.geo.head_dim, rows = std::max<int64_t>(1, kConvertElements / std::max<int64_t>(d, 1));
  thread_local std::vector<uint16_t> buf;
  buf.resize(static_cast<size_t>(std::min(r1 - r0, rows) * d));
  for (int64_t a = r0; a < r1; a += rows) {
    const int64_t b = std::min(r1, a + rows);
    read_raw(a, b, buf.data());
    convert_to_f32(info.geo.dtype, buf.data(), out + (a - r0) * d, static_cast<size_t>((b - a) * d));
  }
}
}  // namespace

void DumpReader::read_k(int64_t l, int64_t h, int64_t r0, int64_t r1, float* out) const {
  if (info_.geo.dtype == DType::f32) return read_k_raw(l, h, r0, r1, out);
  read_converted(info_, r0, r1, out, [&](int64_t a, int64_t b, void* dst) { read_k_raw(l, h, a, b, dst); });
}
void DumpReader::read_v(int64_t l, int64_t h, int64_t r0, int64_t r1, float* out) const {
  if (info_.geo.dtype == DType::f32) return read_v_raw(l, h, r0, r1, out);
  read_converted(info_, r0, r1, out, [&](int64_t a, int64_t b, void* dst) { read_v_raw(l, h, a, b, dst); });
}

void DumpReader::read_q(int64_t l, int64_t qh, float* out) const {
  KVT_CHECK(info_.has_q, INTERNAL, "dump has no /kv/q");
  KVT_CHECK(l >= 0 && l < info_.geo.layers && qh >= 0 && qh < info_.geo.q_heads, INTERNAL, "q slice out of range");
  size_t n = static_cast<size_t>(info_.geo.q_tokens * info_.geo.head_dim);
  if (info_.geo.dtype == DType::f32) {
    read_rows(impl_->q, DType::f32, info_.geo, l, qh, 0, info_.geo.q_tokens, info_.geo.q_tokens, out, "/kv/q");
  } else {
    std::vector<uint16_t> tmp(n);
    read_rows(impl_->q, info_.geo.dtype, info_.geo, l, qh, 0, info_.geo.q_tokens, info_.geo.q_tokens, tmp.data(),
              "/kv/q");
    convert_to_f32(info_.geo.dtype, tmp.data(), out, n);
  }
  // Queries feed calibration and scoring directly: a NaN or Inf would poison every result it touches.
  for (size_t i = 0; i < n; ++i)
    KVT_CHECK(std::isfinite(out[i]), NON_FINITE,
              "/kv/q of layer " << l << ", query head " << qh << " has a non-finite value at query "
                                << static_cast<int64_t>(i) / info_.geo.head_dim);
}

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
