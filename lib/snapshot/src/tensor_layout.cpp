// The "tensors" reader of kvtool/snapshot.h (kvtool/tensor_layout.h, man/kvtool-import.1): tensors
// named by references and a --layout, read one layer at a time. The layout names the axes of the K/V (and
// query) tensors in storage order:
//   L   layers (absent: one tensor per layer, the reference has a {layer} placeholder)
//   2   K (index 0) and V (index 1) stacked in one tensor (vLLM's per-layer kv_cache)
//   H   KV heads (query heads in a query tensor)
//   T   rows / tokens (query rows in a query tensor)
//   d   head dimension
//   Hd  heads and head dim merged (H outer), split by --kv-heads or --head-dim
//   B   a batch axis; --batch-index chooses the sequence
//   N   blocks of a paged cache (vLLM's num_blocks), with
//   S   the slot within a block (block_size): token t is at block table[t / S], slot t % S
//   X   flat slots (SGLang's per-layer pool [size, H, d]): token t is at slot mapping[t]
// Paged layouts replace T by N,S or X and are gathered in token order through --block-table or
// --slot-mapping; formats/paged-caches.md names the vLLM and SGLang versions they follow.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include "impl/readers.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/json.h"
#include "kvtool/paged_layout.h"
#include "kvtool/tensor_file.h"

namespace kvtool {

namespace {

enum class Ax { L, KV, H, T, D, HD, B, N, S, X };

const char* axis_name(Ax a) {
  static const char* names[] = {"L", "2", "H", "T", "d", "Hd", "B", "N", "S", "X"};
  return names[static_cast<int>(a)];
}

bool has_axis(const std::vector<Ax>& layout, Ax a) { return std::count(layout.begin(), layout.end(), a) > 0; }
bool is_paged(const std::vector<Ax>& layout) { return has_axis(layout, Ax::N) || has_axis(layout, Ax::X); }

std::vector<Ax> parse_layout(const std::string& text, bool allow_kv, bool allow_paged, const std::string& option) {
  std::vector<Ax> axes;
  for (const std::string& a : parse_cache_layout(text, allow_kv, allow_paged, option)) {
    int k = 0;
    while (a != axis_name(static_cast<Ax>(k))) ++k;  // a canonical name of kvtool/paged_layout.h
    axes.push_back(static_cast<Ax>(k));
  }
  return axes;
}

bool regular_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string replace_layer(std::string s, int64_t layer) {
  for (size_t at; layer >= 0 && (at = s.find("{layer}")) != std::string::npos;) s.replace(at, 7, std::to_string(layer));
  return s;
}

struct Ref {
  const TensorFile* file = nullptr;
  int64_t index = -1;
  std::string label;  // for messages: "'k' in 'k.npy'"
  const TensorInfo& info() const { return file->tensors()[static_cast<size_t>(index)]; }
};

// The files named by INPUT arguments and by PATH:NAME references, each opened (and its headers
// checked) once.
class Sources {
 public:
  explicit Sources(const std::vector<std::string>& inputs) {
    for (const auto& p : inputs) {
      TensorFile* f = &open(p);
      if (std::find(inputs_.begin(), inputs_.end(), f) == inputs_.end()) inputs_.push_back(f);
    }
  }
  // The tensor `ref` names (after {layer} substitution); nullopt when absent.
  std::optional<Ref> resolve(const std::string& ref_text, int64_t layer) {
    const std::string ref = replace_layer(ref_text, layer);
    if (regular_file(ref)) return single(open(ref), ref);
    const size_t colon = ref.rfind(':');
    if (colon != std::string::npos && regular_file(ref.substr(0, colon))) {
      TensorFile& f = open(ref.substr(0, colon));
      const std::string name = ref.substr(colon + 1);
      if (name.empty()) return single(f, ref);
      const int64_t i = f.find(name);
      if (i < 0) return std::nullopt;
      return Ref{&f, i, "'" + name + "' in '" + f.path() + "'"};
    }
    std::optional<Ref> found;
    for (TensorFile* f : inputs_) {
      const int64_t i = f->find(ref);
      if (i < 0) continue;
      KVT_CHECK(!found, USAGE,
                "tensor '" << ref << "' is in both '" << found->file->path() << "' and '" << f->path()
                           << "'; name it as PATH:NAME");
      found = Ref{f, i, "'" + ref + "' in '" + f->path() + "'"};
    }
    return found;
  }
  Ref require(const std::string& ref, int64_t layer, const std::string& option) {
    auto r = resolve(ref, layer);
    if (r) return *r;
    std::string names;
    int shown = 0;
    for (TensorFile* f : inputs_)
      for (const auto& t : f->tensors())
        if (shown++ < 12) names += (names.empty() ? "" : ", ") + t.name;
    KVT_THROW(USAGE, option << " '" << replace_layer(ref, layer) << "' names no tensor"
                            << (inputs_.empty() ? std::string(" (no INPUT files were given)")
                                                : "; the inputs hold: " + names));
  }
  std::string formats() const {
    std::set<std::string> s;
    for (const auto& [p, f] : files_) s.insert(f->format());
    std::string r;
    for (const auto& x : s) r += (r.empty() ? "" : ",") + x;
    return r;
  }

