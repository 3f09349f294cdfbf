// The llama.cpp state-file reader (kvtool/llama_state.h, formats/llama-state.md): a sequence's cells
// chosen and sorted into position order, a layer's K and V decoded (and un-rotated) at a time, for
// inspect and, as a KvSnapshot, for import and verify.
#include "kvtool/llama_state.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "impl/llama_state_file.h"
#include "impl/readers.h"
#include "kvtool/tensor_file.h"

namespace kvtool {

namespace {

using impl::StateFile;
using impl::StateReader;

// The rows of one sequence: per K/V cache (section) its stream and cell indices sorted by
// position; `positions` are those every section holds (what import reads, formats/llama-state.md).
struct SectionRows {
  uint32_t stream = 0;
  std::vector<uint32_t> cells;  // all of the sequence's cells in the section, by position
  std::vector<int64_t> all;     // their positions
  std::vector<uint32_t> rows;   // the cells of `Chosen::positions`
};
struct Chosen {
  std::optional<int32_t> seq;
  std::vector<SectionRows> sections;
  std::vector<int64_t> positions;
  std::vector<const impl::StateCell*> cells;  // of the first section, one per position (M-RoPE checks)
};

std::vector<int32_t> sequence_ids(const StateFile& f) {
  std::set<int32_t> s;
  for (const auto& c : f.cells) s.insert(c.seqs.begin(), c.seqs.end());
  return {s.begin(), s.end()};
}

std::string list(const std::vector<int32_t>& v) {
  std::string r;
  for (size_t i = 0; i < v.size() && i < 16; ++i) r += (i ? ", " : "") + std::to_string(v[i]);
  return v.size() > 16 ? r + ", ..." : r;
}

// The sequence's cells of section `sec`, sorted by position (checked: one stream, distinct positions).
SectionRows section_rows(const StateFile& f, uint32_t sec, int32_t seq) {
  std::vector<std::pair<int64_t, uint32_t>> rows;  // (position, cell index in its stream)
  std::optional<uint32_t> stream;
  for (const auto& cell : f.cells) {
    if (f.streams[cell.stream].section != sec || std::find(cell.seqs.begin(), cell.seqs.end(), seq) == cell.seqs.end())
      continue;
    KVT_CHECK(!stream || *stream == cell.stream, BAD_STATE_FILE,
              "sequence " << seq << " has cells in two streams (" << *stream << " and " << cell.stream << ")");
    KVT_CHECK(cell.pos >= 0, BAD_STATE_FILE, "sequence " << seq << " has a cell at negative position " << cell.pos);
    stream = cell.stream;
    rows.emplace_back(cell.pos, cell.index);
  }
  std::sort(rows.begin(), rows.end());
  for (size_t i = 1; i < rows.size(); ++i)
    KVT_CHECK(rows[i].first != rows[i - 1].first, BAD_STATE_FILE,
              "sequence " << seq << " has two cells at position " << rows[i].first);
  SectionRows r;
  r.stream = stream.value_or(f.sections[sec].first_stream);
  for (const auto& [p, i] : rows) {
    r.all.push_back(p);
    r.cells.push_back(i);
  }
  return r;
}

// The positions every section holds, and each section's cells of them.
void common_rows(const StateFile& f, Chosen& c) {
  c.positions = c.sections.front().all;
  for (const SectionRows& r : c.sections) {
    std::vector<int64_t> both;
    std::set_intersection(c.positions.begin(), c.positions.end(), r.all.begin(), r.all.end(), std::back_inserter(both));
    c.positions = std::move(both);
  }
  for (SectionRows& r : c.sections)
    for (int64_t p : c.positions)
      r.rows.push_back(r.cells[static_cast<size_t>(std::lower_bound(r.all.begin(), r.all.end(), p) - r.all.begin())]);
  const SectionRows& first = c.sections.front();
  std::vector<const impl::StateCell*> by_index(f.streams[first.stream].cells, nullptr);  // the stream's cells
  for (const auto& cell : f.cells)
    if (cell.stream == first.stream) by_index[cell.index] = &cell;
  for (uint32_t i : first.rows) c.cells.push_back(by_index[i]);
}

// The sequence to read: --seq-id, or the only one. nullopt when the file holds several and none
// was named (inspect still shows the file; import and verify make it a usage error).
std::optional<Chosen> choose(const StateFile& f, const LlamaStateOptions& o) {
  const std::vector<int32_t> ids = sequence_ids(f);
  Chosen c;
  if (o.seq_id) {
    KVT_CHECK(std::binary_search(ids.begin(), ids.end(), *o.seq_id), USAGE,
              "seq_id " << *o.seq_id << ": the state file holds sequence(s) " << (ids.empty() ? "none" : list(ids)));
    c.seq = o.seq_id;
  } else if (ids.size() == 1) {
    c.seq = ids[0];
  } else if (ids.size() > 1) {
    return std::nullopt;
  }
  for (uint32_t sec = 0; sec < f.sections.size(); ++sec)
    c.sections.push_back(c.seq ? section_rows(f, sec, *c.seq) : SectionRows{f.sections[sec].first_stream, {}, {}, {}});
  common_rows(f, c);
  return c;
}

// The dump's layers in model order: each the (section, layer within it) it is read from.
std::vector<std::pair<uint32_t, size_t>> layer_map(const StateFile& f) {
  std::vector<std::tuple<int64_t, uint32_t, size_t>> all;
  for (uint32_t s = 0; s < f.sections.size(); ++s)
    for (size_t i = 0; i < f.sections[s].layers.size(); ++i) all.emplace_back(f.sections[s].layers[i], s, i);
  std::sort(all.begin(), all.end());
  std::vector<std::pair<uint32_t, size_t>> m;
  for (const auto& [layer, s, i] : all) m.emplace_back(s, i);
  return m;
}

// Hadamard block sizes a layer's K and V are read with (0: not rotated), formats/llama-state.md
// "Rotation": llama.cpp rotates quantized caches in blocks of the largest power of two >= 64
// dividing head_dim (K) and of 64 (V), when head_dim is a multiple of 64.
struct Rotation {
  int64_t k = 0, v = 0;
};

Rotation rotation_for(const impl::StateStream& st, int64_t layer, const GgufModel* m, LlamaRotation r) {
  KVT_CHECK(m || r != LlamaRotation::on, USAGE,
            "llama_rotation on needs the model (gguf): its head_dim sets the rotation's block size");
  if (!m || r == LlamaRotation::off) return {};
  const bool quantized =
      st.k[static_cast<size_t>(layer)].type.quantized || st.v[static_cast<size_t>(layer)].type.quantized;
  KVT_CHECK(quantized || r != LlamaRotation::on, USAGE,
            "llama_rotation on: layer " << layer << "'s K and V are " << st.k[static_cast<size_t>(layer)].type.name
                                        << "/" << st.v[static_cast<size_t>(layer)].type.name
                                        << ", and llama.cpp rotates only quantized caches");
  const bool fits = m->head_dim % 64 == 0;
  KVT_CHECK(fits || r != LlamaRotation::on, USAGE,
            "llama_rotation on: head_dim " << m->head_dim << " is not a multiple of 64, so llama.cpp never rotates it");
  if (!fits) return {};
  int64_t nk = 64;
  while (m->head_dim % (nk * 2) == 0) nk *= 2;
  Rotation rot;
  if (st.k[static_cast<size_t>(layer)].type.quantized) rot.k = nk;
  if (st.v[static_cast<size_t>(layer)].type.quantized) rot.v = 64;
  return rot;
}

// Layer `li` of a stream, the cells `cells`: K and V [cells, width] float32 each, un-rotated.
void read_layer(StateReader& rd, uint32_t stream, size_t li, const std::vector<uint32_t>& cells, const GgufModel* m,
                LlamaRotation r, std::vector<float>& k, std::vector<float>& v) {
  const auto& st = rd.file().streams[stream];
  rd.read_rows(st.k[li], st.cells, cells, k);
  rd.read_rows(st.v[li], st.cells, cells, v);
  const Rotation rot = rotation_for(st, static_cast<int64_t>(li), m, r);
  const auto n = static_cast<int64_t>(cells.size());
  if (rot.k) impl::unrotate_hadamard(k.data(), n, st.k[li].width, rot.k);
  if (rot.v) impl::unrotate_hadamard(v.data(), n, st.v[li].width, rot.v);
}

void add_health(LlamaHeadHealth& h, const float* x, int64_t rows, int64_t width, int64_t off, int64_t d, bool is_v) {
  int64_t& bad = is_v ? h.nonfinite_v : h.nonfinite_k;
  double& mx = is_v ? h.max_abs_v : h.max_abs_k;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < d; ++i) {
      const float y = x[t * width + off + i];
      if (!std::isfinite(y))
        ++bad;
      else
        mx = std::max(mx, static_cast<double>(std::fabs(y)));
    }
}

void fill_sections(LlamaStateInspection& s, const StateFile& f, const Chosen& c) {
  for (size_t i = 0; i < f.sections.size(); ++i) {
    const SectionRows& r = c.sections[i];
    LlamaStateInspection::Section sec{
        f.sections[i].name, f.sections[i].layers, f.sections[i].streams, static_cast<int64_t>(r.all.size()), 0, 0};
    if (!r.all.empty()) sec.pos_min = r.all.front(), sec.pos_max = r.all.back();
    s.sections.push_back(sec);
  }
  for (const auto* cell : c.cells) s.image_cells += cell->ext && (cell->x != cell->pos || cell->y != cell->pos);
}

void fill_structure(LlamaStateInspection& s, const StateFile& f, const std::optional<Chosen>& c) {
  s.magic = f.magic;
  s.version = f.version;
  s.blob_seq_id = f.blob_seq;
  s.arch = f.arch;
  s.file_bytes = static_cast<int64_t>(f.file_bytes);
  s.n_tokens = static_cast<int64_t>(f.tokens.size());
  s.streams = static_cast<int64_t>(f.streams.size());
  s.cells = static_cast<int64_t>(f.cells.size());
  s.seq_ids = sequence_ids(f);
  s.recurrent_cells = f.recurrent.cells, s.recurrent_entries = f.recurrent.entries;
  s.recurrent_bytes = static_cast<int64_t>(f.recurrent.bytes);
  if (!c || c->positions.empty()) return;
  s.seq_id = c->seq;
  fill_sections(s, f, *c);
  s.rows = static_cast<int64_t>(c->positions.size());
  s.pos_min = c->positions.front();
  s.pos_max = c->positions.back();
  s.gaps = s.pos_max - s.pos_min + 1 - s.rows;
  s.cells_in_order = true;
  for (const SectionRows& r : c->sections)
    s.cells_in_order = s.cells_in_order && std::is_sorted(r.cells.begin(), r.cells.end());
  s.v_trans = f.streams[c->sections.front().stream].v_trans;
  for (const auto& [sec, li] : layer_map(f)) {
    const auto& st = f.streams[c->sections[sec].stream];
    const impl::StateTensor &k = st.k[li], &v = st.v[li];
    s.layers.push_back({f.sections[sec].layers[li], k.type.name, v.type.name, k.width / k.type.block * k.type.bytes,
                        v.width / v.type.block * v.type.bytes, k.width, v.width});
  }
}

// Health over each K/V cache's own rows of the sequence (an iSWA cache's full-attention layers
// over every position they hold, not only the window's).
LlamaStateInspection inspect_opened(StateReader& rd, const std::string& path, const GgufModel* m,
                                    const LlamaStateOptions& o, const std::optional<Chosen>& c) {
  LlamaStateInspection s;
  s.path = path;
  s.model = m ? m->path : "";
  if (m) s.memory = m->memory, s.cell_ext = m->cell_ext;
  fill_structure(s, rd.file(), c);
  if (!c || c->positions.empty()) return s;
  const int64_t heads = m ? m->kv_heads : 1;
  const StateFile& f = rd.file();
  std::vector<float> k, v;
  for (const auto& [sec, li] : layer_map(f)) {
    const SectionRows& r = c->sections[sec];
    const auto& st = f.streams[r.stream];
    const int64_t layer = f.sections[sec].layers[li], n = static_cast<int64_t>(r.cells.size());
    read_layer(rd, r.stream, li, r.cells, m, o.rotation, k, v);
    const Rotation rot = rotation_for(st, static_cast<int64_t>(li), m, o.rotation);
    s.rotated = s.rotated || rot.k || rot.v;
    const int64_t dk = st.k[li].width / heads, dv = st.v[li].width / heads;
    for (int64_t h = 0; h < heads; ++h) {
      LlamaHeadHealth hh{layer, h, 0, 0, 0, 0};
      add_health(hh, k.data(), n, st.k[li].width, h * dk, dk, false);
      add_health(hh, v.data(), n, st.v[li].width, h * dv, dv, true);
      s.health.push_back(hh);
    }
  }
  return s;
}

Chosen require_sequence(const StateFile& f, const LlamaStateOptions& o) {
  auto c = choose(f, o);
  KVT_CHECK(c, USAGE, "the state file holds sequences " << list(sequence_ids(f)) << "; choose one with seq_id");
  KVT_CHECK(!c->positions.empty(), SHAPE_MISMATCH,
            "the state file holds no cells"
                << (c->sections.size() > 1 ? " at positions every cache of the sequence holds" : " (an empty cache)"));
  // An M-RoPE cell whose x or y is not its position (an image token) was turned by three position
  // streams: its K is not a 1-D RoPE row, and its true position is not one number.
  for (const auto* cell : c->cells)
    KVT_CHECK(!cell->ext || (cell->x == cell->pos && cell->y == cell->pos), UNSUPPORTED_CACHE,
              "the cell at position " << cell->pos << " has the M-RoPE position (x " << cell->x << ", y " << cell->y
                                      << "): an image token, whose K is not turned by one position; kvtool imports "
                                      << "text cells only");
  return *c;
}

}  // namespace

