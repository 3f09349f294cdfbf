// vLLM's filesystem offload tier (formats/cache-stores.md, "vLLM"): namespace folders
// <model>_<digest12>/config.json beside rank folders <model>_<digest12>_r<rank>/<h[0:3]>/<h[3:5]>_g<group>/<h>.bin,
// one raw CPU row per file (vllm/v1/kv_offload/file_mapper.py, tiering/fs/manager.py and io.py,
// cpu/shared_offload_region.py at the commits that page names).
#include <algorithm>
#include <set>

#include "impl/store_kinds.h"
#include "kvtool/sha256.h"

namespace kvtool::stores {

namespace {

constexpr size_t kConfigCap = 1u << 20;
constexpr uint64_t kRowAlign = 4096;             // BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE
constexpr int64_t kMaxField = int64_t{1} << 20;  // no count in a real config.json is larger

// The folder name vLLM gives a config: the model with '/' -> '_', '_', and the first 12 hex digits
// of SHA-256 over json.dumps(fields, sort_keys=True, separators=(",", ":")) (ASCII-escaped).
std::string folder_name_for(const json& config) {
  std::string model = config.at("model_name").get<std::string>();
  for (char& c : model)
    if (c == '/') c = '_';
  return model + "_" + to_hex(sha256(config.dump(-1, ' ', true))).substr(0, 12);
}

bool int_field(const json& j, const char* k) {
  return j.contains(k) && j[k].is_number_integer() && j[k].get<int64_t>() > 0;
}

// What a config.json must hold for kvtool to read its blocks; "" when it does.
std::string config_problem(const json& c) {
  if (!c.is_object()) return "it is not a JSON object";
  if (!c.contains("model_name") || !c["model_name"].is_string()) return "it has no string 'model_name'";
  if (!c.contains("dtype") || !c["dtype"].is_string()) return "it has no string 'dtype'";
  for (const char* k : {"tokens_per_hash", "blocks_per_file", "tp_size", "pp_size", "pcp_size", "dcp_size"})
    if (!int_field(c, k) || c[k].get<int64_t>() > kMaxField)
      return std::string("'") + k + "' is not an integer in [1, 2^20]";
  if (!c.contains("kv_cache_groups") || !c["kv_cache_groups"].is_array()) return "it has no array 'kv_cache_groups'";
  for (const json& g : c["kv_cache_groups"]) {
    if (!g.is_object() || !int_field(g, "tokens_per_block") || !g.contains("layer_names") ||
        !g["layer_names"].is_array())
      return "a kv_cache_groups entry lacks tokens_per_block or layer_names";
    for (const json& n : g["layer_names"])
      if (!n.is_string()) return "a layer name is not a string";
  }
  return "";
}

// The distinct layer tensors of a row, in the order the offloading worker registers them.
std::vector<std::string> row_layers(const json& c) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const json& g : c["kv_cache_groups"])
    for (const json& n : g["layer_names"])
      if (seen.insert(n.get<std::string>()).second) out.push_back(n.get<std::string>());
  return out;
}

void read_namespace(const DirectoryTree& tree, const std::string& dir, StoreScan& s) {
  StoreNamespace n;
  n.name = dir;
  const std::string path = dir + "/config.json";
  bool parsed = true;
  try {
    n.config = parse_json(tree.read_small(path, kConfigCap), Reason::STORE_CONFIG_MISMATCH, "'" + path + "'");
  } catch (const Error& e) {
    parsed = false;
    add_finding(s.findings, Reason::STORE_CONFIG_MISMATCH, path, e.what());
    n.config = json();
  }
  const std::string problem = parsed ? config_problem(n.config) : "";
  if (!problem.empty()) {
    add_finding(s.findings, Reason::STORE_CONFIG_MISMATCH, path, "config.json is not vLLM's: " + problem);
    n.config = json();
  }
  if (n.config.is_object()) {
    n.model = n.config["model_name"].get<std::string>(), n.dtype = n.config["dtype"].get<std::string>();
    n.world_size = n.config["tp_size"].get<int64_t>() * n.config["pp_size"].get<int64_t>();
    const std::string want = folder_name_for(n.config);
    if (want != dir)
      add_finding(s.findings, Reason::STORE_CONFIG_MISMATCH, path,
                  "config.json hashes to the folder name '" + want + "', not '" + dir +
                      "': it was edited, or copied from another model, revision or layout");
  }
  s.namespaces.push_back(n);
}

