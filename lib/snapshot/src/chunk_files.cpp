// The chunk-file readers of kvtool/snapshot.h (kvtool/chunk_files.h, impl/chunk_plan.h). The layouts and the header follow the
// stacks' own sources at the versions formats/lmcache.md and formats/sglang-hicache.md name. Sizes
// are products of small checked factors (checked_mul); a file's data must be exactly what its header
// or the options describe, so no read can leave it and nothing is allocated from a claimed size.
#include "impl/chunk_plan.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include "impl/readers.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/random_access_file.h"
#include "kvtool/tensor_file.h"

namespace kvtool::chunks {

namespace {

enum class Elem { f16, bf16, f32 };

int64_t elem_size(Elem e) { return e == Elem::f32 ? 4 : 2; }
const char* elem_name(Elem e) { return e == Elem::f16 ? "f16" : e == Elem::bf16 ? "bf16" : "f32"; }

// a * b, or SHAPE_MISMATCH when it leaves int64 (factors are non-negative).
int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  KVT_CHECK(a >= 0 && b >= 0 && (a == 0 || b <= std::numeric_limits<int64_t>::max() / a), SHAPE_MISMATCH,
            what << " is beyond any K/V cache (its size overflows 64 bits)");
  return a * b;
}

// Little-endian values of one type from `offset` on: the bytes LMCache's byte_array and SGLang's
// tofile() write (the host's order; every stack named in formats/ runs little-endian).
class RawSource : public Source {
 public:
  // A plan may hold thousands of chunk files (chunks x layers): each is open only while it is read.
  RawSource(const std::string& path, uint64_t offset, Elem e) : file_(path), offset_(offset), elem_(e) {
    file_.release();
  }

  uint64_t size() const { return file_.size(); }
  const RandomAccessFile& file() const { return file_; }
  const std::string& path() const { return file_.path(); }
  // What the data holds, once a header or the options have been checked against size().
  void set_elements(int64_t n) { elements_ = n; }
  void set_elem(Elem e) { elem_ = e; }
  void release() const override { file_.release(); }

  void read(int64_t first, int64_t count, float* out) const override {
    KVT_CHECK(
        first >= 0 && count >= 0 && first <= elements_ && count <= elements_ - first, INTERNAL,
        "read of elements [" << first << ", " << first + count << ") of '" << path() << "' beyond its " << elements_);
    const int64_t es = elem_size(elem_);
    constexpr int64_t kRun = 1 << 16;
    std::vector<uint8_t> buf(static_cast<size_t>(std::min(count, kRun) * es));
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min(kRun, count - done);
      file_.pread_exact(offset_ + static_cast<uint64_t>((first + done) * es), static_cast<size_t>(n * es), buf.data());
      const uint8_t* p = buf.data();
      float* o = out + done;
      if (elem_ == Elem::f32) {
        std::memcpy(o, p, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const auto h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
          o[i] = elem_ == Elem::f16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
      }
      done += n;
    }
  }

 private:
  RandomAccessFile file_;
  uint64_t offset_ = 0;
  Elem elem_;
  int64_t elements_ = 0;
};

// The kv_chunk tensor of a v0 safetensors file, opened (and its header checked by TensorFile)
// only while it is read; a file that no longer holds the planned tensor is refused.
class TensorSource : public Source {
 public:
  TensorSource(std::string path, TensorInfo info) : path_(std::move(path)), info_(std::move(info)) {}
  void read(int64_t first, int64_t count, float* out) const override {
    if (!f_) {
      auto f = std::make_unique<TensorFile>(path_);
      const int64_t i = f->find(info_.name);
      KVT_CHECK(i >= 0 && f->tensors()[static_cast<size_t>(i)].shape == info_.shape &&
                    f->tensors()[static_cast<size_t>(i)].type == info_.type,
                BAD_TENSOR_FILE, "'" << path_ << "' changed while it was read");
      f_ = std::move(f);
      index_ = i;
    }
    f_->read_f32(index_, first, count, out);
  }
  void release() const override { f_.reset(); }

