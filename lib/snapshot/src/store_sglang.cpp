// SGLang's HiCache file backend (formats/cache-stores.md, "SGLang"; hicache_storage.py HiCacheFile
// and pool_host/mha.py at the commits that page names): one raw page per file,
// <page hash>[.<pool>]_<model>[_<tp rank>_<tp size>][_<pp size>_<pp rank>][_cp<rank>_<size>].bin.
#include <map>
#include <set>

#include "impl/store_kinds.h"

namespace kvtool::stores {

namespace {

struct Name {
  std::string hash, pool = "kv", suffix, model;
  int64_t tp_rank = 0, tp_size = 1, pp_size = 1, pp_rank = 0;
};

// Strips a trailing "_<a>_<b>" (digits) from `s`.
bool trailing_pair(std::string& s, const char* lead, int64_t& a, int64_t& b) {
  const size_t second = s.rfind('_');
  if (second == std::string::npos || !all_digits(s.substr(second + 1))) return false;
  const size_t first = s.rfind('_', second - 1);
  const std::string mid = first == std::string::npos ? "" : s.substr(first + 1, second - first - 1);
  const size_t lead_n = std::string(lead).size();
  if (first == std::string::npos || mid.compare(0, lead_n, lead) != 0 || !all_digits(mid.substr(lead_n))) return false;
  a = std::stoll(mid.substr(lead_n)), b = std::stoll(s.substr(second + 1));
  s.resize(first);
  return true;
}

// The model and tensor-parallel rank of a suffix. With model_name given, the suffix must begin
// with it ('/' spelt '-'); otherwise the trailing digit pairs are read as [tp][pp] (formats page).
bool parse_suffix(const std::string& suffix, const std::string& model_name, Name& n) {
  std::string rest = suffix;  // "_<model>..."
  int64_t a = 0, b = 0;
  trailing_pair(rest, "cp", a, b);
  std::vector<std::pair<int64_t, int64_t>> pairs;
  if (!model_name.empty()) {
    std::string want = "_" + model_name;
    for (char& c : want)
      if (c == '/') c = '-';
    if (rest.compare(0, want.size(), want) != 0) return false;
    std::string tail = rest.substr(want.size());
    while (trailing_pair(tail, "", a, b)) pairs.insert(pairs.begin(), {a, b});
    if (!tail.empty()) return false;
    rest = want;
  } else {
    while (pairs.size() < 2 && trailing_pair(rest, "", a, b)) pairs.insert(pairs.begin(), {a, b});
  }
  if (rest.size() < 1 || rest[0] != '_') return false;
  n.model = rest.substr(1);
  if (!pairs.empty()) n.tp_rank = pairs[0].first, n.tp_size = pairs[0].second;
  if (pairs.size() > 1) n.pp_size = pairs[1].first, n.pp_rank = pairs[1].second;
  if (n.pp_size < 1 || n.pp_rank >= n.pp_size) return false;
  return n.tp_size > 0 && n.tp_rank < n.tp_size;
}

bool parse_name(const std::string& file, const std::string& model_name, Name& n) {
  if (file.size() < 64 + 4 || file.compare(file.size() - 4, 4, ".bin") != 0) return false;
  n.hash = file.substr(0, 64);
  if (!all_hex(n.hash)) return false;
  std::string rest = file.substr(64, file.size() - 68);
  if (!rest.empty() && rest[0] == '.') {
    const size_t us = rest.find('_');
    n.pool = rest.substr(1, us == std::string::npos ? std::string::npos : us - 1);
    rest = us == std::string::npos ? "" : rest.substr(us);
  }
  n.suffix = rest;
  // A suffix of another model is still a page: the model check reports it (check()).
  return !rest.empty() && (parse_suffix(rest, model_name, n) || (!model_name.empty() && parse_suffix(rest, "", n)));
}

bool probe(const DirectoryTree&, const std::vector<TreeEntry>& entries) {
  for (const TreeEntry& e : entries) {
    Name n;
    if (e.path.find('/') == std::string::npos && parse_name(e.path, "", n)) return true;
  }
  return false;
}

// Every page must be stored by every tensor-parallel rank: one rank's part alone cannot be loaded.
void check_ranks(StoreScan& s) {
  std::map<std::string, std::set<int64_t>> ranks;  // family (model, pp, cp) + pool + hash -> ranks
  std::map<std::string, std::pair<std::string, int64_t>> first;
  for (const StoreFile& f : s.files) {
    if (f.role != StoreFile::Role::block) continue;
    const StoreNamespace* n = s.find(f.ns);
    const std::string id = n->config.value("family", "") + "#" + f.pool + "#" + f.hash;
    ranks[id].insert(f.rank);
    first.emplace(id, std::make_pair(f.entry.path, n->world_size));
  }
  for (const auto& [id, have] : ranks)
    if (static_cast<int64_t>(have.size()) < first[id].second)
      add_finding(s.findings, Reason::ORPHAN_BLOCK, first[id].first,
                  "this page is stored by " + std::to_string(have.size()) + " of its " +
                      std::to_string(first[id].second) + " tensor-parallel ranks; the others' parts are missing");
}

void scan(const DirectoryTree&, const std::vector<TreeEntry>& entries, const StoreOptions& o, StoreScan& s) {
  for (const TreeEntry& e : entries) {
    if (e.type == TreeEntry::Type::directory && e.path.find('/') == std::string::npos) {
      s.files.push_back(file_of(e, StoreFile::Role::foreign));
      add_finding(s.findings, Reason::FOREIGN_FILE, e.path, "SGLang's file backend writes no folders");
      continue;
    }
    if (e.type == TreeEntry::Type::directory || refuse_non_file(e, s)) continue;
    Name n;
    if (e.path.find(".bin.tmp.") != std::string::npos) {
      add_temporary(e, s, "SGLang writes <page>.bin.tmp.<pid>.<thread>.<uuid> and renames it into place");
    } else if (e.path.find('/') == std::string::npos && parse_name(e.path, o.model_name, n)) {
      StoreFile f = file_of(e, StoreFile::Role::block);
      f.ns = n.suffix, f.hash = n.hash, f.pool = n.pool, f.rank = n.tp_rank;
      if (!s.find(f.ns)) {
        StoreNamespace ns;
        ns.name = n.suffix, ns.model = n.model, ns.world_size = n.tp_size;
        ns.config = {{"model", n.model},
                     {"tp_size", n.tp_size},
                     {"tp_rank", n.tp_rank},
                     {"pp_size", n.pp_size},
                     {"pp_rank", n.pp_rank},
                     {"family", n.model + "|" + std::to_string(n.tp_size) + "|" + std::to_string(n.pp_size) + "|" +
                                    std::to_string(n.pp_rank)}};
        s.namespaces.push_back(ns);
      }
      s.files.push_back(f);
    } else {
      s.files.push_back(file_of(e, StoreFile::Role::foreign));
      add_finding(s.findings, Reason::FOREIGN_FILE, e.path,
                  "not an SGLang page (<64-hex page hash>[.<pool>]_<model>[_<tp rank>_<tp size>]....bin)");
    }
  }
  check_ranks(s);
}

void check(const StoreScan& s, const StoreModel* m, const StoreOptions& o, std::vector<StoreFinding>& out) {
  for (const StoreNamespace& n : s.namespaces) {
    std::string want = o.model_name;
    for (char& c : want)
      if (c == '/') c = '-';
    if (!o.model_name.empty() && n.model != want)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, "",
                  "the pages '*" + n.name + ".bin' are of model '" + n.model + "', not '" + want + "'");
    if (m && m->kv_heads % n.world_size != 0)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, "",
                  "the pages '*" + n.name + ".bin' split " + std::to_string(m->kv_heads) + " kv heads over " +
                      std::to_string(n.world_size) + " tensor-parallel ranks");
  }
}