// "<ns>_r<rank>" -> (ns, rank) when ns is a namespace folder of the tree.
bool rank_folder(const std::string& top, std::string& ns, int64_t& rank) {
  const size_t at = top.rfind("_r");
  if (at == std::string::npos || !all_digits(top.substr(at + 2))) return false;
  ns = top.substr(0, at), rank = std::stoll(top.substr(at + 2));
  return true;
}

// One entry below a rank folder: <h[0:3]>/<h[3:5]>_g<group>/<h>.bin, or a temporary <h>.bin_<n>.tmp.
void classify_rank_entry(const TreeEntry& e, const std::string& ns, int64_t rank, const std::string& rel,
                         StoreScan& s) {
  const size_t depth = static_cast<size_t>(std::count(rel.begin(), rel.end(), '/'));
  const std::string leaf = leaf_of(rel);
  if (e.type == TreeEntry::Type::directory) {
    const size_t g = leaf.find("_g");
    const bool ok = depth == 0 ? leaf.size() == 3 && all_hex(leaf)
                               : depth == 1 && g == 2 && all_hex(leaf.substr(0, 2)) && all_digits(leaf.substr(4));
    if (!ok)
      s.files.push_back(file_of(e, StoreFile::Role::foreign)),
          add_finding(s.findings, Reason::FOREIGN_FILE, e.path,
                      "a folder vLLM does not make (<hash[0:3]>/<hash[3:5]>_g<group>)");
    return;
  }
  if (refuse_non_file(e, s)) return;
  const size_t tmp = leaf.find(".bin_");
  if (depth == 2 && tmp != std::string::npos && leaf.size() > 4 && leaf.substr(leaf.size() - 4) == ".tmp")
    return add_temporary(e, s, "vLLM writes <hash>.bin_<n>.tmp and renames it into place");
  const std::string hash = leaf.size() > 4 ? leaf.substr(0, leaf.size() - 4) : "";
  const std::string dirs = parent_of(rel), g = leaf_of(dirs);
  const bool named = depth == 2 && leaf.substr(leaf.size() >= 4 ? leaf.size() - 4 : 0) == ".bin" && all_hex(hash) &&
                     hash.size() % 32 == 0 && g.size() > 4 && g.compare(0, 2, hash, 3, 2) == 0 &&
                     dirs.compare(0, 3, hash, 0, 3) == 0;
  if (!named) {
    s.files.push_back(file_of(e, StoreFile::Role::foreign));
    return add_finding(s.findings, Reason::FOREIGN_FILE, e.path,
                       depth == 2 && all_hex(hash) ? "a block under another hash's folders (moved or renamed)"
                                                   : "not a vLLM block (<hash hex>.bin under its hash's folders)");
  }
  StoreFile f = file_of(e, StoreFile::Role::block);
  f.ns = ns, f.hash = hash, f.rank = rank, f.group = all_digits(g.substr(4)) ? std::stoll(g.substr(4)) : -1;
  s.files.push_back(f);
}

// A namespace's config.json, or a block at <ns>_r<rank>/<h[0:3]>/<h[3:5]>_g<group>/<h>.bin (a
// store whose configuration was lost is still vLLM's: its blocks are orphans).
bool probe(const DirectoryTree&, const std::vector<TreeEntry>& entries) {
  for (const TreeEntry& e : entries) {
    const auto depth = std::count(e.path.begin(), e.path.end(), '/');
    if (depth == 1 && leaf_of(e.path) == "config.json") return true;
    std::string ns;
    int64_t rank = 0;
    const std::string leaf = leaf_of(e.path);
    if (depth == 3 && leaf.size() > 4 && leaf.compare(leaf.size() - 4, 4, ".bin") == 0 &&
        all_hex(leaf.substr(0, leaf.size() - 4)) && rank_folder(e.path.substr(0, e.path.find('/')), ns, rank))
      return true;
  }
  return false;
}