 private:
  std::string path_;
  TensorInfo info_;
  mutable std::unique_ptr<TensorFile> f_;
  mutable int64_t index_ = -1;
};

Elem parse_elem(const std::string& s, const char* option) {
  if (s == "f16" || s == "float16" || s == "fp16") return Elem::f16;
  if (s == "bf16" || s == "bfloat16") return Elem::bf16;
  if (s == "f32" || s == "float32" || s == "fp32") return Elem::f32;
  KVT_THROW(USAGE, option << " '" << s << "' is not f16, bf16 or f32");
}

// What the headerless formats need from the command line.
struct Geometry {
  int64_t layers = 0, heads = 0, dim = 0;
  Elem elem = Elem::f16;
};

Geometry required_geometry(const ChunkOptions& o) {
  KVT_CHECK(o.layers > 0 && o.kv_heads > 0 && o.head_dim > 0 && !o.src_dtype.empty(), USAGE,
            "format " << o.format << " files carry no shape or dtype: give layers, kv_heads, head_dim and "
                      << "src_dtype (the model's and the cache's)");
  KVT_CHECK(o.layers <= kMaxDumpLayers && o.kv_heads <= kMaxDumpHeads && o.head_dim <= kMaxDumpHeadDim, USAGE,
            "layers, kv_heads and head_dim are limited to " << kMaxDumpLayers << ", " << kMaxDumpHeads << " and "
                                                            << kMaxDumpHeadDim);
  return {o.layers, o.kv_heads, o.head_dim, parse_elem(o.src_dtype, "src_dtype")};
}

// The files of a plan grouped into chunks (pages): rows and a label per chunk, the chunk of each piece.
struct Chunks {
  std::vector<int64_t> rows;
  std::vector<std::string> labels;
  std::vector<size_t> of_piece;
};

// Row placement: chunk i starts where chunk i - 1 ends; every chunk but the last holds exactly
// `unit` rows, the last at most `unit` (exactly `unit` when !partial_last). A missing or short
// chunk in the middle, or files out of token order, break that and are refused.
void place_rows(Plan& p, const Chunks& c, int64_t unit, bool partial_last, const char* noun, const char* option) {
  std::vector<int64_t> row0(c.rows.size());
  int64_t at = 0;
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const bool last = i + 1 == c.rows.size();
    KVT_CHECK(c.rows[i] <= unit, SHAPE_MISMATCH,
              noun << " " << i << " (" << c.labels[i] << ") holds " << c.rows[i] << " tokens, more than " << option
                   << " " << unit);
    KVT_CHECK(c.rows[i] == unit || (last && partial_last), SHAPE_MISMATCH,
              noun << " " << i << " (" << c.labels[i] << ") holds " << c.rows[i] << " tokens; every " << noun
                   << (partial_last ? " but the last" : "") << " holds " << option << " " << unit << " (a " << noun
                   << " is missing or short, or the files are not in token order)");
    row0[i] = at;
    at += c.rows[i];
    KVT_CHECK(at <= kMaxDumpTokens, SHAPE_MISMATCH, "the " << noun << "s hold more than 2^31 tokens");
  }
  p.tokens = at;
  for (size_t j = 0; j < p.pieces.size(); ++j) p.pieces[j].row0 = row0[c.of_piece[j]];
}

// Strides of the LMCache v1 memory formats (formats/lmcache.md) for a piece of `rows` tokens.
void lmcache_v1_strides(const std::string& mf, int64_t layers, int64_t heads, int64_t dim, Piece& c) {
  const int64_t hidden = heads * dim;
  c.s_h = dim;
  if (mf == "KV_2LTD") {  // [2, num_layers, num_tokens, hidden_dim]
    c.s_kv = layers * c.rows * hidden, c.s_l = c.rows * hidden, c.s_t = hidden;
  } else if (mf == "KV_T2D") {  // one layer: [num_tokens, 2, hidden_dim]
    c.s_kv = hidden, c.s_l = 0, c.s_t = 2 * hidden;
  } else {  // KV_2TD, one layer: [2, num_tokens, hidden_dim]
    c.s_kv = c.rows * hidden, c.s_l = 0, c.s_t = hidden;
  }
}

