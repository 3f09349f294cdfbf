// Parsing of llama.cpp state files (formats/llama-state.md), following llama_context::
// state_seq_save_file / state_save_file (src/llama-context.cpp) and llama_kv_cache::state_write,
// state_write_meta, state_write_data (src/llama-kv-cache.cpp) of llama.cpp as bundled with
// node-llama-cpp 3.21.1 (release tag v0.4.0 of that bundle).
#include <algorithm>
#include <cmath>

#include "impl/llama_state_file.h"
#include "kvtool/half.h"
#include "kvtool/identity.h"

namespace kvtool::impl {

namespace {

constexpr uint32_t kMagicSeq = 0x67677371u;      // "ggsq"
constexpr uint32_t kMagicSession = 0x6767736eu;  // "ggsn"
// llama_state_seq_get_data's in-memory blob (llama_context::state_seq_get_data, io_magic): the
// magic, the sequence id it was taken from, then the memory's state; no version, no tokens.
constexpr uint32_t kMagicBlob = 0xaf143cd8u;
constexpr uint32_t kMaxStreams = 1 << 16;
// LLAMA_MAX_SEQ (src/llama-cparams.h): llama_kv_cache::state_read_meta refuses a seq_id outside
// [0, n_seq_max) and n_seq_max is at most this, so no file llama.cpp can read holds another.
constexpr int32_t kMaxSeq = 256;

// ggml_type ids (ggml/include/ggml.h) of the cache types kvtool decodes.
std::optional<GgmlType> ggml_type(int32_t id) {
  switch (id) {
    case 0:
      return GgmlType{0, "f32", 1, 4, false};
    case 1:
      return GgmlType{1, "f16", 1, 2, false};
    case 8:
      return GgmlType{8, "q8_0", 32, 34, true};  // f16 scale, then 32 int8
    case 30:
      return GgmlType{30, "bf16", 1, 2, false};
    default:
      return std::nullopt;
  }
}

GgmlType require_type(int32_t id, const std::string& what, int64_t layer, bool v) {
  auto t = ggml_type(id);
  KVT_CHECK(t, UNSUPPORTED_DTYPE,
            what << ": layer " << layer << " " << (v ? "V" : "K") << " has ggml type " << id
                 << "; kvtool reads f32 (0), f16 (1), q8_0 (8) and bf16 (30) caches");
  return *t;
}

void decode(const GgmlType& t, const uint8_t* src, int64_t n, float* out) {
  switch (t.id) {
    case 0:
      std::memcpy(out, src, static_cast<size_t>(n) * 4);
      return;
    case 1:
      f16_to_f32_array(reinterpret_cast<const uint16_t*>(src), out, static_cast<size_t>(n));
      return;
    case 30:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = bf16_to_f32(h);
      }
      return;
    default:  // q8_0: blocks of 32 values = scale (f16) x int8
      for (int64_t b = 0; b < n / 32; ++b) {
        const uint8_t* blk = src + 34 * b;
        uint16_t h;
        std::memcpy(&h, blk, 2);
        const float d = f16_to_f32(h);
        for (int j = 0; j < 32; ++j) out[32 * b + j] = d * static_cast<float>(static_cast<int8_t>(blk[2 + j]));
      }
  }
}

}  // namespace

StateReader::StateReader(const std::string& path, const GgufModel* model) : r_(path, "the state file '" + path + "'") {
  f_.file_bytes = static_cast<int64_t>(r_.size());
  KVT_CHECK(r_.size() >= 12, TRUNCATED, r_.what() << " is " << r_.size() << " bytes, too short for a state file");
  const uint32_t magic = r_.u32("the magic");
  KVT_CHECK(magic == kMagicSeq || magic == kMagicSession || magic == kMagicBlob, BAD_STATE_FILE,
            r_.what() << " is not a llama.cpp state file (magic neither ggsq, ggsn nor a sequence blob's)");
  if (magic == kMagicBlob) {
    f_.magic = "blob";
    f_.blob_seq = r_.i32("the blob's sequence id");
    KVT_CHECK(
        f_.blob_seq >= 0 && f_.blob_seq < kMaxSeq, BAD_STATE_FILE,
        r_.what() << ": a sequence blob taken from sequence " << f_.blob_seq << ", outside [0, " << kMaxSeq << ")");
    parse_memory(model);
    return;
  }
  f_.magic = magic == kMagicSeq ? "ggsq" : "ggsn";
  f_.version = r_.u32("the version");
  check_version(magic == kMagicSeq);
  const uint32_t n_token = r_.u32("the token count");
  KVT_CHECK(n_token <= r_.remaining() / 4, TRUNCATED, r_.what() << " claims " << n_token << " tokens beyond its end");
  f_.tokens.resize(n_token);
  r_.read(f_.tokens.data(), uint64_t(n_token) * 4, "the tokens");
  if (magic == kMagicSession) {
    const uint32_t n = r_.u32("the architecture name's length");
    KVT_CHECK(n <= 256, BAD_STATE_FILE, r_.what() << ": architecture name of " << n << " bytes");
    f_.arch.resize(n);
    r_.read(f_.arch.data(), n, "the architecture name");
    for (char& ch : f_.arch)  // printed in messages: no terminal control bytes from the file
      if (static_cast<unsigned char>(ch) < 0x20 || static_cast<unsigned char>(ch) >= 0x7f) ch = '?';
    KVT_CHECK(!model || model->arch == f_.arch, SHAPE_MISMATCH,
              r_.what() << " was written by a '" << excerpt(f_.arch) << "' model; the GGUF is '" << model->arch << "'");
  }
  parse_memory(model);
}

