// LMCache's local-disk (<key>.pt, headerless) and FS-connector (<key>.data, an optional 28-byte
// header) directories (formats/cache-stores.md, "LMCache"; lmcache/utils.py CacheEngineKey,
// local_disk_backend.py, connector/fs_connector.py, protocol.py at the commits that page names).
#include <cstring>
#include <map>
#include <set>
#include <tuple>

#include "impl/store_kinds.h"

namespace kvtool::stores {

namespace {

constexpr uint64_t kHeaderBytes = 28;

struct Key {
  std::string fmt, model, hash, dtype, tags;
  int64_t world = -1, worker = -1, layer = -1;
};

std::vector<std::string> split_at(const std::string& s) {
  std::vector<std::string> parts(1);
  for (char c : s) {
    if (c == '@')
      parts.emplace_back();
    else
      parts.back().push_back(c);
  }
  return parts;
}

// model@world_size@worker_id@chunk_hash@dtype[@layer][@tag%value...], or the older forms that begin
// with the engine format (vllm@ / huggingface@ / sglang@) and may lack the dtype.
bool parse_key(const std::string& stem, Key& k) {
  const std::vector<std::string> p = split_at(stem);
  static const std::set<std::string> fmts = {"vllm", "huggingface", "sglang"};
  size_t i = p.size() >= 5 && fmts.count(p[0]) && all_digits(p[2]) && all_digits(p[3]) ? 1 : 0;
  if (i) k.fmt = p[0];
  if (p.size() < i + 4 || p[i].empty() || !all_digits(p[i + 1]) || !all_digits(p[i + 2])) return false;
  k.model = p[i], k.world = std::stoll(p[i + 1]), k.worker = std::stoll(p[i + 2]);
  k.hash = p[i + 3];
  if (!all_hex(k.hash[0] == '-' ? k.hash.substr(1) : k.hash) || k.world == 0) return false;
  size_t j = i + 4;
  std::string as;
  if (j < p.size() && dtype_bytes(p[j], as)) k.dtype = p[j++];
  if (j < p.size() && all_digits(p[j])) k.layer = std::stoll(p[j++]);
  for (; j < p.size(); ++j) {
    if (p[j].find('%') == std::string::npos) return false;
    k.tags += "@" + p[j];
  }
  return true;
}

// The FS connector's header when the file starts with one that fits its size: length, fmt, dtype
// code, shape[4] as native (little-endian) int32.
std::vector<int64_t> read_header(const DirectoryTree& tree, const TreeEntry& e) {
  if (e.size < kHeaderBytes) return {};
  int32_t h[7];
  try {
    TreeFile f(tree, e.path);
    f.file().pread_exact(0, sizeof h, h);
  } catch (const Error&) {
    return {};
  }
  const bool fits = static_cast<uint64_t>(static_cast<uint32_t>(h[0])) == e.size - kHeaderBytes && h[1] >= 1 &&
                    h[1] <= 6 && h[2] >= 1 && h[2] <= 8;
  return fits ? std::vector<int64_t>(h, h + 7) : std::vector<int64_t>{};
}

std::string namespace_of(const Key& k) {
  return (k.fmt.empty() ? "" : k.fmt + "@") + k.model + "@" + std::to_string(k.world) + "@" + k.dtype + k.tags;
}

void add_block(const DirectoryTree& tree, const TreeEntry& e, const std::string& stem, StoreScan& s,
               std::map<std::string, std::string>& seen) {
  Key k;
  if (!parse_key(stem, k)) {
    s.files.push_back(file_of(e, StoreFile::Role::foreign));
    return add_finding(s.findings, Reason::FOREIGN_FILE, e.path,
                       "not an LMCache key (model@world_size@worker_id@chunk_hash@dtype[@layer][@tag%value])");
  }
  StoreFile f = file_of(e, StoreFile::Role::block);
  f.ns = namespace_of(k), f.hash = k.hash, f.rank = k.worker, f.layer = k.layer, f.pool = k.tags;
  if (e.path.size() > 5 && e.path.substr(e.path.size() - 5) == ".data") f.header = read_header(tree, e);
  if (!s.find(f.ns)) {
    StoreNamespace n;
    n.name = f.ns, n.model = k.model, n.dtype = k.dtype, n.world_size = k.world;
    n.config = {{"model", k.model}, {"world_size", k.world}, {"dtype", k.dtype}, {"format", k.fmt}, {"tags", k.tags}};
    s.namespaces.push_back(n);
  }
  std::string model = k.model;  // the FS connector spells '/' as "-SEP-", the local disk as '-'
  for (size_t at; (at = model.find("-SEP-")) != std::string::npos;) model.replace(at, 5, "-");
  const std::string id = model + "@" + std::to_string(k.world) + "@" + std::to_string(k.worker) + "@" + k.hash + "@" +
                         k.dtype + "@" + std::to_string(k.layer) + k.tags;
  auto [it, fresh] = seen.emplace(id, e.path);
  if (!fresh) add_finding(s.findings, Reason::DUPLICATE_BLOCK, e.path, "the same key as '" + it->second + "'");
  if (k.worker >= k.world)
    add_finding(s.findings, Reason::STORE_CONFIG_MISMATCH, e.path,
                "worker " + std::to_string(k.worker) + " is beyond world size " + std::to_string(k.world));
  s.files.push_back(f);
}

bool ends_with(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() > n && s.compare(s.size() - n, n, tail) == 0;
}

bool probe(const DirectoryTree&, const std::vector<TreeEntry>& entries) {
  for (const TreeEntry& e : entries) {
    Key k;
    const std::string& p = e.path;
    if (p.find('/') == std::string::npos && (ends_with(p, ".pt") || ends_with(p, ".data")) &&
        parse_key(p.substr(0, p.rfind('.')), k))
      return true;
  }
  return false;
}

// Every chunk must be stored by every worker of its world size (and, layerwise, for every layer
// some worker stored): a part alone is a block no one can load.
void check_complete(StoreScan& s) {
  using Chunk = std::tuple<std::string, std::string, int64_t>;  // namespace, hash, layer
  std::map<Chunk, std::set<int64_t>> workers;
  std::map<Chunk, std::string> first;
  for (const StoreFile& f : s.files) {
    if (f.role != StoreFile::Role::block) continue;
    const Chunk id{f.ns, f.hash, f.layer};
    workers[id].insert(f.rank);
    first.emplace(id, f.entry.path);
  }
  for (const auto& [id, have] : workers) {
    const StoreNamespace* n = s.find(std::get<0>(id));
    if (!n || static_cast<int64_t>(have.size()) >= n->world_size) continue;
    add_finding(s.findings, Reason::ORPHAN_BLOCK, first[id],
                "this chunk is stored by " + std::to_string(have.size()) + " of its " + std::to_string(n->world_size) +
                    " workers; the others' parts are missing");
  }
}

void scan(const DirectoryTree& tree, const std::vector<TreeEntry>& entries, const StoreOptions&, StoreScan& s) {
  std::map<std::string, std::string> seen;
  for (const TreeEntry& e : entries) {
    const std::string& p = e.path;
    if (e.type == TreeEntry::Type::directory) continue;  // a relative temporary folder; its files are judged
    if (refuse_non_file(e, s)) continue;
    if (ends_with(p, ".tmp")) {
      add_temporary(e, s, "LMCache's FS connector writes <key>.tmp and renames it to <key>.data");
    } else if (ends_with(p, ".pt.meta")) {
      s.files.push_back(file_of(e, StoreFile::Role::config));
    } else if (p.find('/') == std::string::npos && (ends_with(p, ".pt") || ends_with(p, ".data"))) {
      add_block(tree, e, p.substr(0, p.rfind('.')), s, seen);
    } else {
      s.files.push_back(file_of(e, StoreFile::Role::foreign));
      add_finding(s.findings, Reason::FOREIGN_FILE, p,
                  "not an LMCache chunk (<key>.pt or <key>.data at the top level)");
    }
  }
  check_complete(s);
}

// Header dtype codes (protocol.py DTYPE_TO_INT) as kvtool names them.
std::string header_dtype(int64_t code) {
  static const char* names[] = {"", "f16", "f16", "bf16", "f32", "f64", "uint8", "f8_e4m3", "f8_e5m2"};
  return code >= 0 && code <= 8 ? names[code] : "";
}

void check(const StoreScan& s, const StoreModel* m, const StoreOptions& o, std::vector<StoreFinding>& out) {
  for (const StoreNamespace& n : s.namespaces) {
    std::string as;
    const std::string want = [&] {
      std::string w = o.model_name;
      for (char& c : w)
        if (c == '/') c = '-';
      return w;
    }();
    std::string have = n.model;
    for (size_t at; (at = have.find("-SEP-")) != std::string::npos;) have.replace(at, 5, "-");
    if (!o.model_name.empty() && have != want && n.model != o.model_name)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, "",
                  "the chunks of '" + n.name + "' are of model '" + n.model + "', not '" + o.model_name + "'");
    if (!o.dtype.empty() && (dtype_bytes(n.dtype, as) == 0 || as != o.dtype))
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, "",
                  "the chunks of '" + n.name + "' hold " + (n.dtype.empty() ? "an unnamed dtype" : n.dtype) + ", not " +
                      o.dtype);
  }
  for (const StoreFile& f : s.files) {
    if (m && f.role == StoreFile::Role::block && f.layer >= m->layers)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
                  "layer " + std::to_string(f.layer) + " of a model with " + std::to_string(m->layers) + " layers");
    if (f.role != StoreFile::Role::block || f.header.empty()) continue;
    const StoreNamespace* n = s.find(f.ns);
    std::string as;
    dtype_bytes(n->dtype, as);
    if (!n->dtype.empty() && header_dtype(f.header[2]) != as)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
                  "the header says " + header_dtype(f.header[2]) + "; the key says " + n->dtype);
    if (m && f.layer < 0 && f.header[1] == 1 &&
        (f.header[4] != m->layers || f.header[6] * n->world_size != m->kv_heads * m->head_dim))
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
                  "the header's shape [2, " + std::to_string(f.header[4]) + ", " + std::to_string(f.header[5]) + ", " +
                      std::to_string(f.header[6]) + "] is not [2, layers " + std::to_string(m->layers) + ", tokens, " +
                      std::to_string(m->kv_heads * m->head_dim / std::max<int64_t>(n->world_size, 1)) + " per worker]");
    if (f.layer < 0 && f.header[1] == 1 && f.header[3] != 2)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
                  "the header's shape starts with " + std::to_string(f.header[3]) + ", not 2 (K and V)");
    if (f.layer < 0 && f.header[1] != 1)
      add_finding(
          out, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
          "memory format " + std::to_string(f.header[1]) + " in the header of a whole-chunk key (KV_2LTD is 1)");
  }
}