void check_lmcache_memory_format(const std::string& mf, bool required) {
  if (mf.empty() && !required) return;
  KVT_CHECK(mf != "KV_MLA_FMT", UNSUPPORTED_CACHE,
            "memory format KV_MLA_FMT holds MLA latents, not per-head K and V; kvtool imports only per-head K and V");
  KVT_CHECK(mf == "KV_2LTD" || mf == "KV_T2D" || mf == "KV_2TD", USAGE,
            "memory_format '" << mf << "' is not KV_2LTD, KV_T2D or KV_2TD (LMCache v1 memory formats)");
}

// LMCache v1 local disk backend: headerless bytes of one chunk (KV_2LTD: all layers) or of one
// layer of one chunk (KV_T2D, KV_2TD: files ordered chunk by chunk, layers 0..L-1 inside).
void plan_lmcache_raw(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c) {
  check_lmcache_memory_format(o.memory_format, true);
  const Geometry g = required_geometry(o);
  const bool per_layer = o.memory_format != "KV_2LTD";
  const int64_t es = elem_size(g.elem);
  const int64_t row_elems = 2 * g.heads * g.dim * (per_layer ? 1 : g.layers), row_bytes = row_elems * es;
  KVT_CHECK(!per_layer || inputs.size() % static_cast<size_t>(g.layers) == 0, SHAPE_MISMATCH,
            inputs.size() << " files are not a whole number of chunks of layers " << g.layers
                          << " files each (memory format " << o.memory_format << " stores one layer per file)");
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto src = std::make_unique<RawSource>(inputs[i], 0, g.elem);
    const uint64_t size = src->size();
    KVT_CHECK(size > 0, TRUNCATED, "'" << inputs[i] << "' is empty");
    KVT_CHECK(size % static_cast<uint64_t>(row_bytes) == 0, BAD_LAYOUT,
              "'" << inputs[i] << "' holds " << size << " bytes, not a whole number of tokens of " << row_bytes
                  << " bytes (memory format " << o.memory_format << ", " << (per_layer ? 1 : g.layers)
                  << " layers x 2 x " << g.heads << " heads x " << g.dim << " x " << es << "-byte " << elem_name(g.elem)
                  << ")");
    Piece pc;
    pc.rows = static_cast<int64_t>(size / static_cast<uint64_t>(row_bytes));
    src->set_elements(pc.rows * row_elems);
    const int64_t layer = per_layer ? static_cast<int64_t>(i) % g.layers : 0;
    if (layer == 0) {
      c.rows.push_back(pc.rows);
      c.labels.push_back("'" + inputs[i] + "'");
    }
    KVT_CHECK(pc.rows == c.rows.back(), SHAPE_MISMATCH,
              "'" << inputs[i] << "' (layer " << layer << " of chunk " << c.rows.size() - 1 << ") holds " << pc.rows
                  << " tokens; layer 0 of that chunk, " << c.labels.back() << ", holds " << c.rows.back());
    pc.source = p.sources.size();
    pc.first_layer = layer;
    pc.layers = per_layer ? 1 : g.layers;
    lmcache_v1_strides(o.memory_format, g.layers, g.heads, g.dim, pc);
    src->release();
    p.sources.push_back(std::move(src));
    p.pieces.push_back(pc);
    c.of_piece.push_back(c.rows.size() - 1);
  }
  p.layers = g.layers, p.kv_heads = g.heads, p.head_dim = g.dim, p.source_dtype = elem_name(g.elem);
}

// The 28-byte header LMCache's FS connector writes before the bytes: RemoteMetadata.serialize(),
// struct format "iiiiiii" (native order and size: seven little-endian int32 on the hosts LMCache
// runs on): length, fmt, dtype, shape[0..3] (formats/lmcache.md, "FS connector").
constexpr uint64_t kFsHeaderBytes = 28;

struct FsHeader {
  int32_t length = 0, fmt = 0, dtype = 0;
  int32_t shape[4] = {0, 0, 0, 0};
};