// Sequence files v3 and v2 have the same layout for every architecture kvtool reads (llama.cpp
// raised both numbers with the session's for one new architecture's memory, formats/llama-state.md);
// session v9 files were written in two layouts (with and without the output buffers) under one
// number, so they are refused.
void StateReader::check_version(bool seq) {
  const bool known = seq ? f_.version == 3 || f_.version == 2 : f_.version == 10;
  KVT_CHECK(known, UNSUPPORTED_VERSION,
            r_.what() << " is " << f_.magic << " version " << f_.version << "; kvtool reads "
                      << (seq ? "ggsq versions 3 and 2" : "ggsn version 10")
                      << (!seq && f_.version == 9 ? " (version 9 files exist in two layouts, with and without the "
                                                    "output buffers, and nothing in the file says which)"
                                                  : "")
                      << " (formats/llama-state.md)");
}

// The memory's state: its K/V caches (llama_kv_cache::state_write each: streams of cells, then K
// and V per layer), then a hybrid model's recurrent state. A blob that holds only the last of
// several sections is refused by name: llama_state_seq_get_data with LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
// leaves out an iSWA model's full-attention cache and a hybrid model's attention cache
// (llama_kv_cache_iswa::state_write, llama_memory_hybrid::state_write).
void StateReader::parse_memory(const GgufModel* model) {
  const uint64_t start = r_.offset();
  try {
    parse_sections(model);
  } catch (const Error&) {
    if (model && (model->kv_sections.size() > 1 || model->memory == "hybrid")) refuse_partial(start, *model);
    throw;
  }
}

void StateReader::parse_sections(const GgufModel* model) {
  if (!model) {
    parse_kv_section("kv", nullptr, nullptr);
  } else {
    static const std::vector<std::string> iswa = {"base", "swa"};
    std::vector<std::vector<int64_t>> sections = model->kv_sections;
    if (sections.empty()) {  // a model not from read_gguf_model: one cache of every layer
      sections.emplace_back();
      for (int64_t l = 0; l < model->layers; ++l) sections.back().push_back(l);
    }
    for (size_t i = 0; i < sections.size(); ++i)
      parse_kv_section(model->memory == "iswa" && i < 2 ? iswa[i]
                       : model->memory == "hybrid"      ? "attention"
                                                        : "kv",
                       &sections[i], model);
    if (model->memory == "hybrid") parse_recurrent(*model);
  }
  check_one_stream_per_sequence();
  KVT_CHECK(r_.remaining() == 0, BAD_STATE_FILE,
            r_.what() << " has " << r_.remaining() << " bytes after its last "
                      << (f_.recurrent.present ? "state" : "stream")
                      << (model ? " (a damaged file, or one of another model)"
                                : " (a second cache, as sliding-window or hybrid models write: give the model's "
                                  "GGUF; or a damaged file)"));
}