void scan(const DirectoryTree& tree, const std::vector<TreeEntry>& entries, const StoreOptions&, StoreScan& s) {
  std::set<std::string> spaces;
  for (const TreeEntry& e : entries)
    if (std::count(e.path.begin(), e.path.end(), '/') == 1 && leaf_of(e.path) == "config.json" &&
        e.type == TreeEntry::Type::file)
      spaces.insert(parent_of(e.path));
  for (const std::string& ns : spaces) read_namespace(tree, ns, s);
  for (const TreeEntry& e : entries) {
    const size_t slash = e.path.find('/');
    const std::string top = e.path.substr(0, slash);
    std::string ns;
    int64_t rank = -1;
    if (slash == std::string::npos) {
      if (e.type == TreeEntry::Type::directory && (spaces.count(top) || rank_folder(top, ns, rank))) continue;
      s.files.push_back(file_of(e, StoreFile::Role::foreign));
      add_finding(s.findings, Reason::FOREIGN_FILE, e.path, "not a vLLM namespace (<model>_<digest>) or rank folder");
    } else if (spaces.count(top)) {
      if (e.path == top + "/config.json" && e.type == TreeEntry::Type::file) {
        s.files.push_back(file_of(e, StoreFile::Role::config));
        s.files.back().ns = top;
      } else if (e.type == TreeEntry::Type::file && leaf_of(e.path).find("_probe_") != std::string::npos) {
        add_temporary(e, s, "vLLM probes O_DIRECT and xattr support with .o_direct_probe_<n>.tmp");
      } else if (!refuse_non_file(e, s)) {
        s.files.push_back(file_of(e, StoreFile::Role::foreign));
        add_finding(s.findings, Reason::FOREIGN_FILE, e.path, "a namespace folder holds only config.json");
      }
    } else if (rank_folder(top, ns, rank)) {
      classify_rank_entry(e, ns, rank, e.path.substr(slash + 1), s);
    }
  }
  for (const StoreFile& f : s.files) {
    if (f.role != StoreFile::Role::block) continue;
    const StoreNamespace* n = s.find(f.ns);
    if (!n) {
      add_finding(s.findings, Reason::ORPHAN_BLOCK, f.entry.path,
                  "no namespace folder '" + f.ns + "' with a config.json describes this block");
    } else if (n->config.is_object() &&
               (f.group < 0 || f.group >= static_cast<int64_t>(n->config["kv_cache_groups"].size()))) {
      add_finding(s.findings, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
                  "group " + std::to_string(f.group) + " is not one of the namespace's " +
                      std::to_string(n->config["kv_cache_groups"].size()) + " kv_cache_groups");
    } else if (n->config.is_object() && f.rank >= n->world_size) {
      add_finding(
          s.findings, Reason::STORE_CONFIG_MISMATCH, f.entry.path,
          "rank " + std::to_string(f.rank) + " is beyond the namespace's " + std::to_string(n->world_size) + " ranks");
    }
  }
}

void check(const StoreScan& s, const StoreModel* m, const StoreOptions& o, std::vector<StoreFinding>& out) {
  for (const StoreNamespace& n : s.namespaces) {
    if (!n.config.is_object()) continue;
    const std::string path = n.name + "/config.json";
    if (!o.model_name.empty() && n.model != o.model_name)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, path,
                  "the namespace is of model '" + n.model + "', not '" + o.model_name + "'");
    std::string as;
    if (!o.dtype.empty() && (dtype_bytes(n.dtype, as) == 0 || as != o.dtype))
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, path, "the namespace holds " + n.dtype + " K/V, not " + o.dtype);
    if (!m) continue;
    const int64_t layers = static_cast<int64_t>(row_layers(n.config).size());
    if (layers != m->layers)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, path,
                  "the namespace's kv_cache_groups name " + std::to_string(layers) + " layers; the model has " +
                      std::to_string(m->layers));
    const int64_t tp = n.config["tp_size"].get<int64_t>();
    if (m->kv_heads % tp != 0)
      add_finding(out, Reason::STORE_CONFIG_MISMATCH, path,
                  "tp_size " + std::to_string(tp) + " does not divide the model's " + std::to_string(m->kv_heads) +
                      " kv heads");
  }
}