FsHeader read_fs_header(const RawSource& s) {
  KVT_CHECK(s.size() >= kFsHeaderBytes, TRUNCATED,
            "'" << s.path() << "' holds " << s.size() << " bytes, less than the 28-byte LMCache FS-connector header");
  uint8_t b[kFsHeaderBytes];
  s.file().pread_exact(0, sizeof b, b);
  auto i32 = [&](int k) {
    const uint32_t u = static_cast<uint32_t>(b[4 * k]) | static_cast<uint32_t>(b[4 * k + 1]) << 8 |
                       static_cast<uint32_t>(b[4 * k + 2]) << 16 | static_cast<uint32_t>(b[4 * k + 3]) << 24;
    int32_t v;
    std::memcpy(&v, &u, 4);
    return v;
  };
  FsHeader h;
  h.length = i32(0), h.fmt = i32(1), h.dtype = i32(2);
  for (int k = 0; k < 4; ++k) h.shape[k] = i32(3 + k);
  return h;
}

// MemoryFormat values (lmcache/v1/memory_management.py): 1 KV_2LTD is the one 4-D K/V format.
void check_fs_format(int32_t fmt, const std::string& path) {
  KVT_CHECK(fmt != 6, UNSUPPORTED_CACHE,
            "'" << path << "' holds an MLA chunk (memory format 6, KV_MLA_FMT): latents, not per-head K and V");
  KVT_CHECK(fmt != 4 && fmt != 5, UNSUPPORTED_CACHE,
            "'" << path << "' holds a serialized byte blob (memory format " << fmt
                << ", BINARY / BINARY_BUFFER: a compressing serde), not raw K/V values");
  KVT_CHECK(fmt == 1, BAD_TENSOR_FILE,
            "'" << path << "' has memory format code " << fmt
                << " in its FS-connector header; LMCache writes 1 (KV_2LTD) for a K/V chunk");
}

// DTYPE_TO_INT (lmcache/v1/protocol.py): 1 torch.half and 2 torch.float16 are the same type.
Elem fs_elem(int32_t code, const std::string& path) {
  if (code == 1 || code == 2) return Elem::f16;
  if (code == 3) return Elem::bf16;
  if (code == 4) return Elem::f32;
  KVT_CHECK(code != 5, UNSUPPORTED_DTYPE, "'" << path << "' holds float64 values; kvtool reads f16, bf16 and f32");
  KVT_CHECK(code < 6 || code > 8, UNSUPPORTED_CACHE,
            "'" << path << "' holds " << (code == 6 ? "uint8" : "fp8") << " codes (dtype " << code
                << "); their scales are not in the file, so no import of it could be exact");
  KVT_THROW(BAD_TENSOR_FILE,
            "'" << path << "' has dtype code " << code << " in its FS-connector header (1-8 are defined)");
}

