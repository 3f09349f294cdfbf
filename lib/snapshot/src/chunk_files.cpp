// The chunk-file reader of kvtool/snapshot.h (kvtool/chunk_files.h, impl/chunk_plan.h): what the
// LMCache (lmcache.cpp) and SGLang (sglang_hicache.cpp) planners share — the sources, row
// placement, the strided reads of a plan's pieces — and the KvSnapshot over a plan. Sizes are
// products of small checked factors (checked_mul); a file's data must be exactly what its header or
// the options describe, so no read can leave it and nothing is allocated from a claimed size.
#include "impl/chunk_plan.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <utility>

#include <sys/stat.h>

#include "impl/readers.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/random_access_file.h"
#include "kvtool/tensor_file.h"

namespace kvtool::chunks {

Elem parse_elem(const std::string& s, const char* option) {
  if (s == "f16" || s == "float16" || s == "fp16") return Elem::f16;
  if (s == "bf16" || s == "bfloat16") return Elem::bf16;
  if (s == "f32" || s == "float32" || s == "fp32") return Elem::f32;
  KVT_THROW(USAGE, option << " '" << s << "' is not f16, bf16 or f32");
}

Geometry required_geometry(const ChunkOptions& o) {
  KVT_CHECK(o.layers > 0 && o.kv_heads > 0 && o.head_dim > 0 && !o.src_dtype.empty(), USAGE,
            "format " << o.format << " files carry no shape or dtype: give layers, kv_heads, head_dim and "
                      << "src_dtype (the model's and the cache's)");
  KVT_CHECK(o.layers <= kMaxDumpLayers && o.kv_heads <= kMaxDumpHeads && o.head_dim <= kMaxDumpHeadDim, USAGE,
            "layers, kv_heads and head_dim are limited to " << kMaxDumpLayers << ", " << kMaxDumpHeads << " and "
                                                            << kMaxDumpHeadDim);
  return {o.layers, o.kv_heads, o.head_dim, parse_elem(o.src_dtype, "src_dtype")};
}

namespace {

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

// Each file holds its own token range: one named twice (the same path, or two names of one file)
// would import its rows twice, at the positions of two ranges.
void refuse_repeated_inputs(const std::vector<std::string>& inputs, const char* noun) {
  std::map<std::pair<dev_t, ino_t>, size_t> seen;
  for (size_t i = 0; i < inputs.size(); ++i) {
    struct stat st {};
    if (::stat(inputs[i].c_str(), &st) != 0) continue;  // the reader names a missing file
    auto [it, fresh] = seen.emplace(std::make_pair(st.st_dev, st.st_ino), i);
    KVT_CHECK(fresh, USAGE,
              noun << " file '" << printable(inputs[i]) << "' (input " << i + 1 << ") is the file of input "
                   << it->second + 1 << ": each " << noun << " holds its own rows, so no file may be given twice");
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
  refuse_repeated_inputs(inputs, sglang ? "page" : "chunk");
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