LlamaRotation parse_llama_rotation(const std::string& s) {
  if (s == "auto") return LlamaRotation::automatic;
  if (s == "on") return LlamaRotation::on;
  if (s == "off") return LlamaRotation::off;
  KVT_THROW(USAGE, "llama_rotation '" << excerpt(s) << "': expected auto, on or off");
}

bool looks_like_llama_state(const std::string& path) {
  struct stat st {};  // a FIFO would block the read: only regular files are probed
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) return false;
  uint8_t b[4] = {};
  const bool ok = std::fread(b, 1, 4, fp) == 4;
  std::fclose(fp);
  const uint32_t m = uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
  return ok && (m == 0x67677371u || m == 0x6767736eu || m == 0xaf143cd8u);
}

LlamaStateInspection inspect_llama_state(const std::string& path, const GgufModel* model, const LlamaStateOptions& o) {
  StateReader rd(path, model);
  return inspect_opened(rd, path, model, o, choose(rd.file(), o));
}

json LlamaStateInspection::to_json() const {
  json layers_j = json::array(), health_j = json::array();
  for (const auto& l : layers)
    layers_j.push_back({{"layer", l.layer},
                        {"k_type", l.k_type},
                        {"v_type", l.v_type},
                        {"k_row_bytes", l.k_row_bytes},
                        {"v_row_bytes", l.v_row_bytes},
                        {"k_width", l.k_width},
                        {"v_width", l.v_width}});
  for (const auto& h : health)
    health_j.push_back({{"layer", h.layer},
                        {"head", h.head},
                        {"nonfinite_k", h.nonfinite_k},
                        {"nonfinite_v", h.nonfinite_v},
                        {"max_abs_k", h.max_abs_k},
                        {"max_abs_v", h.max_abs_v}});
  json j{{"path", path},
         {"format", "llama.cpp-state"},
         {"magic", magic},
         {"version", version},
         {"file_bytes", file_bytes},
         {"tokens", n_tokens},
         {"streams", streams},
         {"cells", cells},
         {"seq_ids", seq_ids},
         {"rows", rows},
         {"pos_min", pos_min},
         {"pos_max", pos_max},
         {"gaps", gaps},
         {"cells_in_order", cells_in_order},
         {"v_trans", v_trans},
         {"rotated", rotated},
         {"layers", layers_j},
         {"health", health_j},
         {"model", model.empty() ? json(nullptr) : json(model)}};
  if (magic == "blob") j["blob_seq_id"] = blob_seq_id;
  j["memory"] = memory;
  json sections_j = json::array();
  for (const auto& x : sections)
    sections_j.push_back({{"name", x.name},
                          {"layers", x.layers},
                          {"streams", x.streams},
                          {"rows", x.rows},
                          {"pos_min", x.pos_min},
                          {"pos_max", x.pos_max}});
  j["sections"] = sections_j;
  if (memory == "hybrid")
    j["recurrent"] = {
        {"cells", recurrent_cells}, {"entries", recurrent_entries}, {"bytes", recurrent_bytes}, {"read", false}};
  if (cell_ext) j["image_cells"] = image_cells;
  if (!arch.empty()) j["arch"] = arch;
  j["seq_id"] = seq_id ? json(*seq_id) : json(nullptr);
  return j;
}