// One FS-connector file: header checked against itself, the file size and the options.
Piece plan_fs_file(RawSource& s, const ChunkOptions& o, Plan& p, bool first) {
  const std::string& path = s.path();
  const FsHeader h = read_fs_header(s);
  check_fs_format(h.fmt, path);
  const Elem e = fs_elem(h.dtype, path);
  KVT_CHECK(h.shape[0] == 2 && h.shape[1] > 0 && h.shape[2] > 0 && h.shape[3] > 0, BAD_TENSOR_FILE,
            "'" << path << "' has shape [" << h.shape[0] << ", " << h.shape[1] << ", " << h.shape[2] << ", "
                << h.shape[3] << "] in its header; a KV_2LTD chunk is [2, layers, tokens, hidden] (all positive)");
  const int64_t L = h.shape[1], T = h.shape[2], hidden = h.shape[3];
  // Each factor is below 2^31, so 2 x L x T fits; a shape whose bytes leave int64 cannot match a
  // 32-bit length and is the same lie.
  const int64_t lt = 2 * L * T, limit = std::numeric_limits<int64_t>::max() / 4;
  const int64_t elems = hidden <= limit / lt ? lt * hidden : -1, bytes = elems < 0 ? -1 : elems * elem_size(e);
  KVT_CHECK(bytes >= 0 && h.length == bytes, BAD_TENSOR_FILE,
            "'" << path << "': the header's length " << h.length << " is not the bytes its shape [2, " << L << ", " << T
                << ", " << hidden << "] of " << elem_name(e) << " needs");
  const uint64_t data = s.size() - kFsHeaderBytes;
  KVT_CHECK(data >= static_cast<uint64_t>(bytes), TRUNCATED,
            "'" << path << "' holds " << data << " bytes after its header, which says " << bytes);
  KVT_CHECK(
      data == static_cast<uint64_t>(bytes), BAD_LAYOUT,
      "'" << path << "' has " << data - static_cast<uint64_t>(bytes) << " bytes after the chunk its header describes");
  const int64_t H = o.kv_heads > 0 ? o.kv_heads : (hidden % o.head_dim == 0 ? hidden / o.head_dim : 0);
  KVT_CHECK(
      H > 0 && hidden % H == 0 && (o.head_dim <= 0 || hidden / H == o.head_dim) && H <= kMaxDumpHeads &&
          hidden / H <= kMaxDumpHeadDim && L <= kMaxDumpLayers,
      SHAPE_MISMATCH,
      "'" << path << "' has " << L << " layers and hidden size " << hidden << "; that is not kv_heads x head_dim");
  KVT_CHECK(o.layers <= 0 || o.layers == L, SHAPE_MISMATCH,
            "layers " << o.layers << " but the header of '" << path << "' says " << L);
  KVT_CHECK(o.src_dtype.empty() || parse_elem(o.src_dtype, "src_dtype") == e, SHAPE_MISMATCH,
            "src_dtype " << o.src_dtype << " but the header of '" << path << "' says " << elem_name(e));
  if (first) p.layers = L, p.kv_heads = H, p.head_dim = hidden / H, p.source_dtype = elem_name(e);
  KVT_CHECK(p.layers == L && p.kv_heads * p.head_dim == hidden && p.source_dtype == elem_name(e), SHAPE_MISMATCH,
            "'" << path << "' (" << L << " layers, hidden " << hidden << ", " << elem_name(e)
                << ") differs from the first chunk (" << p.layers << " layers, hidden " << p.kv_heads * p.head_dim
                << ", " << p.source_dtype << ")");
  s.set_elem(e);
  s.set_elements(elems);
  Piece pc;
  pc.rows = T, pc.first_layer = 0, pc.layers = L;
  lmcache_v1_strides("KV_2LTD", L, H, hidden / H, pc);
  return pc;
}

// LMCache v1 FS connector (save_chunk_meta on): one KV_2LTD chunk per file after the header.
void plan_lmcache_fs(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c) {
  KVT_CHECK(o.kv_heads > 0 || o.head_dim > 0, USAGE,
            "format lmcache-fs: the header gives hidden = heads x head dim; give kv_heads or head_dim to split it");
  check_lmcache_memory_format(o.memory_format, false);
  KVT_CHECK(o.memory_format.empty() || o.memory_format == "KV_2LTD", SHAPE_MISMATCH,
            "memory_format " << o.memory_format << " but FS-connector files hold KV_2LTD chunks (their header's 4-D "
                             << "shape)");
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto src = std::make_unique<RawSource>(inputs[i], kFsHeaderBytes, Elem::f16);
    Piece pc = plan_fs_file(*src, o, p, i == 0);
    pc.source = p.sources.size();
    src->release();
    p.sources.push_back(std::move(src));
    p.pieces.push_back(pc);
    c.rows.push_back(pc.rows);
    c.labels.push_back("'" + inputs[i] + "'");
    c.of_piece.push_back(i);
  }
}

// An option that names the geometry must agree with what the file says.
void check_option(int64_t given, int64_t found, const char* option, const std::string& where) {
  KVT_CHECK(given <= 0 || given == found, SHAPE_MISMATCH,
            option << " " << given << " but " << where << " has " << found);
}