// Called when the memory did not parse as the model's sections: if its bytes are exactly the last
// section alone, the file is a partial blob and is refused by name; otherwise the caller rethrows.
void StateReader::refuse_partial(uint64_t start, const GgufModel& model) {
  const StateFile whole = f_;
  f_.sections.clear(), f_.streams.clear(), f_.cells.clear(), f_.recurrent = {};
  r_.seek(start);
  bool partial = false;
  try {
    if (model.memory == "hybrid")
      parse_recurrent(model);
    else
      parse_kv_section("swa", &model.kv_sections.back(), &model);
    partial = r_.remaining() == 0;
  } catch (const Error&) {}
  KVT_CHECK(!partial, UNSUPPORTED_CACHE,
            r_.what() << " holds only "
                      << (model.memory == "hybrid" ? "the recurrent state" : "the sliding-window cache") << " of '"
                      << model.arch << "': a blob written with LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY, without "
                      << (model.memory == "hybrid" ? "the attention layers' K/V" : "the full-attention layers' K/V")
                      << "; kvtool imports whole caches (formats/llama-state.md, \"Variants\")");
  f_ = whole;
}

void StateReader::parse_kv_section(const std::string& name, const std::vector<int64_t>* layers,
                                   const GgufModel* model) {
  const uint32_t n_stream = r_.u32("the stream count");
  KVT_CHECK(n_stream >= 1 && n_stream <= kMaxStreams && n_stream <= r_.remaining() / 4, BAD_STATE_FILE,
            r_.what() << " claims " << n_stream << " streams");
  StateSection sec;
  sec.name = name;
  sec.first_stream = static_cast<uint32_t>(f_.streams.size());
  sec.streams = n_stream;
  if (layers) sec.layers = *layers;
  f_.sections.push_back(sec);
  f_.streams.resize(f_.streams.size() + n_stream);
  for (uint32_t s = sec.first_stream; s < sec.first_stream + n_stream; ++s) parse_stream(s, layers, model);
  // Every stream of a cache that holds cells holds the cache's layers (llama_kv_cache::state_write_data
  // writes them all); without a model, the first such stream's count is the section's.
  StateSection& added = f_.sections.back();
  std::optional<size_t> count;
  for (uint32_t s = sec.first_stream; s < sec.first_stream + n_stream; ++s) {
    const StateStream& st = f_.streams[s];
    if (st.cells == 0) continue;
    KVT_CHECK(!count || *count == st.k.size(), BAD_STATE_FILE,
              r_.what() << ": its streams hold " << *count << " and " << st.k.size() << " layers");
    count = st.k.size();
  }
  if (!layers)
    for (size_t i = 0; i < count.value_or(0); ++i) added.layers.push_back(static_cast<int64_t>(i));
}

// A sequence lives in one stream of each section (llama.cpp maps seq_id to a stream): a file whose
// sequence has cells in two streams of one section is damaged, whichever sequence is read.
void StateReader::check_one_stream_per_sequence() const {
  for (size_t sec = 0; sec < f_.sections.size(); ++sec) {
    int64_t stream_of[kMaxSeq];
    std::fill(std::begin(stream_of), std::end(stream_of), -1);
    for (const StateCell& c : f_.cells) {
      if (f_.streams[c.stream].section != sec) continue;
      for (int32_t id : c.seqs) {
        int64_t& at = stream_of[id];
        KVT_CHECK(
            at < 0 || at == c.stream, BAD_STATE_FILE,
            r_.what() << ": sequence " << id << " has cells in two streams (" << at << " and " << c.stream << ")");
        at = c.stream;
      }
    }
  }
}

// Cells: i32 position, u32 sequence count, the M-RoPE extension (i32 x, y, token) when the model
// has one, the sequence ids (llama_kv_cache::state_write_meta).
void StateReader::parse_cells(uint32_t s, uint32_t count, bool ext) {
  KVT_CHECK(count <= r_.remaining() / 8, TRUNCATED, r_.what() << ": stream " << s << " claims " << count << " cells");
  for (uint32_t i = 0; i < count; ++i) {
    StateCell c;
    c.stream = s;
    c.index = i;
    c.pos = r_.i32("a cell's position");
    const uint32_t n_seq = r_.u32("a cell's sequence count");
    KVT_CHECK(
        n_seq <= static_cast<uint32_t>(kMaxSeq) && n_seq <= r_.remaining() / 4, BAD_STATE_FILE,
        r_.what() << ": cell " << i << " claims " << n_seq << " sequences (llama.cpp holds at most " << kMaxSeq << ")");
    if (ext) {
      c.ext = true;
      c.x = r_.i32("a cell's x");
      c.y = r_.i32("a cell's y");
      c.token = r_.i32("a cell's token");
    }
    c.seqs.resize(n_seq);
    r_.read(c.seqs.data(), uint64_t(n_seq) * 4, "a cell's sequence ids");
    for (int32_t id : c.seqs)
      KVT_CHECK(id >= 0 && id < kMaxSeq, BAD_STATE_FILE,
                r_.what() << ": cell " << i << " of stream " << s << " names sequence " << id << ", outside [0, "
                          << kMaxSeq << ") (llama.cpp's LLAMA_MAX_SEQ)");
    f_.cells.push_back(std::move(c));
  }
}