double default_state_tolerance(const std::string& t) {
  if (t == "f32" || t == "f16") return 1e-2;
  return 1e-1;  // bf16, q8_0
}

namespace {

DType default_dtype(const LlamaLayerInfo& l) {
  if (l.k_type != l.v_type) return DType::f32;
  return l.k_type == "f16" ? DType::f16 : l.k_type == "bf16" ? DType::bf16 : DType::f32;
}

// [rows, H*d] -> H slices [rows, d] (the layout of KvSnapshot::read_kv).
void split_heads(const std::vector<float>& x, int64_t rows, int64_t H, int64_t d, std::vector<float>& out) {
  out.resize(x.size());
  for (int64_t h = 0; h < H; ++h)
    for (int64_t t = 0; t < rows; ++t) std::copy_n(x.data() + t * H * d + h * d, d, out.data() + (h * rows + t) * d);
}

// The queries of o.q_path ([L, heads, T_q, d] floats) and the row of each (o.q_positions_path holds
// positions, mapped to rows of the sorted sequence).
struct Queries {
  std::unique_ptr<TensorFile> file;
  int64_t count = 0;
  std::vector<int64_t> rows;
};

Queries open_queries(const LlamaStateOptions& o, const GgufModel& m, const Chosen& c, int64_t layers) {
  Queries q;
  if (o.q_path.empty()) {
    KVT_CHECK(o.q_positions_path.empty(), USAGE, "q_positions needs q");
    return q;
  }
  q.file = std::make_unique<TensorFile>(o.q_path);
  KVT_CHECK(q.file->tensors().size() == 1, USAGE, "q '" << o.q_path << "' must hold one tensor");
  const TensorInfo& t = q.file->tensors()[0];
  KVT_CHECK(t.shape.size() == 4 && t.shape[0] == layers && t.shape[1] == m.heads && t.shape[3] == m.head_dim &&
                t.shape[2] >= 1,
            SHAPE_MISMATCH,
            "q '" << o.q_path << "' has shape " << json(t.shape).dump() << "; expected [" << layers << ", " << m.heads
                  << ", T_q, " << m.head_dim << "] (layers, query heads, rows, head_dim)");
  q.count = t.shape[2];
  const auto T = static_cast<int64_t>(c.positions.size());
  std::vector<int64_t> pos(static_cast<size_t>(q.count));
  if (o.q_positions_path.empty()) {
    KVT_CHECK(q.count <= T, USAGE, q.count << " query rows but " << T << " cache rows; give q_positions");
    for (int64_t i = 0; i < q.count; ++i)
      pos[static_cast<size_t>(i)] = c.positions[static_cast<size_t>(T - q.count + i)];
  } else {
    TensorFile pf(o.q_positions_path);
    KVT_CHECK(pf.tensors().size() == 1 && pf.tensors()[0].elements == q.count, SHAPE_MISMATCH,
              "q_positions '" << o.q_positions_path << "' must be one tensor of " << q.count << " positions");
    pf.read_i64(0, 0, q.count, pos.data());
  }
  for (int64_t p : pos) {
    auto it = std::lower_bound(c.positions.begin(), c.positions.end(), p);
    KVT_CHECK(it != c.positions.end() && *it == p, BAD_ATTRIBUTE,
              "query position " << p << " is not a position of the sequence");
    q.rows.push_back(it - c.positions.begin());
  }
  return q;
}

// Token ids a dump may record: llama.cpp's ids are [0, n_vocab) (the GGUF's tokenizer.ggml.tokens).
void check_token_ids(const std::vector<int64_t>& tokens, int64_t vocab) {
  for (size_t i = 0; i < tokens.size(); ++i)
    KVT_CHECK(
        tokens[i] >= 0 && (vocab == 0 || tokens[i] < vocab), BAD_STATE_FILE,
        "token " << tokens[i] << " at row " << i << " is outside the model's vocabulary "
                 << (vocab ? "of " + std::to_string(vocab) + " tokens" : std::string("(ids are never negative)")));
}

// The token of each row, when the file says (formats/llama-state.md): an M-RoPE cell carries its
// own; otherwise a file of one sequence whose token list has one token per cell of its first cache
// (what llama_state_seq_save_file writes for a prompt) gives the i-th cell by position tokens[i].
std::vector<int64_t> row_tokens(const StateFile& f, const Chosen& c, bool one_sequence) {
  std::vector<int64_t> t;
  if (!c.cells.empty() &&
      std::all_of(c.cells.begin(), c.cells.end(), [](const impl::StateCell* x) { return x->ext && x->token >= 0; })) {
    for (const auto* x : c.cells) t.push_back(x->token);
    return t;
  }
  const std::vector<int64_t>& all = c.sections.front().all;
  if (!one_sequence || f.tokens.size() != all.size()) return t;
  for (int64_t p : c.positions)
    t.push_back(f.tokens[static_cast<size_t>(std::lower_bound(all.begin(), all.end(), p) - all.begin())]);
  return t;
}

// A state file's chosen sequence as a KvSnapshot (rows in position order, their true positions,
// the file's tokens when they are this sequence's, one per row; formats/llama-state.md).
class LlamaStateSnapshot final : public KvSnapshot {
 public:
  LlamaStateSnapshot(const std::string& path, GgufModel m, const LlamaStateOptions& o)
      : m_(std::move(m)), o_(o), rd_(path, &m_), c_(require_sequence(rd_.file(), o)) {
    const StateFile& f = rd_.file();
    LlamaStateInspection s;
    fill_structure(s, f, c_);
    map_ = layer_map(f);
    for (const auto& [sec, li] : map_) layers_.push_back(f.sections[sec].layers[li]);
    q_ = open_queries(o, m_, c_, static_cast<int64_t>(map_.size()));
    DumpGeometry& geo = info_.geo;
    geo.layers = static_cast<int64_t>(map_.size());
    geo.kv_heads = m_.kv_heads;
    geo.head_dim = m_.head_dim;
    geo.tokens = s.rows;
    geo.q_tokens = q_.count;
    geo.dtype = default_dtype(s.layers.front());
    info_.q_heads = m_.heads;
    info_.positions = c_.positions;
    info_.q_rows = q_.rows;
    info_.tokens = row_tokens(f, c_, s.seq_ids.size() == 1);
    check_token_ids(info_.tokens, m_.vocab_size);
    info_.format = "llama.cpp " + f.magic;
    const LlamaLayerInfo& l0 = s.layers.front();
    info_.source_dtype = l0.k_type == l0.v_type ? l0.k_type : l0.k_type + "/" + l0.v_type;
  }
  const SnapshotInfo& info() const override { return info_; }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override {
    const auto [sec, li] = map_.at(static_cast<size_t>(layer));
    read_layer(rd_, c_.sections[sec].stream, li, c_.sections[sec].rows, &m_, o_.rotation, rows_k_, rows_v_);
    split_heads(rows_k_, info_.geo.tokens, m_.kv_heads, m_.head_dim, k);
    split_heads(rows_v_, info_.geo.tokens, m_.kv_heads, m_.head_dim, v);
  }
  void read_q(int64_t layer, std::vector<float>& q) override {
    q.resize(static_cast<size_t>(m_.heads * q_.count * m_.head_dim));
    q_.file->read_f32(0, layer * static_cast<int64_t>(q.size()), static_cast<int64_t>(q.size()), q.data());
  }
  std::string label(char what, int64_t layer) const override {
    if (what == 'Q') return "q";
    const int64_t model_layer = layers_.at(static_cast<size_t>(layer));
    return model_layer == layer ? std::string(1, what)
                                : std::string(1, what) + " (model layer " + std::to_string(model_layer) + ")";
  }
  // model_artifact_sha256 defaults to the GGUF file's SHA-256 and rope_config to its RoPE keys.
  void complete_meta(json& meta) const override {
    const StateFile& f = rd_.file();
    if (!meta.contains("model_artifact_sha256")) meta["model_artifact_sha256"] = model_sha256(m_.path);
    if (!meta.contains("rope_config")) {
      const std::string rope = m_.rope_config();
      KVT_CHECK(!rope.empty(), MISSING_ATTRIBUTE,
                "kvtool does not know the RoPE pairing of architecture '" << m_.arch << "'; give rope_config in meta");
      meta["rope_config"] = rope;
    }
    // A hybrid model's dump holds its attention layers only: the generator names them.
    std::string layers;
    if (static_cast<int64_t>(layers_.size()) != m_.layers)
      layers = "; dump layers = model layers " + json(layers_).dump() + ", the attention layers of a hybrid model";
    if (!meta.contains("generator"))
      meta["generator"] = "kvtool import (llama.cpp " + f.magic + " v" + std::to_string(f.version) + layers + ")";
  }

