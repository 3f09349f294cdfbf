// Cache stores (kvtool/cache_store.h, formats/cache-stores.md): the model's geometry, recognising a
// store's kind, and what the kinds (store_vllm.cpp, store_lmcache.cpp, store_sglang.cpp) share.
#include "kvtool/cache_store.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <map>

#include "impl/store_kinds.h"
#include "kvtool/atomic_file.h"
#include "kvtool/gguf.h"
#include "kvtool/half.h"
#include "kvtool/identity.h"
#include "kvtool/random_access_file.h"

namespace kvtool {

namespace stores {

void add_finding(std::vector<StoreFinding>& out, Reason r, const std::string& path, const std::string& message) {
  out.push_back(StoreFinding{r, path, message});
}

void add_temporary(const TreeEntry& e, StoreScan& s, const std::string& how) {
  s.files.push_back(file_of(e, StoreFile::Role::temporary));
  const int64_t age_s = (static_cast<int64_t>(std::time(nullptr)) * 1000000000 - e.mtime_ns) / 1000000000;
  const bool stale = age_s > kStaleTempSeconds;
  add_finding(
      s.findings, Reason::FOREIGN_FILE, e.path,
      std::string(stale ? "a temporary left by a write that never finished (" + std::to_string(age_s) + " s old); "
                        : "a temporary of a write in progress; ") +
          how);
  s.findings.back().warning = !stale;
}

bool refuse_non_file(const TreeEntry& e, StoreScan& s) {
  if (e.type == TreeEntry::Type::file && e.size > 0) return false;
  StoreFile f = file_of(e, StoreFile::Role::foreign);
  s.files.push_back(f);
  add_finding(s.findings, Reason::FOREIGN_FILE, e.path,
              e.type == TreeEntry::Type::file ? std::string("an empty file (a write that never finished?)")
                                              : std::string("a ") + tree_entry_type_name(e.type) +
                                                    " (a store holds regular files only; it is never followed)");
  return true;
}

StoreFile file_of(const TreeEntry& e, StoreFile::Role role) {
  StoreFile f;
  f.entry = e;
  f.role = role;
  return f;
}

void count_blocks(StoreScan& s) {
  std::map<std::string, StoreNamespace*> by;
  for (auto& n : s.namespaces) by[n.name] = &n;
  for (const StoreFile& f : s.files) {
    auto it = by.find(f.ns);
    if (f.role != StoreFile::Role::block || it == by.end()) continue;
    ++it->second->blocks;
    it->second->bytes += f.entry.size;
  }
}

int64_t dtype_bytes(const std::string& t, std::string& as) {
  static const std::map<std::string, std::pair<int64_t, const char*>> known = {
      {"float16", {2, "f16"}},   {"half", {2, "f16"}},      {"f16", {2, "f16"}},   {"bfloat16", {2, "bf16"}},
      {"bf16", {2, "bf16"}},     {"float32", {4, "f32"}},   {"float", {4, "f32"}}, {"f32", {4, "f32"}},
      {"fp8", {1, ""}},          {"fp8_e4m3", {1, ""}},     {"fp8_e5m2", {1, ""}}, {"fp8_e4m3fn", {1, ""}},
      {"fp8_e4m3fnuz", {1, ""}}, {"fp8_e5m2fnuz", {1, ""}}, {"f8", {1, ""}},       {"float8_e4m3fn", {1, ""}},
      {"float8_e5m2", {1, ""}},  {"uint8", {1, ""}}};
  auto it = known.find(t);
  if (it == known.end()) return as = "", 0;
  as = it->second.second;
  return it->second.first;
}

bool all_hex(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() <= 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string parent_of(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? "" : rel.substr(0, slash);
}

std::string leaf_of(const std::string& rel) {
  const size_t slash = rel.rfind('/');
  return slash == std::string::npos ? rel : rel.substr(slash + 1);
}

int64_t product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(p, f, &p)) return 0;
  return p;
}

int64_t heads_per_rank(const StoreModel& m, int64_t ranks, std::string& why) {
  if (ranks > 0 && m.kv_heads % ranks == 0) return m.kv_heads / ranks;
  why = "the model's " + std::to_string(m.kv_heads) + " kv heads do not split over " + std::to_string(ranks) + " ranks";
  return 0;
}

}  // namespace stores

namespace {

using stores::StoreKind;

const std::vector<const StoreKind*>& kinds() {
  static const std::vector<const StoreKind*> all = {&stores::vllm_kind(), &stores::lmcache_kind(),
                                                    &stores::sglang_kind()};
  return all;
}

const StoreKind& kind_named(const std::string& name) {
  for (const StoreKind* k : kinds())
    if (name == k->name) return *k;
  KVT_THROW(USAGE, "store kind '" << excerpt(name) << "': expected vllm, lmcache or sglang");
}

// A positive integer member of at most `cap` (the dump's limits: kMaxDumpLayers, kMaxDumpHeads,
// kMaxDumpHeadDim; hidden_size up to their product).
int64_t positive(const json& j, const char* key, const std::string& what, int64_t cap = kMaxDumpHeads) {
  KVT_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0 && j[key].get<int64_t>() <= cap,
            UNSUPPORTED_MODEL, what << " has no integer '" << key << "' in [1, " << cap << "]");
  return j[key].get<int64_t>();
}