void StateReader::parse_stream(uint32_t s, const std::vector<int64_t>* layers, const GgufModel* model) {
  StateStream& st = f_.streams[s];
  st.section = static_cast<uint32_t>(f_.sections.size() - 1);
  st.cells = r_.u32("a stream's cell count");
  if (st.cells == 0) return;
  parse_cells(s, st.cells, model && model->cell_ext);
  const uint32_t v_trans = r_.u32("v_trans");
  KVT_CHECK(v_trans <= 1, BAD_STATE_FILE, r_.what() << ": v_trans is " << v_trans << " (0 or 1)");
  st.v_trans = v_trans == 1;
  const uint32_t n_layer = r_.u32("the layer count");
  KVT_CHECK(n_layer >= 1 && n_layer <= kMaxDumpLayers, BAD_STATE_FILE, r_.what() << ": " << n_layer << " layers");
  const std::string& sec = f_.sections.back().name;
  KVT_CHECK(!layers || n_layer == layers->size(), SHAPE_MISMATCH,
            r_.what() << (sec == "kv" ? "" : "'s " + sec + " cache") << " has " << n_layer << " layers; the model '"
                      << model->path << "' has " << layers->size()
                      << (sec == "kv" ? "" : " in that cache (" + std::to_string(model->layers) + " in all)"));
  st.k.resize(n_layer);
  st.v.resize(n_layer);
  for (uint32_t l = 0; l < n_layer; ++l)
    parse_tensor(st.k[l], st.cells, false, false, layers ? (*layers)[l] : l, model);
  for (uint32_t l = 0; l < n_layer; ++l)
    parse_tensor(st.v[l], st.cells, true, st.v_trans, layers ? (*layers)[l] : l, model);
}

// llama_memory_recurrent::state_write: u32 cell count, cells (i32 position, u32 sequence count and
// ids: none in a sequence save), u32 s_trans (llama.cpp writes 0), u32 the model's layer count,
// then per recurrent layer an R entry and an S entry (i32 type, u64 row size, the cells' rows).
// kvtool walks the entries to the end of the file and reads none of them.
void StateReader::parse_recurrent(const GgufModel& model) {
  RecurrentState& rs = f_.recurrent;
  rs.present = true;
  rs.offset = r_.offset();
  rs.cells = r_.u32("the recurrent state's cell count");
  KVT_CHECK(rs.cells <= r_.remaining() / 8 && rs.cells <= static_cast<uint32_t>(kMaxSeq), BAD_STATE_FILE,
            r_.what() << ": the recurrent state claims " << rs.cells << " cells");
  for (uint32_t i = 0; i < rs.cells; ++i) {
    rs.positions.push_back(r_.i32("a recurrent cell's position"));
    const uint32_t n_seq = r_.u32("a recurrent cell's sequence count");
    KVT_CHECK(n_seq <= static_cast<uint32_t>(kMaxSeq), BAD_STATE_FILE,
              r_.what() << ": a recurrent cell claims " << n_seq << " sequences");
    r_.skip(uint64_t(n_seq) * 4, "a recurrent cell's sequence ids");
  }
  const uint32_t s_trans = r_.u32("the recurrent state's s_trans");
  KVT_CHECK(s_trans == 0, BAD_STATE_FILE,
            r_.what() << ": the recurrent state's s_trans is " << s_trans << " (llama.cpp writes 0)");
  const uint32_t n_layer = r_.u32("the recurrent state's layer count");
  KVT_CHECK(n_layer == model.layers, SHAPE_MISMATCH,
            r_.what() << "'s recurrent state has " << n_layer << " layers; the model has " << model.layers);
  while (r_.remaining() > 0 && rs.entries < 4 * n_layer) {
    const int32_t type = r_.i32("a recurrent entry's type");
    const uint64_t row = r_.u64("a recurrent entry's row size");
    KVT_CHECK(type >= 0 && type < 64 && row <= (rs.cells ? r_.remaining() / rs.cells : r_.remaining()), BAD_STATE_FILE,
              r_.what() << ": recurrent entry " << rs.entries << " (type " << type << ", rows of " << row
                        << " bytes) does not fit the file");
    r_.skip(row * rs.cells, "a recurrent entry");
    ++rs.entries;
  }
  rs.bytes = r_.offset() - rs.offset;
}