 private:
  TensorFile& open(const std::string& p) {
    auto& slot = files_[p];
    if (!slot) slot = std::make_unique<TensorFile>(p);
    return *slot;
  }
  static Ref single(const TensorFile& f, const std::string& ref) {
    KVT_CHECK(f.tensors().size() == 1, USAGE,
              "'" << ref << "' holds " << f.tensors().size() << " tensors; name one as PATH:NAME");
    return Ref{&f, 0, "'" + f.tensors()[0].name + "' in '" + f.path() + "'"};
  }
  std::map<std::string, std::unique_ptr<TensorFile>> files_;
  std::vector<TensorFile*> inputs_;
};

// A tensor seen through a layout: the axes with Hd split into H and d.
struct Bound {
  Ref ref;
  std::vector<Ax> axes;
  std::vector<int64_t> shape;
  TensorType fp8 = TensorType::other;  // f8_e4m3 / f8_e5m2: the tensor holds fp8 codes of that kind
  int64_t dim(Ax a) const {
    for (size_t i = 0; i < axes.size(); ++i)
      if (axes[i] == a) return shape[i];
    return -1;
  }
};

// Every axis non-empty and within the dump limits (formats/kvdump-v1.md): a zero-size axis makes the
// data-size check pass whatever the other axes claim, and the import loops over heads and layers.
void check_axis_sizes(const Bound& b) {
  for (size_t i = 0; i < b.axes.size(); ++i) {
    const Ax a = b.axes[i];
    const int64_t max = a == Ax::L   ? kMaxDumpLayers
                        : a == Ax::H ? kMaxDumpHeads
                        : a == Ax::D ? kMaxDumpHeadDim
                                     : kMaxDumpTokens;
    KVT_CHECK(
        b.shape[i] > 0 && b.shape[i] <= max, SHAPE_MISMATCH,
        "axis " << axis_name(a) << " of " << b.ref.label << " has " << b.shape[i] << " entries; it needs 1 to " << max);
  }
}

Bound bind_layout(const Ref& r, const std::vector<Ax>& layout, const TensorLayoutOptions& o,
                  const std::string& option) {
  const TensorInfo& t = r.info();
  KVT_CHECK(t.shape.size() == layout.size(), SHAPE_MISMATCH,
            "tensor " << r.label << " has shape " << json(t.shape).dump() << " (" << t.shape.size() << " axes); "
                      << option << " has " << layout.size() << " axes");
  Bound b{r, {}, {}, TensorType::other};
  for (size_t i = 0; i < layout.size(); ++i) {
    const int64_t n = t.shape[i];
    if (layout[i] != Ax::HD) {
      b.axes.push_back(layout[i]);
      b.shape.push_back(n);
      continue;
    }
    KVT_CHECK(o.kv_heads > 0 || o.head_dim > 0, USAGE, "the Hd axis needs kv_heads or head_dim to split it");
    const int64_t h = o.kv_heads > 0 ? o.kv_heads : (n % o.head_dim == 0 ? n / o.head_dim : 0);
    KVT_CHECK(h > 0 && n % h == 0 && (o.head_dim <= 0 || n / h == o.head_dim), SHAPE_MISMATCH,
              "axis Hd of " << r.label << " has " << n << " entries: not kv_heads x head_dim");
    b.axes.insert(b.axes.end(), {Ax::H, Ax::D});
    b.shape.insert(b.shape.end(), {h, n / h});
  }
  check_axis_sizes(b);
  const int64_t kv = b.dim(Ax::KV), batch = b.dim(Ax::B);
  KVT_CHECK(kv < 0 || kv == 2, SHAPE_MISMATCH, "axis 2 of " << r.label << " has " << kv << " entries, not 2 (K, V)");
  KVT_CHECK(batch < 0 || o.batch_index < batch, USAGE,
            "batch_index " << o.batch_index << " is outside the " << batch << " sequences of " << r.label);
  return b;
}

// A part of a bound tensor: the values at fixed coordinates (one per axis, -1 = free) with the
// free axes in storage order, and the strides of H, the row axis (T or S; 0 when fixed or absent)
// and d inside it.
struct Region {
  std::vector<float> data;
  int64_t sh = 0, sr = 0, sd = 0;
};

// The coordinates `extract` and `gather` fix: layer, K/V and batch; every other axis free.
std::vector<int64_t> fixed_at(const Bound& b, int64_t layer, int64_t kv, int64_t batch) {
  std::vector<int64_t> fixed(b.axes.size(), -1);
  for (size_t i = 0; i < b.axes.size(); ++i) {
    if (b.axes[i] == Ax::L) fixed[i] = layer;
    if (b.axes[i] == Ax::KV) fixed[i] = kv;
    if (b.axes[i] == Ax::B) fixed[i] = batch;
  }
  return fixed;
}

void read_run(const Bound& b, int64_t first, int64_t count, float* out) {
  if (b.fp8 != TensorType::other)
    b.ref.file->read_fp8(b.ref.index, first, count, b.fp8, out);
  else
    b.ref.file->read_f32(b.ref.index, first, count, out);
}

// Reads are runs of the trailing free axes, so a layout whose free axes come last is one read.
void read_region(const Bound& b, const std::vector<int64_t>& fixed, Region& r) {
  const size_t n = b.axes.size();
  std::vector<int64_t> stride(n, 1);
  for (size_t i = n - 1; i > 0; --i) stride[i - 1] = stride[i] * b.shape[i];
  int64_t total = 1;
  r.sh = r.sr = r.sd = 0;
  for (size_t i = n; i-- > 0;) {
    if (fixed[i] >= 0) continue;
    if (b.axes[i] == Ax::H) r.sh = total;
    if (b.axes[i] == Ax::T || b.axes[i] == Ax::S) r.sr = total;
    if (b.axes[i] == Ax::D) r.sd = total;
    total *= b.shape[i];
  }
  r.data.resize(static_cast<size_t>(total));
  if (total == 0) return;
  size_t run_from = n;  // trailing free axes: one contiguous run
  int64_t run = 1;
  while (run_from > 0 && fixed[run_from - 1] < 0) run *= b.shape[--run_from];
  // Short strided runs (an L or K/V axis after d, e.g. T,H,d,L) would cost a call per run and, for
  // a deflated .npz member, a new inflation per layer: the tensor is read once into memory instead
  // (within the read budget), so every layout imports in time linear in the file.
  constexpr int64_t kShortRun = 4096;
  if (run < kShortRun && total > run) b.ref.file->hold(b.ref.index, default_read_budget());
  std::vector<int64_t> idx(n, 0);
  int64_t pos = 0;
  while (true) {
    int64_t off = 0;
    for (size_t i = 0; i < run_from; ++i) off += (fixed[i] >= 0 ? fixed[i] : idx[i]) * stride[i];
    read_run(b, off, run, r.data.data() + pos);
    pos += run;
    size_t i = run_from;  // next outer coordinate (odometer over the free outer axes)
    while (i > 0 && (fixed[i - 1] >= 0 || ++idx[i - 1] == b.shape[i - 1])) {
      if (fixed[i - 1] < 0) idx[i - 1] = 0;
      --i;
    }
    if (i == 0) break;
  }
}

// Rows [src, src + rows) of a region into rows [dst, dst + rows) of the [H][T][d] block `out`.
void copy_rows(const Region& r, int64_t H, int64_t T, int64_t d, int64_t src, int64_t dst, int64_t rows, float* out) {
  for (int64_t h = 0; h < H; ++h)
    for (int64_t j = 0; j < rows; ++j) {
      float* o = out + (h * T + dst + j) * d;
      const float* p = r.data.data() + h * r.sh + (src + j) * r.sr;
      for (int64_t i = 0; i < d; ++i) o[i] = p[i * r.sd];
    }
}

// The [H][T][d] block of `b` at the fixed indices (layer, K/V, batch), into `out`.
void extract(const Bound& b, int64_t layer, int64_t kv, int64_t batch, std::vector<float>& out, Region& r) {
  const int64_t H = b.dim(Ax::H), T = b.dim(Ax::T), d = b.dim(Ax::D);
  read_region(b, fixed_at(b, layer, kv, batch), r);
  out.resize(static_cast<size_t>(H * T * d));
  copy_rows(r, H, T, d, 0, 0, T, out.data());
}

// The same from a paged tensor: token t is row slots[t] % S of block slots[t] / S (N,S layouts),
// or slot slots[t] (X layouts). A block is read once for the run of tokens it holds.
void gather(const Bound& b, const std::vector<int64_t>& slots, int64_t layer, int64_t kv, int64_t batch,
            std::vector<float>& out, Region& r) {
  const bool blocks = b.dim(Ax::N) >= 0;
  const int64_t per = blocks ? b.dim(Ax::S) : 1, H = b.dim(Ax::H), d = b.dim(Ax::D);
  const int64_t T = static_cast<int64_t>(slots.size());
  std::vector<int64_t> fixed = fixed_at(b, layer, kv, batch);
  const size_t unit_axis =
      static_cast<size_t>(std::find(b.axes.begin(), b.axes.end(), blocks ? Ax::N : Ax::X) - b.axes.begin());
  out.resize(static_cast<size_t>(H * T * d));
  int64_t cached = -1;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t unit = slots[static_cast<size_t>(t)] / per;
    if (unit != cached) {
      fixed[unit_axis] = unit;
      read_region(b, fixed, r);
      cached = unit;
    }
    copy_rows(r, H, T, d, slots[static_cast<size_t>(t)] % per, t, 1, out.data());
  }
}

// fp8 sources become f32: fp8 x scale needs more than the 3 or 2 mantissa bits fp8 had.
DType source_dtype(TensorType t) {
  return t == TensorType::f16 ? DType::f16 : t == TensorType::bf16 ? DType::bf16 : DType::f32;
}

bool is_fp8(TensorType t) { return t == TensorType::f8_e4m3 || t == TensorType::f8_e5m2; }

}  // namespace