// LMCache v0 local disk backend: a safetensors file with one tensor `kv_chunk`, [L, 2, T, H, d]
// (vllm) or [L, 2, H, T, d] (huggingface).
Piece plan_v0_file(const TensorInfo& t, const std::string& path, bool hf, const ChunkOptions& o, Plan& p,
                   bool first) {
  const std::string where = "kv_chunk of '" + path + "'";
  KVT_CHECK(t.shape.size() == 5 && t.shape[1] == 2, SHAPE_MISMATCH,
            where << " has shape " << json(t.shape).dump()
                  << "; LMCache v0 writes [L, 2, T, H, d] (vllm) or [L, 2, H, T, d] (huggingface)");
  KVT_CHECK(t.type == TensorType::f16 || t.type == TensorType::bf16 || t.type == TensorType::f32, UNSUPPORTED_DTYPE,
            where << " has dtype " << t.type_text << "; kvtool reads F16, BF16 and F32 chunks");
  const int64_t L = t.shape[0], T = t.shape[hf ? 3 : 2], H = t.shape[hf ? 2 : 3], d = t.shape[4];
  KVT_CHECK(L > 0 && T > 0 && H > 0 && d > 0 && L <= kMaxDumpLayers && H <= kMaxDumpHeads && d <= kMaxDumpHeadDim,
            SHAPE_MISMATCH, where << " has shape " << json(t.shape).dump() << ": an empty or oversized axis");
  const Elem e = t.type == TensorType::f16 ? Elem::f16 : t.type == TensorType::bf16 ? Elem::bf16 : Elem::f32;
  check_option(o.layers, L, "layers", where);
  check_option(o.kv_heads, H, "kv_heads", where);
  check_option(o.head_dim, d, "head_dim", where);
  KVT_CHECK(o.src_dtype.empty() || parse_elem(o.src_dtype, "src_dtype") == e, SHAPE_MISMATCH,
            "src_dtype " << o.src_dtype << " but " << where << " is " << elem_name(e));
  if (first) p.layers = L, p.kv_heads = H, p.head_dim = d, p.source_dtype = elem_name(e);
  KVT_CHECK(p.layers == L && p.kv_heads == H && p.head_dim == d && p.source_dtype == elem_name(e), SHAPE_MISMATCH,
            where << " (" << L << " layers, " << H << " heads, d " << d << ", " << elem_name(e)
                  << ") differs from the first chunk (" << p.layers << ", " << p.kv_heads << ", " << p.head_dim << ", "
                  << p.source_dtype << ")");
  Piece pc;
  pc.rows = T, pc.first_layer = 0, pc.layers = L;
  pc.s_l = 2 * T * H * d, pc.s_kv = T * H * d;
  pc.s_t = hf ? d : H * d;
  pc.s_h = hf ? T * d : d;
  return pc;
}

void plan_lmcache_v0(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c) {
  const std::string fmt = o.memory_format.empty() ? "vllm" : o.memory_format;
  KVT_CHECK(fmt == "vllm" || fmt == "huggingface", USAGE,
            "memory_format '" << o.memory_format << "': LMCache v0 chunks are vllm or huggingface");
  p.memory_format = fmt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto f = std::make_unique<TensorFile>(inputs[i]);
    KVT_CHECK(std::string(f->format()) == "safetensors", BAD_TENSOR_FILE,
              "'" << inputs[i] << "' is a ." << f->format() << " file; LMCache v0 writes safetensors chunks");
    const int64_t idx = f->find("kv_chunk");
    KVT_CHECK(idx >= 0 && f->tensors().size() == 1, BAD_TENSOR_FILE,
              "'" << inputs[i] << "' holds " << f->tensors().size() << " tensor(s)"
                  << (idx < 0 ? " and none is kv_chunk" : "") << "; an LMCache v0 chunk holds exactly one, kv_chunk");
    Piece pc = plan_v0_file(f->tensors()[static_cast<size_t>(idx)], inputs[i], fmt == "huggingface", o, p, i == 0);
    pc.source = p.sources.size();
    p.sources.push_back(std::make_unique<TensorSource>(inputs[i], f->tensors()[static_cast<size_t>(idx)]));
    p.pieces.push_back(pc);
    c.rows.push_back(pc.rows);
    c.labels.push_back("'" + inputs[i] + "'");
    c.of_piece.push_back(i);
  }
}