void StateReader::parse_tensor(StateTensor& t, uint32_t cells, bool v, bool v_trans, int64_t layer,
                               const GgufModel* model) {
  t.type = require_type(r_.i32("a layer's type"), r_.what(), layer, v);
  uint64_t bytes = 0;
  if (!v_trans) {
    const uint64_t row = r_.u64("a layer's row size");
    KVT_CHECK(row > 0 && row % static_cast<uint64_t>(t.type.bytes) == 0 && row <= r_.remaining(), BAD_STATE_FILE,
              r_.what() << ": layer " << layer << (v ? " V" : " K") << " rows of " << row << " bytes for type "
                        << t.type.name);
    t.width = static_cast<int64_t>(row / static_cast<uint64_t>(t.type.bytes)) * t.type.block;
    bytes = row;
  } else {
    KVT_CHECK(!t.type.quantized, BAD_STATE_FILE,
              r_.what() << ": a transposed V of quantized type " << t.type.name << " (llama.cpp never writes one)");
    const uint32_t el = r_.u32("V's element size");
    KVT_CHECK(el == static_cast<uint32_t>(t.type.bytes), BAD_STATE_FILE,
              r_.what() << ": layer " << layer << " V elements of " << el << " bytes for type " << t.type.name);
    t.width = r_.u32("V's width");
    t.transposed = true;
    bytes = uint64_t(el) * static_cast<uint64_t>(t.width);
  }
  KVT_CHECK(t.width >= 1 && t.width <= kMaxDumpHeads * kMaxDumpHeadDim, BAD_STATE_FILE,
            r_.what() << ": layer " << layer << " has rows of " << t.width << " values");
  KVT_CHECK(!model || t.width == model->kv_heads * model->head_dim, SHAPE_MISMATCH,
            r_.what() << ": layer " << layer << (v ? " V" : " K") << " rows hold " << t.width
                      << " values; the model has " << model->kv_heads << " kv heads x head_dim " << model->head_dim);
  KVT_CHECK(bytes <= r_.remaining() / cells, TRUNCATED,
            r_.what() << " ends inside layer " << layer << (v ? " V" : " K") << " (" << cells << " cells of " << bytes
                      << " bytes)");
  t.offset = r_.offset();
  r_.skip(bytes * cells, "a layer's data");
}

void StateReader::read_rows(const StateTensor& t, uint32_t stream_cells, const std::vector<uint32_t>& rows,
                            std::vector<float>& out) {
  const int64_t w = t.width;
  const uint64_t row_bytes = static_cast<uint64_t>(w / t.type.block * t.type.bytes);
  std::vector<uint8_t> raw(row_bytes * stream_cells);
  r_.seek(t.offset);
  r_.read(raw.data(), raw.size(), "a layer's data");
  out.resize(rows.size() * static_cast<size_t>(w));
  if (!t.transposed) {
    for (size_t i = 0; i < rows.size(); ++i) decode(t.type, raw.data() + rows[i] * row_bytes, w, out.data() + i * w);
    return;
  }
  std::vector<float> all(static_cast<size_t>(w) * stream_cells);  // [w][cells]
  decode(t.type, raw.data(), static_cast<int64_t>(all.size()), all.data());
  for (size_t i = 0; i < rows.size(); ++i)
    for (int64_t j = 0; j < w; ++j) out[i * w + j] = all[static_cast<size_t>(j) * stream_cells + rows[i]];
}

void unrotate_hadamard(float* rows, int64_t count, int64_t width, int64_t n) {
  // y = H x with H the Sylvester Hadamard matrix scaled by 1/sqrt(n): the fast transform, butterflies
  // in the order ggml_gen_hadamard builds the matrix (symmetric, so row and column order agree).
  const float scale = 1.0f / std::sqrt(static_cast<float>(n));
  for (int64_t r = 0; r < count; ++r)
    for (int64_t b = 0; b + n <= width; b += n) {
      float* x = rows + r * width + b;
      for (int64_t h = 1; h < n; h *= 2)
        for (int64_t i = 0; i < n; i += 2 * h)
          for (int64_t j = i; j < i + h; ++j) {
            const float a = x[j], c = x[j + h];
            x[j] = a + c;
            x[j + h] = a - c;
          }
      for (int64_t j = 0; j < n; ++j) x[j] *= scale;
    }
}

}  // namespace kvtool::impl