 private:
  GgufModel m_;
  LlamaStateOptions o_;
  StateReader rd_;
  Chosen c_;
  std::vector<std::pair<uint32_t, size_t>> map_;  // dump layer -> (section, layer in it)
  std::vector<int64_t> layers_;                   // dump layer -> model layer
  Queries q_;
  SnapshotInfo info_;
  std::vector<float> rows_k_, rows_v_;
};

// A state file carries its own layout: the tensor-file options would be silently ignored.
void refuse_tensor_options(const SnapshotRequest& r) {
  TensorLayoutOptions plain;
  plain.q = r.tensors.q;
  plain.q_positions = r.tensors.q_positions;
  const std::string& path = r.inputs.front();
  KVT_CHECK(r.tensors == plain, USAGE,
            "'" << path << "' is a llama.cpp state file: tensor-file options (--layout, --tokens, --positions, "
                << "--block-table, scales, --q-layout) do not apply; see formats/llama-state.md");
}

}  // namespace

std::unique_ptr<KvSnapshot> open_llama_state_snapshot(const SnapshotRequest& r) {
  KVT_CHECK(r.inputs.size() == 1, USAGE,
            "a llama.cpp state file is read alone; " << r.inputs.size() << " inputs given");
  const std::string& path = r.inputs.front();
  KVT_CHECK(!r.gguf.empty(), USAGE,
            "'" << path << "' is a llama.cpp state file: give the model's GGUF with --gguf (layers, heads, head_dim "
                << "and RoPE are not in the state file)");
  refuse_tensor_options(r);
  GgufModel m = read_gguf_model(r.gguf);
  LlamaStateOptions o = r.llama;
  if (!r.tensors.q.empty()) o.q_path = r.tensors.q;
  if (!r.tensors.q_positions.empty()) o.q_positions_path = r.tensors.q_positions;
  return std::make_unique<LlamaStateSnapshot>(path, std::move(m), o);
}

}  // namespace kvtool