namespace {

// The K and V tensors of every layer, bound to the layout; geometry checked to agree.
struct KvPlan {
  std::vector<Bound> k, v;  // per layer (the same tensor for every layer with an L axis)
  bool stacked = false;     // K and V on a 2 axis of one tensor
  int64_t layers = 0;
  std::vector<int64_t> slots;           // paged layouts: the slot of every token, in token order
  std::vector<float> k_scale, v_scale;  // fp8: per layer (empty: values are read as they are)
};

int64_t count_layers(Sources& src, const std::string& ref, int64_t given, const std::string& option) {
  if (ref.find("{layer}") == std::string::npos) {
    KVT_CHECK(given <= 1, USAGE, option << " '" << ref << "' has no {layer} placeholder, so it names one layer");
    return 1;
  }
  if (given > 0) return given;
  int64_t n = 0;
  while (n <= kMaxDumpLayers && src.resolve(ref, n)) ++n;
  KVT_CHECK(n > 0, USAGE, option << " '" << replace_layer(ref, 0) << "' (layer 0) names no tensor");
  return n;
}

KvPlan plan_kv(Sources& src, const TensorLayoutOptions& o, const std::vector<Ax>& layout) {
  KvPlan p;
  p.stacked = std::count(layout.begin(), layout.end(), Ax::KV) > 0;
  const bool has_l = std::count(layout.begin(), layout.end(), Ax::L) > 0;
  const std::string kref = p.stacked ? o.kv : o.k, kopt = p.stacked ? "kv" : "k";
  if (has_l) {
    p.k.push_back(bind_layout(src.require(kref, -1, kopt), layout, o, "layout"));
    p.v.push_back(p.stacked ? p.k.back() : bind_layout(src.require(o.v, -1, "v"), layout, o, "layout"));
    p.layers = p.k.back().dim(Ax::L);
    KVT_CHECK(o.layers <= 0 || o.layers == p.layers, SHAPE_MISMATCH,
              "layers " << o.layers << " but the L axis of " << p.k.back().ref.label << " has " << p.layers);
  } else {
    p.layers = count_layers(src, kref, o.layers, kopt);
    KVT_CHECK(p.layers <= kMaxDumpLayers, SHAPE_MISMATCH, "more than " << kMaxDumpLayers << " layers");
    for (int64_t l = 0; l < p.layers; ++l) {
      p.k.push_back(bind_layout(src.require(kref, l, kopt), layout, o, "layout"));
      p.v.push_back(p.stacked ? p.k.back() : bind_layout(src.require(o.v, l, "v"), layout, o, "layout"));
    }
  }
  const Bound& k0 = p.k.front();
  for (size_t l = 0; l < p.k.size(); ++l)
    for (const Bound* b : {&p.k[l], &p.v[l]})
      for (Ax a : {Ax::H, Ax::T, Ax::D, Ax::N, Ax::S, Ax::X})
        KVT_CHECK(b->dim(a) == k0.dim(a), SHAPE_MISMATCH,
                  "axis " << axis_name(a) << " of " << b->ref.label << " has " << b->dim(a) << " entries; "
                          << k0.ref.label << " has " << k0.dim(a));
  for (size_t l = 0; l < p.k.size(); ++l)
    KVT_CHECK(p.k[l].ref.info().type == k0.ref.info().type && p.v[l].ref.info().type == k0.ref.info().type,
              UNSUPPORTED_DTYPE,
              "K and V tensors have different dtypes (" << k0.ref.info().type_text << ", "
                                                        << p.v[l].ref.info().type_text << ")");
  // K and V read from one tensor without a 2 axis to tell them apart: what a single latent per
  // token (an MLA cache) would have to be imported as.
  KVT_CHECK(p.stacked || p.k[0].ref.file != p.v[0].ref.file || p.k[0].ref.index != p.v[0].ref.index, UNSUPPORTED_CACHE,
            "k and v name the same tensor " << k0.ref.label
                                            << ": a cache without separate K and V (an MLA latent) is not "
                                               "per-head K and V, which is all kvtool imports");
  return p;
}

// The first min(n, need) entries of one request's row of a block table or slot mapping, and n: a
// 1-D tensor, or row --batch-index of a 2-D [requests, n] one (vLLM's block_table tensor, SGLang's
// req_to_token). Entries past the tokens are padding and not read.
std::vector<int64_t> read_table_row(const Ref& r, const TensorLayoutOptions& o, const std::string& opt, int64_t need,
                                    int64_t& n) {
  const TensorInfo& t = r.info();
  KVT_CHECK(t.shape.size() == 1 || t.shape.size() == 2, SHAPE_MISMATCH,
            opt << " " << r.label << " has shape " << json(t.shape).dump() << "; expected [n] or [requests, n]");
  n = t.shape.back();
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  KVT_CHECK(t.shape.size() == 1 || o.batch_index < rows, USAGE,
            "batch_index " << o.batch_index << " is outside the " << rows << " rows of " << opt << " " << r.label);
  std::vector<int64_t> v(static_cast<size_t>(std::min(n, need)));
  r.file->read_i64(r.index, t.shape.size() == 2 ? o.batch_index * n : 0, static_cast<int64_t>(v.size()), v.data());
  return v;
}

// The slot of each of the request's --num-tokens tokens (kvtool/paged_layout.h).
std::vector<int64_t> token_slots(Sources& src, const TensorLayoutOptions& o, const Bound& k0) {
  const bool by_block = !o.block_table.empty(), blocks = k0.dim(Ax::N) >= 0;
  const PagedCache cache{blocks, blocks ? k0.dim(Ax::S) : 1, blocks ? k0.dim(Ax::N) : k0.dim(Ax::X), k0.ref.label};
  const int64_t need = paged_entries_needed(cache, by_block, o.num_tokens);
  const std::string opt = by_block ? "block_table" : "slot_mapping";
  const Ref r = src.require(by_block ? o.block_table : o.slot_mapping, -1, opt);
  int64_t n = 0;
  const std::vector<int64_t> ids = read_table_row(r, o, opt, need, n);
  return paged_token_slots(cache, by_block, ids, n, o.num_tokens, opt + " " + r.label);
}

// The paged options agree with the layout: a paged cache holds blocks in allocation order, so it
// is never read without the request's table, and a table never applies to a token-ordered layout.
void check_paged_options(const TensorLayoutOptions& o, bool paged) {
  const bool table = !o.block_table.empty(), mapping = !o.slot_mapping.empty();
  if (!paged) {
    KVT_CHECK(!table && !mapping && o.num_tokens == 0, USAGE,
              "block_table, slot_mapping and num_tokens apply to paged layouts (with N,S or X axes)");
    return;
  }
  KVT_CHECK(table || mapping, USAGE,
            "the paged layout '" << o.layout
                                 << "' needs block_table or slot_mapping: a paged cache holds blocks in "
                                    "allocation order, not token order");
  KVT_CHECK(!(table && mapping), USAGE, "give block_table or slot_mapping, not both");
  KVT_CHECK(o.num_tokens > 0, USAGE,
            "the paged layout '" << o.layout << "' needs num_tokens T > 0 (the request's tokens; a table "
                                 << "does not say how full its last block is)");
}

// Dequantization scales (vLLM's k_scale / v_scale: the cache stores value / scale, so value =
// fp8 x scale), one per layer: a number, a tensor of [L] or of one value, or per-layer tensors
// of one value ({layer}).
std::vector<float> read_scales(Sources& src, const std::string& text, int64_t layers, const std::string& opt) {
  std::vector<float> s;
  char* end = nullptr;
  const float f = std::strtof(text.c_str(), &end);
  // A decimal number only: strtof also reads hex ("0x10" as 16), "inf" and "nan", which no one
  // means as a scale; such text is taken as a tensor reference (and refused if it names none).
  const bool decimal = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (decimal && end == text.c_str() + text.size()) {
    s.assign(static_cast<size_t>(layers), f);
  } else if (text.find("{layer}") == std::string::npos) {
    const Ref r = src.require(text, -1, opt);
    const TensorInfo& t = r.info();
    KVT_CHECK((t.elements == 1 && t.shape.size() <= 1) || (t.shape.size() == 1 && t.elements == layers), SHAPE_MISMATCH,
              opt << " " << r.label << " has shape " << json(t.shape).dump()
                  << "; expected one value or one per layer [" << layers << "]");
    s.resize(static_cast<size_t>(t.elements));
    r.file->read_f32(r.index, 0, t.elements, s.data());
    if (t.elements == 1) s.assign(static_cast<size_t>(layers), s[0]);
  } else {
    for (int64_t l = 0; l < layers; ++l) {
      const Ref r = src.require(text, l, opt);
      KVT_CHECK(r.info().elements == 1 && r.info().shape.size() <= 1, SHAPE_MISMATCH,
                opt << " " << r.label << " has shape " << json(r.info().shape).dump() << "; expected one value");
      s.push_back(0.f);
      r.file->read_f32(r.index, 0, 1, &s.back());
    }
  }
  for (size_t l = 0; l < s.size(); ++l)
    KVT_CHECK(std::isfinite(s[l]) && s[l] > 0, BAD_ATTRIBUTE,
              opt << " is " << s[l] << " at layer " << l << "; a scale is a positive finite number");
  return s;
}

// fp8 K/V (vLLM kv_cache_dtype fp8_e4m3 / fp8_e5m2; SGLang keeps them as uint8): marks the bound
// tensors and reads the scales, without which the codes are not the values.
void plan_fp8(Sources& src, const TensorLayoutOptions& o, KvPlan& p) {
  const TensorInfo& t = p.k.front().ref.info();
  TensorType kind = is_fp8(t.type) ? t.type : TensorType::other;
  if (!o.fp8.empty()) {
    KVT_CHECK(o.fp8 == "e4m3" || o.fp8 == "e5m2", USAGE, "fp8 '" << o.fp8 << "': give e4m3 or e5m2");
    const TensorType want = o.fp8 == "e4m3" ? TensorType::f8_e4m3 : TensorType::f8_e5m2;
    KVT_CHECK(t.type == TensorType::u8 || t.type == want, USAGE,
              "fp8 " << o.fp8 << " reads uint8 tensors as fp8 codes; " << p.k.front().ref.label << " has dtype "
                     << t.type_text);
    kind = want;
  }
  if (kind == TensorType::other) {
    KVT_CHECK(o.k_scale.empty() && o.v_scale.empty(), USAGE, "k_scale and v_scale apply to fp8 K/V tensors only");
    return;
  }
  KVT_CHECK(!o.k_scale.empty() && !o.v_scale.empty(), UNSUPPORTED_CACHE,
            "K/V " << p.k.front().ref.label << " hold fp8 codes (" << (kind == TensorType::f8_e4m3 ? "e4m3" : "e5m2")
                   << "); their values are code x scale: give k_scale and v_scale (vLLM's per-layer k_scale, "
                      "v_scale)");
  for (auto* side : {&p.k, &p.v})
    for (Bound& b : *side) b.fp8 = kind;
  p.k_scale = read_scales(src, o.k_scale, p.layers, "k_scale");
  p.v_scale = read_scales(src, o.v_scale, p.layers, "v_scale");
}

std::vector<Bound> plan_q(Sources& src, const TensorLayoutOptions& o, const std::vector<Ax>& kv_layout,
                          int64_t layers) {
  std::vector<Ax> layout;
  if (o.q_layout.empty())
    for (Ax a : kv_layout)
      if (a != Ax::KV) layout.push_back(a);
  KVT_CHECK(!o.q_layout.empty() || !is_paged(kv_layout), USAGE,
            "queries are not paged: give q_layout with the axes of the q tensors (e.g. L,H,T,d)");
  if (!o.q_layout.empty()) layout = parse_layout(o.q_layout, false, false, "q_layout");
  std::vector<Bound> q;
  if (std::count(layout.begin(), layout.end(), Ax::L)) {
    q.push_back(bind_layout(src.require(o.q, -1, "q"), layout, o, "the query layout"));
    KVT_CHECK(q[0].dim(Ax::L) == layers, SHAPE_MISMATCH,
              "the L axis of " << q[0].ref.label << " has " << q[0].dim(Ax::L) << " layers; K/V have " << layers);
  } else {
    for (int64_t l = 0; l < layers; ++l)
      q.push_back(bind_layout(src.require(o.q, l, "q"), layout, o, "the query layout"));
  }
  for (const Bound& b : q)
    for (Ax a : {Ax::H, Ax::T, Ax::D})
      KVT_CHECK(b.dim(a) == q[0].dim(a), SHAPE_MISMATCH,
                "axis " << axis_name(a) << " of " << b.ref.label << " differs from " << q[0].ref.label);
  return q;
}

// A 1-D integer tensor of `n` entries (tokens, positions, q_positions).
std::vector<int64_t> read_ints(Sources& src, const std::string& ref, int64_t n, const std::string& option) {
  const Ref r = src.require(ref, -1, option);
  const TensorInfo& t = r.info();
  KVT_CHECK(t.shape.size() == 1 && t.elements == n, SHAPE_MISMATCH,
            option << " " << r.label << " has shape " << json(t.shape).dump() << "; expected [" << n << "]");
  std::vector<int64_t> v(static_cast<size_t>(n));
  r.file->read_i64(r.index, 0, n, v.data());
  return v;
}

const char* type_label(TensorType t) {
  switch (t) {
    case TensorType::f32:
      return "f32";
    case TensorType::f16:
      return "f16";
    case TensorType::bf16:
      return "bf16";
    case TensorType::f64:
      return "f64";
    case TensorType::f8_e4m3:
      return "f8_e4m3";
    case TensorType::f8_e5m2:
      return "f8_e5m2";
    default:
      return "other";
  }
}

// The [H][T][d] K or V of layer l in token order, dequantized (fp8 x scale).
void layer_kv(const KvPlan& p, bool is_v, int64_t l, int64_t batch, std::vector<float>& out, Region& r) {
  const size_t i = p.k.size() == 1 ? 0 : static_cast<size_t>(l);
  const Bound& b = is_v ? p.v[i] : p.k[i];
  const int64_t kv = is_v && p.stacked ? 1 : 0;
  if (p.slots.empty())
    extract(b, l, kv, batch, out, r);
  else
    gather(b, p.slots, l, kv, batch, out, r);
  const std::vector<float>& scale = is_v ? p.v_scale : p.k_scale;
  if (scale.empty()) return;
  for (float& x : out) x *= scale[static_cast<size_t>(l)];
}

// The integer side tensors (formats/kvdump-v1.md: /kv/q_positions, /kv/tokens, /kv/positions):
// queries of the last T_q rows unless q_positions names theirs.
void read_side_tensors(Sources& src, const TensorLayoutOptions& o, SnapshotInfo& s) {
  const DumpGeometry& geo = s.geo;
  if (s.q_heads > 0) {
    if (!o.q_positions.empty()) {
      s.q_rows = read_ints(src, o.q_positions, geo.q_tokens, "q_positions");
    } else {  // the queries of the last T_q rows, as kvtool synth writes them
      KVT_CHECK(geo.q_tokens <= geo.tokens, USAGE,
                geo.q_tokens << " query rows but T = " << geo.tokens << "; give q_positions");
      for (int64_t i = 0; i < geo.q_tokens; ++i) s.q_rows.push_back(geo.tokens - geo.q_tokens + i);
    }
  }
  if (!o.tokens.empty()) s.tokens = read_ints(src, o.tokens, geo.tokens, "tokens");
  if (!o.positions.empty()) s.positions = read_ints(src, o.positions, geo.tokens, "positions");
}

class TensorSnapshot final : public KvSnapshot {
 public:
  TensorSnapshot(const std::vector<std::string>& inputs, const TensorLayoutOptions& o) : src_(inputs), o_(o) {
    KVT_CHECK(o.batch_index >= 0 && o.kv_heads >= 0 && o.head_dim >= 0 && o.layers >= 0, USAGE,
              "batch_index, kv_heads, head_dim and layers must not be negative");
    const std::vector<Ax> layout = parse_layout(o.layout, true, true, "layout");
    check_paged_options(o, is_paged(layout));
    p_ = plan_kv(src_, o, layout);
    plan_fp8(src_, o, p_);
    const Bound& k0 = p_.k.front();
    const TensorType st = k0.fp8 != TensorType::other ? k0.fp8 : k0.ref.info().type;
    KVT_CHECK(
        st == TensorType::f32 || st == TensorType::f16 || st == TensorType::bf16 || st == TensorType::f64 || is_fp8(st),
        UNSUPPORTED_DTYPE,
        "tensor " << k0.ref.label << " has dtype " << k0.ref.info().type_text
                  << "; K and V are read from float32, float16, bfloat16, float64 or fp8 (with scales)");
    if (is_paged(layout)) p_.slots = token_slots(src_, o, k0);
    if (!o.q.empty()) q_ = plan_q(src_, o, layout, p_.layers);
    describe(layout, st);
    read_side_tensors(src_, o, info_);
    info_.format = src_.formats();  // every file opened, side tensors' included
  }
  const SnapshotInfo& info() const override { return info_; }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override {
    layer_kv(p_, false, layer, o_.batch_index, k, scratch_);
    layer_kv(p_, true, layer, o_.batch_index, v, scratch_);
    if (p_.k.size() > 1) {  // a file per layer: closed once read (man/kvtool-import.1 allows 4096 layers)
      p_.k[static_cast<size_t>(layer)].ref.file->release();
      p_.v[static_cast<size_t>(layer)].ref.file->release();
    }
  }
  void read_q(int64_t layer, std::vector<float>& q) override {
    const Bound& b = q_[q_.size() == 1 ? 0 : static_cast<size_t>(layer)];
    extract(b, layer, 0, o_.batch_index, q, scratch_);
    if (q_.size() > 1) b.ref.file->release();
  }
  std::string label(char what, int64_t layer) const override {
    const auto i = static_cast<size_t>(layer);
    const Bound& b = what == 'Q' ? q_[q_.size() == 1 ? 0 : i] : (what == 'V' ? p_.v : p_.k)[p_.k.size() == 1 ? 0 : i];
    return std::string(1, what) + " " + b.ref.label;
  }