// SGLang HiCache file backend: one page per file, the bytes of MHATokenToKVPoolHost.get_data_page()
// flattened: [2, L, P, H, d] for layer_first and page_first_direct, [2, P, L, H, d] for page_first.
void plan_sglang_page(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c) {
  const std::string& lay = o.memory_format;
  KVT_CHECK(lay == "layer_first" || lay == "page_first" || lay == "page_first_direct", USAGE,
            "format sglang-page needs memory_format layer_first, page_first or page_first_direct (the server's "
            "hicache_mem_layout)");
  KVT_CHECK(o.page_size > 0 && o.page_size <= kMaxDumpTokens, USAGE,
            "format sglang-page needs page_size (the server's page_size, tokens per page)");
  const Geometry g = required_geometry(o);
  const int64_t P = o.page_size, hd = g.heads * g.dim;
  const int64_t elems = checked_mul(checked_mul(2 * g.layers, P, "a page"), hd, "a page");
  const int64_t bytes = checked_mul(elems, elem_size(g.elem), "a page");
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto src = std::make_unique<RawSource>(inputs[i], 0, g.elem);
    const uint64_t size = src->size();
    KVT_CHECK(size >= static_cast<uint64_t>(bytes), TRUNCATED,
              "'" << inputs[i] << "' holds " << size << " bytes; a page of 2 x " << g.layers << " layers x " << P
                  << " tokens x " << g.heads << " heads x " << g.dim << " " << elem_name(g.elem) << " is " << bytes);
    KVT_CHECK(size == static_cast<uint64_t>(bytes), BAD_LAYOUT,
              "'" << inputs[i] << "' holds " << size << " bytes, more than one page of " << bytes
                  << " (a page file holds exactly one page)");
    src->set_elements(elems);
    src->release();
    Piece pc;
    pc.source = p.sources.size(), pc.rows = P, pc.first_layer = 0, pc.layers = g.layers, pc.s_h = g.dim;
    if (lay == "page_first")
      pc.s_kv = P * g.layers * hd, pc.s_t = g.layers * hd, pc.s_l = hd;
    else
      pc.s_kv = g.layers * P * hd, pc.s_l = P * hd, pc.s_t = hd;
    p.sources.push_back(std::move(src));
    p.pieces.push_back(pc);
    c.rows.push_back(P);
    c.labels.push_back("'" + inputs[i] + "'");
    c.of_piece.push_back(i);
  }
  p.layers = g.layers, p.kv_heads = g.heads, p.head_dim = g.dim, p.source_dtype = elem_name(g.elem);
}

// Rows of one piece, one layer, K (kv 0) or V (kv 1) into the [H][T][d] block `out`, read in the
// longest runs the piece's strides allow.
void read_piece(const Plan& p, const Piece& c, int64_t layer, int64_t kv, std::vector<float>& out,
                std::vector<float>& buf) {
  const Source& s = *p.sources[c.source];
  const int64_t H = p.kv_heads, d = p.head_dim, T = p.tokens, n = c.rows;
  const int64_t base = kv * c.s_kv + (layer - c.first_layer) * c.s_l;
  auto put = [&](int64_t t, int64_t h, const float* x) {
    std::copy(x, x + d, out.data() + ((h * T) + c.row0 + t) * d);
  };
  if (c.s_h == d && c.s_t == H * d) {  // [rows][heads][d]: one run
    buf.resize(static_cast<size_t>(n * H * d));
    s.read(base, n * H * d, buf.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h) put(t, h, buf.data() + (t * H + h) * d);
  } else if (c.s_t == d && c.s_h == n * d) {  // [heads][rows][d]: one run
    buf.resize(static_cast<size_t>(H * n * d));
    s.read(base, H * n * d, buf.data());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < n; ++t) put(t, h, buf.data() + (h * n + t) * d);
  } else if (c.s_h == d) {  // one run of [heads][d] per row
    buf.resize(static_cast<size_t>(H * d));
    for (int64_t t = 0; t < n; ++t) {
      s.read(base + t * c.s_t, H * d, buf.data());
      for (int64_t h = 0; h < H; ++h) put(t, h, buf.data() + h * d);
    }
  } else {
    buf.resize(static_cast<size_t>(d));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < H; ++h) {
        s.read(base + t * c.s_t + h * c.s_h, d, buf.data());
        put(t, h, buf.data());
      }
  }
}

}  // namespace

