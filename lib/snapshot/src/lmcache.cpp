// LMCache's chunk files (formats/lmcache.md): v1 local-disk chunks (headerless, KV_2LTD / KV_T2D /
// KV_2TD), v1 FS-connector chunks (a 28-byte header before the bytes) and v0 safetensors chunks
// (`kv_chunk`), planned as strided pieces of their files (impl/chunk_plan.h). The layouts and the
// header follow LMCache's own source at the version formats/lmcache.md names.
#include "impl/chunk_plan.h"

namespace kvtool::chunks {

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

// An option that names the geometry must agree with what the file says.
void check_option(int64_t given, int64_t found, const char* option, const std::string& where) {
  KVT_CHECK(given <= 0 || given == found, SHAPE_MISMATCH,
            option << " " << given << " but " << where << " has " << found);
}

// LMCache v0 local disk backend: a safetensors file with one tensor `kv_chunk`, [L, 2, T, H, d]
// (vllm) or [L, 2, H, T, d] (huggingface).
Piece plan_v0_file(const TensorInfo& t, const std::string& path, bool hf, const ChunkOptions& o, Plan& p, bool first) {
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

}  // namespace

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

}  // namespace kvtool::chunks
