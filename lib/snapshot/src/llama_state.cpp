// The llama.cpp state-file reader (kvtool/llama_state.h, formats/llama-state.md): a sequence's cells
// chosen and sorted into position order, a layer's K and V decoded (and un-rotated) at a time, for
// inspect and, as a KvSnapshot, for import and verify.
#include "kvtool/llama_state.h"

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

// The rows of one sequence: stream cell indices sorted by position.
struct Chosen {
  std::optional<int32_t> seq;
  uint32_t stream = 0;
  std::vector<uint32_t> rows;
  std::vector<int64_t> positions;
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
  std::vector<std::pair<int64_t, uint32_t>> rows;  // (position, cell index in its stream)
  std::optional<uint32_t> stream;
  for (const auto& cell : f.cells) {
    if (!c.seq || std::find(cell.seqs.begin(), cell.seqs.end(), *c.seq) == cell.seqs.end()) continue;
    KVT_CHECK(!stream || *stream == cell.stream, BAD_STATE_FILE,
              "sequence " << *c.seq << " has cells in two streams (" << *stream << " and " << cell.stream << ")");
    KVT_CHECK(cell.pos >= 0, BAD_STATE_FILE, "sequence " << *c.seq << " has a cell at negative position " << cell.pos);
    stream = cell.stream;
    rows.emplace_back(cell.pos, cell.index);
  }
  std::sort(rows.begin(), rows.end());
  for (size_t i = 1; i < rows.size(); ++i)
    KVT_CHECK(rows[i].first != rows[i - 1].first, BAD_STATE_FILE,
              "sequence " << *c.seq << " has two cells at position " << rows[i].first);
  c.stream = stream.value_or(0);
  for (const auto& [p, i] : rows) {
    c.positions.push_back(p);
    c.rows.push_back(i);
  }
  return c;
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

// One layer's K and V of the chosen rows, [rows, width] float32 each, un-rotated.
void read_layer(StateReader& rd, const Chosen& c, int64_t layer, const GgufModel* m, LlamaRotation r,
                std::vector<float>& k, std::vector<float>& v) {
  const auto& st = rd.file().streams[c.stream];
  const auto& kt = st.k[static_cast<size_t>(layer)];
  const auto& vt = st.v[static_cast<size_t>(layer)];
  rd.read_rows(kt, st.cells, c.rows, k);
  rd.read_rows(vt, st.cells, c.rows, v);
  const Rotation rot = rotation_for(st, layer, m, r);
  const auto n = static_cast<int64_t>(c.rows.size());
  if (rot.k) impl::unrotate_hadamard(k.data(), n, kt.width, rot.k);
  if (rot.v) impl::unrotate_hadamard(v.data(), n, vt.width, rot.v);
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
  if (!c || c->rows.empty()) return;
  s.seq_id = c->seq;
  s.rows = static_cast<int64_t>(c->rows.size());
  s.pos_min = c->positions.front();
  s.pos_max = c->positions.back();
  s.gaps = s.pos_max - s.pos_min + 1 - s.rows;
  s.cells_in_order = std::is_sorted(c->rows.begin(), c->rows.end());
  const auto& st = f.streams[c->stream];
  s.v_trans = st.v_trans;
  for (size_t l = 0; l < st.k.size(); ++l)
    s.layers.push_back({st.k[l].type.name, st.v[l].type.name, st.k[l].width / st.k[l].type.block * st.k[l].type.bytes,
                        st.v[l].width / st.v[l].type.block * st.v[l].type.bytes, st.k[l].width, st.v[l].width});
}

LlamaStateInspection inspect_opened(StateReader& rd, const std::string& path, const GgufModel* m,
                                    const LlamaStateOptions& o, const std::optional<Chosen>& c) {
  LlamaStateInspection s;
  s.path = path;
  s.model = m ? m->path : "";
  fill_structure(s, rd.file(), c);
  if (!c || c->rows.empty()) return s;
  const auto& st = rd.file().streams[c->stream];
  const int64_t heads = m ? m->kv_heads : 1;
  std::vector<float> k, v;
  for (int64_t l = 0; l < static_cast<int64_t>(st.k.size()); ++l) {
    read_layer(rd, *c, l, m, o.rotation, k, v);
    const Rotation rot = rotation_for(st, l, m, o.rotation);
    s.rotated = s.rotated || rot.k || rot.v;
    const int64_t dk = st.k[static_cast<size_t>(l)].width / heads, dv = st.v[static_cast<size_t>(l)].width / heads;
    for (int64_t h = 0; h < heads; ++h) {
      LlamaHeadHealth hh{l, h, 0, 0, 0, 0};
      add_health(hh, k.data(), s.rows, st.k[static_cast<size_t>(l)].width, h * dk, dk, false);
      add_health(hh, v.data(), s.rows, st.v[static_cast<size_t>(l)].width, h * dv, dv, true);
      s.health.push_back(hh);
    }
  }
  return s;
}

Chosen require_sequence(const StateFile& f, const LlamaStateOptions& o) {
  auto c = choose(f, o);
  KVT_CHECK(c, USAGE, "the state file holds sequences " << list(sequence_ids(f)) << "; choose one with seq_id");
  KVT_CHECK(!c->rows.empty(), SHAPE_MISMATCH, "the state file holds no cells (an empty cache)");
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
    layers_j.push_back({{"k_type", l.k_type},
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

Queries open_queries(const LlamaStateOptions& o, const GgufModel& m, const Chosen& c) {
  Queries q;
  if (o.q_path.empty()) {
    KVT_CHECK(o.q_positions_path.empty(), USAGE, "q_positions needs q");
    return q;
  }
  q.file = std::make_unique<TensorFile>(o.q_path);
  KVT_CHECK(q.file->tensors().size() == 1, USAGE, "q '" << o.q_path << "' must hold one tensor");
  const TensorInfo& t = q.file->tensors()[0];
  KVT_CHECK(t.shape.size() == 4 && t.shape[0] == m.layers && t.shape[1] == m.heads && t.shape[3] == m.head_dim &&
                t.shape[2] >= 1,
            SHAPE_MISMATCH,
            "q '" << o.q_path << "' has shape " << json(t.shape).dump() << "; expected [" << m.layers << ", " << m.heads
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

// A state file's chosen sequence as a KvSnapshot (rows in position order, their true positions,
// the file's tokens when they are this sequence's, one per row; formats/llama-state.md).
class LlamaStateSnapshot final : public KvSnapshot {
 public:
  LlamaStateSnapshot(const std::string& path, GgufModel m, const LlamaStateOptions& o)
      : m_(std::move(m)), o_(o), rd_(path, &m_), c_(require_sequence(rd_.file(), o)) {
    const StateFile& f = rd_.file();
    LlamaStateInspection s;
    fill_structure(s, f, c_);
    q_ = open_queries(o, m_, c_);
    DumpGeometry& geo = info_.geo;
    geo.layers = m_.layers;
    geo.kv_heads = m_.kv_heads;
    geo.head_dim = m_.head_dim;
    geo.tokens = s.rows;
    geo.q_tokens = q_.count;
    geo.dtype = default_dtype(s.layers.front());
    info_.q_heads = m_.heads;
    info_.positions = c_.positions;
    info_.q_rows = q_.rows;
    // Tokens only when the file's list is this sequence's, one per row (formats/llama-state.md).
    if (s.seq_ids.size() == 1 && static_cast<int64_t>(f.tokens.size()) == s.rows) {
      info_.tokens.assign(f.tokens.begin(), f.tokens.end());
      check_token_ids(info_.tokens, m_.vocab_size);
    }
    info_.format = "llama.cpp " + f.magic;
    const LlamaLayerInfo& l0 = s.layers.front();
    info_.source_dtype = l0.k_type == l0.v_type ? l0.k_type : l0.k_type + "/" + l0.v_type;
  }
  const SnapshotInfo& info() const override { return info_; }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override {
    read_layer(rd_, c_, layer, &m_, o_.rotation, rows_k_, rows_v_);
    split_heads(rows_k_, info_.geo.tokens, m_.kv_heads, m_.head_dim, k);
    split_heads(rows_v_, info_.geo.tokens, m_.kv_heads, m_.head_dim, v);
  }
  void read_q(int64_t layer, std::vector<float>& q) override {
    q.resize(static_cast<size_t>(m_.heads * q_.count * m_.head_dim));
    q_.file->read_f32(0, layer * static_cast<int64_t>(q.size()), static_cast<int64_t>(q.size()), q.data());
  }
  std::string label(char what, int64_t) const override { return what == 'Q' ? std::string("q") : std::string(1, what); }
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
    if (!meta.contains("generator"))
      meta["generator"] = "kvtool import (llama.cpp " + f.magic + " v" + std::to_string(f.version) + ")";
  }

 private:
  GgufModel m_;
  LlamaStateOptions o_;
  StateReader rd_;
  Chosen c_;
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