 private:
  void describe(const std::vector<Ax>& layout, TensorType st) {
    const Bound& k0 = p_.k.front();
    DumpGeometry& geo = info_.geo;
    geo.layers = p_.layers;
    geo.kv_heads = k0.dim(Ax::H);
    geo.tokens = is_paged(layout) ? o_.num_tokens : k0.dim(Ax::T);
    geo.head_dim = k0.dim(Ax::D);
    geo.dtype = source_dtype(st);
    if (!q_.empty()) {
      info_.q_heads = q_[0].dim(Ax::H);
      geo.q_tokens = q_[0].dim(Ax::T);
      KVT_CHECK(q_[0].dim(Ax::D) == geo.head_dim, SHAPE_MISMATCH,
                "queries " << q_[0].ref.label << " have head dim " << q_[0].dim(Ax::D) << "; K has " << geo.head_dim);
      KVT_CHECK(geo.q_tokens > 0, SHAPE_MISMATCH, "queries " << q_[0].ref.label << " have no rows");
    }
    KVT_CHECK(geo.tokens > 0, SHAPE_MISMATCH, "K " << k0.ref.label << " has no rows (T = 0)");
    info_.source_dtype = type_label(st);
    if (is_fp8(st)) info_.dequantized_from = st == TensorType::f8_e4m3 ? "fp8-e4m3" : "fp8-e5m2";
  }
  Sources src_;
  TensorLayoutOptions o_;
  KvPlan p_;
  std::vector<Bound> q_;
  SnapshotInfo info_;
  Region scratch_;
};

}  // namespace

std::unique_ptr<KvSnapshot> open_tensor_snapshot(const SnapshotRequest& r) {
  return std::make_unique<TensorSnapshot>(r.inputs, r.tensors);
}

}  // namespace kvtool