std::optional<BlockMap> map(const StoreScan& s, const StoreFile& f, const StoreModel& m, const StoreOptions& o,
                            std::string& why) {
  const StoreNamespace* n = s.find(f.ns);
  if (!n || !n->config.is_object()) return why = "no readable config.json describes it", std::nullopt;
  const json& c = n->config;
  if (f.group < 0 || f.group >= static_cast<int64_t>(c["kv_cache_groups"].size()))
    return why = "its group is not one of the namespace's", std::nullopt;
  for (const char* k : {"pp_size", "pcp_size", "dcp_size"})
    if (c[k].get<int64_t>() != 1) return why = std::string(k) + " > 1 is not read", std::nullopt;
  if (c["kv_cache_groups"].size() != 1)
    return why = "a row of several kv_cache_groups (a hybrid model) is size-checked only", std::nullopt;
  if (c.contains("replicated_layout") && c["replicated_layout"] != false)
    return why = "a replicated (MLA) layout holds latents, not K and V", std::nullopt;
  BlockMap b;
  b.elem_bytes = dtype_bytes(n->dtype, b.dtype);
  if (b.elem_bytes && b.dtype.empty())
    why = "dtype '" + n->dtype + "' is size-checked only (fp8 codes need scales no store records)";
  if (!b.elem_bytes) return why = "dtype '" + n->dtype + "' is not one kvtool knows", std::nullopt;
  const std::vector<std::string> layers = row_layers(c);
  const int64_t tp = c["tp_size"].get<int64_t>(), bpf = c["blocks_per_file"].get<int64_t>();
  const int64_t bs = c["kv_cache_groups"][static_cast<size_t>(f.group)]["tokens_per_block"].get<int64_t>();
  const int64_t L = static_cast<int64_t>(layers.size()), d = m.head_dim;
  if (L != m.layers)
    return why = "the namespace names " + std::to_string(L) + " layers; the model has " + std::to_string(m.layers),
           std::nullopt;
  const std::string canon = c.contains("canonical_format") && c["canonical_format"].is_string()
                                ? c["canonical_format"].get<std::string>()
                                : "";
  if (c.contains("canonical_format") && canon.empty()) return why = "canonical_format is not a string", std::nullopt;
  std::string lay = o.memory_format.empty() ? "nhd" : o.memory_format;
  b.layout_assumed = canon.empty() && o.memory_format.empty();
  if (!canon.empty()) lay = canon.size() > 3 && canon[0] == 'v' ? canon.substr(canon.find('-') + 1) : canon;
  if (lay != "nhd" && lay != "hnd" && lay != "split")
    return why = "page layout '" + lay + "' is not read", std::nullopt;
  const int64_t hr = canon.empty() ? heads_per_rank(m, tp, why) : m.kv_heads;
  if (!hr) return std::nullopt;
  const int64_t page = product({bs, hr, 2, d});  // elements of one layer's page of one worker
  const int64_t raw = product({L, bpf, bs, m.kv_heads, 2, d, b.elem_bytes});
  if (!page || !raw || raw > (int64_t{1} << 62))
    return why = "tokens_per_block x blocks_per_file x the model's geometry is beyond any cache", std::nullopt;
  b.layers = L, b.heads = m.kv_heads, b.head_dim = d, b.tokens = bpf * bs;
  b.tb = bs, b.s_tb = page, b.s_l = bpf * page, b.hr = hr, b.s_w = L * bpf * page;
  if (lay == "nhd") b.s_kv = d, b.s_h = 2 * d, b.s_t = hr * 2 * d;
  if (lay == "hnd") b.s_kv = d, b.s_h = bs * 2 * d, b.s_t = 2 * d;
  if (lay == "split") b.s_kv = bs * hr * d, b.s_t = hr * d, b.s_h = d;
  b.bytes = (static_cast<uint64_t>(raw) + kRowAlign - 1) / kRowAlign * kRowAlign;
  return b;
}

}  // namespace

const StoreKind& vllm_kind() {
  static const StoreKind k{"vllm", probe, scan, check, map};
  return k;
}

}  // namespace kvtool::stores