std::optional<BlockMap> map(const StoreScan& s, const StoreFile& f, const StoreModel& m, const StoreOptions& o,
                            std::string& why) {
  const StoreNamespace* n = s.find(f.ns);
  BlockMap b;
  b.elem_bytes = dtype_bytes(n->dtype, b.dtype);
  if (!f.header.empty() && !n->dtype.empty() && header_dtype(f.header[2]) != b.dtype)
    return why = "header and key disagree on the dtype", std::nullopt;
  if (!b.elem_bytes && !f.header.empty()) b.elem_bytes = dtype_bytes(header_dtype(f.header[2]), b.dtype);
  if (!b.elem_bytes) return why = "the key names no dtype (an LMCache key before dtypes)", std::nullopt;
  if (b.dtype.empty()) why = "dtype '" + n->dtype + "' is size-checked only (fp8 codes need scales no store records)";
  const int64_t hr = heads_per_rank(m, n->world_size, why);
  if (!hr) return std::nullopt;
  if (f.rank >= n->world_size || f.layer >= m.layers)
    return why = "its worker or layer is beyond the namespace's world size or the model's layers", std::nullopt;
  const int64_t d = m.head_dim, hidden = hr * d, chunk = o.block_tokens > 0 ? o.block_tokens : 256;
  const int64_t L = f.layer < 0 ? m.layers : 1;
  b.offset = f.header.empty() ? 0 : kHeaderBytes;
  const int64_t unit = product({2, L, hidden, b.elem_bytes});
  if (!unit || !product({unit, chunk}))
    return why = "the chunk size x the model's geometry is beyond any cache", std::nullopt;
  const int64_t T =
      std::clamp<int64_t>(static_cast<int64_t>((f.entry.size - b.offset) / static_cast<uint64_t>(unit)), 1, chunk);
  b.bytes = b.offset + static_cast<uint64_t>(T * unit);
  b.layers = L, b.first_layer = std::max<int64_t>(f.layer, 0), b.heads = hr, b.first_head = f.rank * hr;
  b.head_dim = d, b.tokens = T, b.tb = T, b.hr = hr, b.s_h = d;
  std::string fmt = f.layer < 0 ? "KV_2LTD" : o.memory_format;
  if (f.layer >= 0 && !f.header.empty()) fmt = f.header[1] == 2 ? "KV_T2D" : f.header[1] == 3 ? "KV_2TD" : "";
  if (fmt == "KV_2LTD")
    b.s_kv = L * T * hidden, b.s_l = T * hidden, b.s_t = hidden;
  else if (fmt == "KV_T2D")
    b.s_kv = hidden, b.s_t = 2 * hidden;
  else if (fmt == "KV_2TD")
    b.s_kv = T * hidden, b.s_t = hidden;
  else
    b.dtype.clear(), why = "a layerwise chunk needs memory_format KV_T2D or KV_2TD to decode";
  return b;
}

}  // namespace

const StoreKind& lmcache_kind() {
  static const StoreKind k{"lmcache", probe, scan, check, map};
  return k;
}

}  // namespace kvtool::stores