std::optional<BlockMap> map(const StoreScan& s, const StoreFile& f, const StoreModel& m, const StoreOptions& o,
                            std::string& why) {
  const StoreNamespace* n = s.find(f.ns);
  if (f.pool != "kv") return why = "pool '" + f.pool + "' does not hold per-head K and V", std::nullopt;
  if (n->config.value("pp_size", 1) != 1)
    return why = "a pipeline-parallel rank's pages hold a share of the layers: not mapped", std::nullopt;
  if (o.block_tokens <= 0)
    return why = "SGLang pages record no page size: give block_tokens (--block-tokens)", std::nullopt;
  BlockMap b;
  b.dtype = !o.dtype.empty() ? o.dtype : m.dtype;
  std::string as;
  b.elem_bytes = b.dtype.empty() ? 0 : dtype_bytes(b.dtype, as);
  if (!b.dtype.empty()) b.dtype = as;
  const int64_t hr = heads_per_rank(m, n->world_size, why);
  if (!hr) return std::nullopt;
  const int64_t P = o.block_tokens, L = m.layers, d = m.head_dim, unit = product({2, L, P, hr, d});
  if (!unit || !product({unit, 4}))
    return why = "the page size x the model's geometry is beyond any cache", std::nullopt;
  if (!b.elem_bytes) {  // SGLang records no dtype: the page's size tells 1, 2 or 4 bytes
    const uint64_t es = f.entry.size / static_cast<uint64_t>(unit);
    b.elem_bytes = es == 4 || es == 2 || es == 1 ? static_cast<int64_t>(es) : 2;
    b.dtype = b.elem_bytes == 4 ? "f32" : "";  // 2 bytes may be f16 or bf16: size-checked only
    if (b.elem_bytes == 2) why = "2-byte values may be f16 or bf16: give dtype (--store-dtype) to decode";
  }
  b.bytes = static_cast<uint64_t>(unit * b.elem_bytes);
  b.layers = L, b.heads = hr, b.first_head = f.rank * hr, b.head_dim = d, b.tokens = P, b.tb = P, b.hr = hr;
  const std::string lay = o.memory_format.empty() ? "layer_first" : o.memory_format;
  b.layout_assumed = o.memory_format.empty();
  if (lay == "layer_first" || lay == "page_first_direct")
    b.s_kv = L * P * hr * d, b.s_l = P * hr * d, b.s_t = hr * d, b.s_h = d;
  else if (lay == "page_first")
    b.s_kv = P * L * hr * d, b.s_t = L * hr * d, b.s_l = hr * d, b.s_h = d;
  else if (lay == "page_head")
    b.s_kv = hr * P * L * d, b.s_h = P * L * d, b.s_t = L * d, b.s_l = d;
  else
    b.dtype.clear(), why = "memory_format '" + lay + "' is not an SGLang host layout";
  return b;
}

}  // namespace

const StoreKind& sglang_kind() {
  static const StoreKind k{"sglang", probe, scan, check, map};
  return k;
}

}  // namespace kvtool::stores