Plan plan_chunks(const std::vector<std::string>& inputs, const ChunkOptions& o) {
  const auto& known = chunk_formats();
  KVT_CHECK(std::find(known.begin(), known.end(), o.format) != known.end(), USAGE,
            "format '" << o.format << "' is not lmcache-raw, lmcache-fs, lmcache-v0 or sglang-page");
  KVT_CHECK(!inputs.empty(), USAGE, "format " << o.format << " needs its chunk files as INPUT, in token order");
  KVT_CHECK(o.chunk_tokens >= 0 && o.page_size >= 0 && o.layers >= 0 && o.kv_heads >= 0 && o.head_dim >= 0, USAGE,
            "chunk_tokens, page_size, layers, kv_heads and head_dim must not be negative");
  const bool sglang = o.format == "sglang-page";
  KVT_CHECK(sglang || o.page_size == 0, USAGE, "page_size is for format sglang-page; LMCache chunks have chunk_tokens");
  KVT_CHECK(!sglang || o.chunk_tokens == 0, USAGE,
            "chunk_tokens is for the LMCache formats; SGLang pages have page_size");
  KVT_CHECK(o.chunk_tokens <= kMaxDumpTokens, USAGE, "chunk_tokens " << o.chunk_tokens << " is beyond 2^31");
  Plan p;
  p.format = o.format;
  p.memory_format = o.memory_format;
  Chunks c;
  if (o.format == "lmcache-raw")
    plan_lmcache_raw(inputs, o, p, c);
  else if (o.format == "lmcache-fs")
    plan_lmcache_fs(inputs, o, p, c), p.memory_format = "KV_2LTD";
  else if (o.format == "lmcache-v0")
    plan_lmcache_v0(inputs, o, p, c);
  else
    plan_sglang_page(inputs, o, p, c);
  const int64_t unit = sglang ? o.page_size : (o.chunk_tokens > 0 ? o.chunk_tokens : 256);
  place_rows(p, c, unit, !sglang, sglang ? "page" : "chunk", sglang ? "page_size" : "chunk_tokens");
  return p;
}

void read_layer(const Plan& p, int64_t layer, std::vector<float>& k, std::vector<float>& v) {
  const size_t n = static_cast<size_t>(p.kv_heads * p.tokens * p.head_dim);
  k.assign(n, 0.f);
  v.assign(n, 0.f);
  std::vector<float> buf;
  for (const Piece& c : p.pieces) {
    if (layer < c.first_layer || layer >= c.first_layer + c.layers) continue;
    read_piece(p, c, layer, 0, k, buf);
    read_piece(p, c, layer, 1, v, buf);
    p.sources[c.source]->release();
  }
}

}  // namespace kvtool::chunks

namespace kvtool {

const std::vector<std::string>& chunk_formats() {
  static const std::vector<std::string> f = {"lmcache-raw", "lmcache-fs", "lmcache-v0", "sglang-page"};
  return f;
}

void check_no_chunk_options(const ChunkOptions& o) {
  KVT_CHECK(o.memory_format.empty() && o.src_dtype.empty() && o.chunk_tokens == 0 && o.page_size == 0, USAGE,
            "memory_format, src_dtype, chunk_tokens and page_size need format (lmcache-raw, lmcache-fs, "
            "lmcache-v0 or sglang-page)");
}

namespace {

DType dtype_of(const std::string& s) { return s == "f16" ? DType::f16 : s == "bf16" ? DType::bf16 : DType::f32; }

// The chunk files of one request as a KvSnapshot: rows in token order, positions 0..T-1.
class ChunkSnapshot final : public KvSnapshot {
 public:
  ChunkSnapshot(const std::vector<std::string>& inputs, const ChunkOptions& o) : p_(chunks::plan_chunks(inputs, o)) {
    info_.geo.layers = p_.layers;
    info_.geo.kv_heads = p_.kv_heads;
    info_.geo.tokens = p_.tokens;
    info_.geo.head_dim = p_.head_dim;
    info_.geo.dtype = dtype_of(p_.source_dtype);
    info_.format = p_.format + (p_.memory_format.empty() ? "" : " " + p_.memory_format);
    info_.source_dtype = p_.source_dtype;
  }
  const SnapshotInfo& info() const override { return info_; }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override {
    chunks::read_layer(p_, layer, k, v);
  }

 private:
  chunks::Plan p_;
  SnapshotInfo info_;
};

}  // namespace

std::unique_ptr<KvSnapshot> open_chunk_snapshot(const SnapshotRequest& r) {
  return std::make_unique<ChunkSnapshot>(r.inputs, r.chunks);
}

}  // namespace kvtool