// A Hugging Face config.json: num_hidden_layers, num_key_value_heads (num_attention_heads when
// absent), head_dim (hidden_size / num_attention_heads when absent), torch_dtype or dtype.
StoreModel read_hf_config(const std::string& path) {
  const RandomAccessFile f(path);
  KVT_CHECK(f.size() <= (4u << 20), UNSUPPORTED_MODEL, "'" << path << "' is over 4 MiB: not a model's config.json");
  std::string text(static_cast<size_t>(f.size()), '\0');
  f.pread_exact(0, text.size(), text.data());
  const json j = parse_json(text, Reason::UNSUPPORTED_MODEL, "the model config '" + path + "'");
  const std::string what = "the model config '" + path + "'";
  KVT_CHECK(j.is_object(), UNSUPPORTED_MODEL, what << " is not a JSON object");
  StoreModel m;
  m.path = path;
  if (j.contains("_name_or_path") && j["_name_or_path"].is_string()) m.name = j["_name_or_path"].get<std::string>();
  m.layers = positive(j, "num_hidden_layers", what);
  const int64_t heads = positive(j, "num_attention_heads", what);
  m.kv_heads = j.contains("num_key_value_heads") ? positive(j, "num_key_value_heads", what) : heads;
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    m.head_dim = positive(j, "head_dim", what, kMaxDumpHeadDim);
  } else {
    const int64_t hidden = positive(j, "hidden_size", what, kMaxDumpHeads * kMaxDumpHeadDim);
    KVT_CHECK(hidden % heads == 0, UNSUPPORTED_MODEL,
              what << ": hidden_size " << hidden << " is not a multiple of " << heads << " heads");
    m.head_dim = hidden / heads;
    KVT_CHECK(m.head_dim <= kMaxDumpHeadDim, UNSUPPORTED_MODEL,
              what << ": head_dim " << m.head_dim << " is beyond " << kMaxDumpHeadDim);
  }
  for (const char* key : {"torch_dtype", "dtype"}) {
    std::string as;
    if (m.dtype.empty() && j.contains(key) && j[key].is_string() && stores::dtype_bytes(j[key].get<std::string>(), as))
      m.dtype = as;
  }
  return m;
}

bool starts_with_gguf_magic(const std::string& path) {
  const RandomAccessFile f(path);
  char magic[4] = {};
  return f.pread_upto(0, 4, magic).got == 4 && std::string(magic, 4) == "GGUF";
}

}  // namespace

StoreModel read_store_model(const std::string& path) {
  if (starts_with_gguf_magic(path)) {
    const GgufModel g = read_gguf_model(path);
    require_plain_cache(g, "a store's check");
    StoreModel m;
    m.path = path, m.name = g.name, m.layers = g.layers, m.kv_heads = g.kv_heads, m.head_dim = g.head_dim;
    m.gguf = true;
    return m;
  }
  return read_hf_config(path);
}

const std::vector<std::string>& store_kinds() {
  static const std::vector<std::string> names = {"vllm", "lmcache", "sglang"};
  return names;
}

const StoreNamespace* StoreScan::find(const std::string& ns) const {
  for (const StoreNamespace& n : namespaces)
    if (n.name == ns) return &n;
  return nullptr;
}

StoreScan scan_cache_store(const DirectoryTree& tree, const StoreOptions& o) {
  // vLLM nests four levels (rank folder, two hash folders, file); LMCache's temporary folder one.
  const std::vector<TreeEntry> entries = tree.list(8, 50'000'000);
  const StoreKind* kind = o.kind.empty() ? nullptr : &kind_named(o.kind);
  if (!kind) {
    std::string seen;
    for (const StoreKind* k : kinds()) {
      if (!k->probe(tree, entries)) continue;
      KVT_CHECK(!kind, STORE_UNRECOGNIZED,
                "'" << tree.root() << "' looks like both a " << kind->name << " and a " << k->name
                    << " store; name one with kind (--store-kind)");
      kind = k;
    }
    KVT_CHECK(kind, STORE_UNRECOGNIZED,
              "'" << tree.root() << "' is not a cache store kvtool recognises: no vLLM namespace with config.json, "
                  << "no LMCache <key>.pt/.data chunk, no SGLang <hash>_<model>.bin page (formats/cache-stores.md)");
  }
  StoreScan s;
  s.root = tree.root(), s.kind = kind->name;
  kind->scan(tree, entries, o, s);
  stores::count_blocks(s);
  return s;
}

void decode_block_values(const BlockMap& b, const uint8_t* data, int64_t first, int64_t n, float* out) {
  if (b.dtype == "f32") {
    std::memcpy(out, data + first * 4, static_cast<size_t>(n) * 4);
    return;
  }
  KVT_CHECK(b.dtype == "f16" || b.dtype == "bf16", INTERNAL, "a block of dtype '" << b.dtype << "' is not decoded");
  uint16_t h[512];  // in pieces: no allocation per row
  for (int64_t at = 0; at < n; at += 512) {
    const size_t k = static_cast<size_t>(std::min<int64_t>(512, n - at));
    std::memcpy(h, data + (first + at) * 2, k * 2);
    if (b.dtype == "f16") {
      f16_to_f32_array(h, out + at, k);
    } else {
      for (size_t i = 0; i < k; ++i) out[at + static_cast<int64_t>(i)] = bf16_to_f32(h[i]);
    }
  }
}

std::optional<BlockMap> block_map(const StoreScan& s, const StoreFile& f, const StoreModel& m, const StoreOptions& o,
                                  std::string& why) {
  if (f.role != StoreFile::Role::block) return why = "not a block", std::nullopt;
  return kind_named(s.kind).map(s, f, m, o, why);
}

void check_store_config(const StoreScan& s, const StoreModel* model, const StoreOptions& o,
                        std::vector<StoreFinding>& findings) {
  kind_named(s.kind).check(s, model, o, findings);
}

}  // namespace kvtool
