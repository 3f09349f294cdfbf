// inspect_store / verify_store (kvtool/store_check.h): a store's names, its configuration against
// the model, every block's size, its values (finite, max|x| per layer and head), vLLM's CRC32C
// attribute and hard links, and (verify --seal) the digests of a seal.
#include <sys/xattr.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <map>
#include <thread>

#include "kvtool/half.h"
#include "kvtool/progress.h"
#include "kvtool/store_check.h"

namespace kvtool {

namespace {

constexpr uint64_t kMaxBlockBytes = 4ull << 30;  // one block file read whole; no stack writes larger

struct BlockJob {
  const StoreFile* file;
  BlockMap map;
  size_t ns;  // index into the report's namespaces
};

// What one block's read found: per (layer, head) health in the namespace's [layers][heads] grid.
struct BlockResult {
  std::vector<HeadHealth> grid;
  std::vector<StoreFinding> findings;
};

// Reads the block's values through its map into `r.grid` ([layers][heads] of the model).
void read_values(const std::vector<uint8_t>& bytes, const BlockJob& j, int64_t model_heads, BlockResult& r) {
  const BlockMap& b = j.map;
  const uint8_t* data = bytes.data() + b.offset;
  KVT_CHECK(static_cast<uint64_t>(b.span() * b.elem_bytes) <= bytes.size() - b.offset, INTERNAL,
            "the map of '" << j.file->entry.path << "' passes its end");
  KVT_CHECK(b.first_layer + b.layers <= static_cast<int64_t>(r.grid.size()) / model_heads &&
                b.first_head + b.heads <= model_heads,
            INTERNAL, "the map of '" << j.file->entry.path << "' names a layer or head the model does not have");
  std::string first_bad;
  std::vector<float> row(static_cast<size_t>(b.head_dim));
  for (int64_t l = 0; l < b.layers; ++l)
    for (int64_t h = 0; h < b.heads; ++h) {
      HeadHealth& g = r.grid[static_cast<size_t>((b.first_layer + l) * model_heads + b.first_head + h)];
      for (int64_t kv = 0; kv < 2; ++kv)
        for (int64_t t = 0; t < b.tokens; ++t) {
          const int64_t base = b.element(kv, l, t, h);
          decode_block_values(b, data, base, b.head_dim, row.data());
          g.values += static_cast<uint64_t>(b.head_dim);
          for (float x : row) {
            if (std::isfinite(x)) {
              g.max_abs = std::max(g.max_abs, static_cast<double>(std::fabs(x)));
            } else if (!g.nonfinite++ && first_bad.empty()) {
              first_bad = std::string(kv ? "V" : "K") + " of layer " + std::to_string(b.first_layer + l) + ", head " +
                          std::to_string(b.first_head + h) + ", token " + std::to_string(t);
            }
          }
        }
    }
  if (!first_bad.empty())
    r.findings.push_back({Reason::NON_FINITE, j.file->entry.path, "NaN or Inf values, first in " + first_bad, false});
}

// vLLM's proposed per-block CRC32C: four big-endian bytes in user.vllm.kv_crc32c over the whole
// file. Checked on every block that carries one (an attribute costs a call; only those files are read).
void check_crcs(const DirectoryTree& tree, const StoreScan& s, std::vector<StoreFinding>& out) {
  for (const StoreFile& f : s.files) {
    if (f.role != StoreFile::Role::block) continue;
    try {
      TreeFile file(tree, f.entry.path);
      uint8_t x[64];
      const ssize_t n = fgetxattr(file.fd(), "user.vllm.kv_crc32c", x, sizeof x);
      if (n < 0 && (errno == ENODATA || errno == ENOTSUP)) continue;  // no attribute: vLLM's checksums are opt-in
      if (n != 4) {
        out.push_back(
            {Reason::CHECKSUM_MISMATCH, f.entry.path,
             "its user.vllm.kv_crc32c attribute is not 4 bytes (vLLM writes the CRC32C as 4 big-endian bytes)", false});
        continue;
      }
      const uint32_t want = (uint32_t{x[0]} << 24) | (uint32_t{x[1]} << 16) | (uint32_t{x[2]} << 8) | x[3];
      uint32_t got = 0;
      std::vector<uint8_t> buf(1 << 20);
      for (uint64_t at = 0; at < file.file().size(); at += buf.size()) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), file.file().size() - at));
        file.file().pread_exact(at, n, buf.data());
        got = crc32c(got, buf.data(), n);
      }
      if (got != want)
        out.push_back(
            {Reason::CHECKSUM_MISMATCH, f.entry.path,
             "its bytes have CRC32C " + std::to_string(got) + "; its user.vllm.kv_crc32c says " + std::to_string(want),
             false});
    } catch (const Error& e) {
      if (tree.exists(f.entry.path)) out.push_back({e.reason(), f.entry.path, e.what(), false});
      // else removed since the listing (a live store evicts blocks): not a finding
    }
  }
}

void read_block(const DirectoryTree& tree, const BlockJob& j, int64_t model_heads, bool values, BlockResult& r) {
  if (!values) return;
  try {
    TreeFile f(tree, j.file->entry.path);
    KVT_CHECK(f.file().size() == j.map.bytes && f.file().size() <= kMaxBlockBytes, BLOCK_SIZE_MISMATCH,
              "it changed size while it was checked");
    std::vector<uint8_t> bytes(static_cast<size_t>(f.file().size()));
    f.file().pread_exact(0, bytes.size(), bytes.data());
    read_values(bytes, j, model_heads, r);
  } catch (const Error& e) {
    if (tree.exists(j.file->entry.path)) r.findings.push_back({e.reason(), j.file->entry.path, e.what(), false});
    // else removed since the listing (a live store evicts blocks): not a finding
  }
}

// Reads the jobs on `threads` threads; results in job order (the report is the same at any count).
std::vector<BlockResult> read_blocks(const DirectoryTree& tree, const std::vector<BlockJob>& jobs, const StoreModel& m,
                                     const std::vector<bool>& values, const StoreCheckOptions& o) {
  std::vector<BlockResult> out(jobs.size());
  Progress progress("kvtool verify " + tree.root(), static_cast<int64_t>(jobs.size()), o.quiet);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < jobs.size();) {
      out[i].grid.assign(static_cast<size_t>(m.layers * m.kv_heads), HeadHealth{});
      read_block(tree, jobs[i], m.kv_heads, values[i], out[i]);
      progress.advance();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, o.threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  progress.finish();
  return out;
}

bool chosen(size_t i, size_t n, int64_t sample) {
  if (sample <= 0 || static_cast<size_t>(sample) >= n) return true;
  return (i * static_cast<size_t>(sample)) / n != ((i + 1) * static_cast<size_t>(sample)) / n;
}

void count_roles(const StoreScan& s, StoreReport& r) {
  for (const StoreFile& f : s.files) {
    r.blocks += f.role == StoreFile::Role::block;
    r.configs += f.role == StoreFile::Role::config;
    r.temporaries += f.role == StoreFile::Role::temporary;
    r.foreign += f.role == StoreFile::Role::foreign;
    if (f.role == StoreFile::Role::block) r.block_bytes += f.entry.size;
  }
}

// The blocks to read: those with a map whose size matches (others become findings or "not read").
std::vector<BlockJob> plan_reads(const StoreScan& s, const StoreModel& m, const StoreCheckOptions& o, StoreReport& r,
                                 std::vector<bool>& values) {
  std::map<std::string, int64_t> why_count;
  std::vector<BlockJob> jobs;
  std::vector<const StoreFile*> blocks;
  for (const StoreFile& f : s.files)
    if (f.role == StoreFile::Role::block) blocks.push_back(&f);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const StoreFile& f = *blocks[i];
    std::string why;
    const std::optional<BlockMap> b = block_map(s, f, m, o.store, why);
    if (b && f.entry.size != b->bytes) {
      r.findings.push_back(
          {Reason::BLOCK_SIZE_MISMATCH, f.entry.path,
           "it holds " + std::to_string(f.entry.size) + " bytes; its geometry gives " + std::to_string(b->bytes),
           false});
      continue;
    }
    const bool decode = b && !b->dtype.empty() && chosen(i, blocks.size(), o.sample);
    if (b && b->dtype.empty()) ++why_count[why];
    if (!b) ++why_count[why];
    if (!b) continue;
    const size_t ns = static_cast<size_t>(s.find(f.ns) - s.namespaces.data());
    jobs.push_back({&f, *b, ns});
    values.push_back(decode);
  }
  for (const auto& [why, n] : why_count) r.not_read.emplace_back(why, n);
  return jobs;
}

void add_health(const std::vector<BlockJob>& jobs, const std::vector<BlockResult>& res, const StoreScan& s,
                const StoreModel& m, StoreReport& r) {
  std::vector<std::vector<HeadHealth>> per(s.namespaces.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    r.findings.insert(r.findings.end(), res[i].findings.begin(), res[i].findings.end());
    auto& g = per[jobs[i].ns];
    if (g.empty()) g.assign(res[i].grid.size(), HeadHealth{});
    for (size_t k = 0; k < g.size(); ++k) {
      g[k].values += res[i].grid[k].values, g[k].nonfinite += res[i].grid[k].nonfinite;
      g[k].max_abs = std::max(g[k].max_abs, res[i].grid[k].max_abs);
    }
  }
  for (size_t n = 0; n < per.size(); ++n)
    for (size_t k = 0; k < per[n].size(); ++k) {
      HeadHealth h = per[n][k];
      if (!h.values) continue;
      h.ns = s.namespaces[n].name;
      h.layer = static_cast<int64_t>(k) / m.kv_heads, h.head = static_cast<int64_t>(k) % m.kv_heads;
      r.health.push_back(h);
    }
}

void hard_links(const StoreScan& s, StoreReport& r) {
  for (const StoreFile& f : s.files)
    if (f.role == StoreFile::Role::block && f.entry.links > 1)
      r.findings.push_back({Reason::DUPLICATE_BLOCK, f.entry.path,
                            "the file has " + std::to_string(f.entry.links) + " names (hard links)", false});
}

// A folder that is no store, checked against a seal of kind "directory": the seal only.
StoreReport seal_only(const std::string& root, const StoreCheckOptions& o) {
  StoreReport r;
  r.root = root, r.kind = "directory";
  const json seal = read_seal(o.seal);
  KVT_CHECK(seal["kind"] == "directory", STORE_UNRECOGNIZED,
            "'" << root << "' is no cache store kvtool recognises, and the seal is of a "
                << seal["kind"].get<std::string>() << " store");
  check_seal(root, seal, o.trusted_keys, o.threads, o.quiet, r.findings, r.sealed_files, o.shard_index, o.shard_count);
  return r;
}

StoreReport examine(const std::string& root, const StoreCheckOptions& o, bool verify) {
  const DirectoryTree tree(root);
  std::optional<StoreScan> scanned;
  try {
    scanned = scan_cache_store(tree, o.store);
  } catch (const Error& e) {
    if (e.reason() != Reason::STORE_UNRECOGNIZED || !verify || o.seal.empty() || !o.model.empty() || !o.prompt.empty())
      throw;
    return seal_only(root, o);
  }
  const StoreScan& s = *scanned;
  StoreReport r;
  r.root = root, r.kind = s.kind, r.namespaces = s.namespaces, r.findings = s.findings;
  count_roles(s, r);
  const std::optional<StoreModel> m =
      o.model.empty() ? std::nullopt : std::optional<StoreModel>(read_store_model(o.model));
  if (verify) check_store_config(s, m ? &*m : nullptr, o.store, r.findings);
  if (verify) hard_links(s, r);
  if (verify) check_crcs(tree, s, r.findings);
  if (m) {
    std::vector<bool> values;
    const std::vector<BlockJob> jobs = plan_reads(s, *m, o, r, values);
    const std::vector<BlockResult> res = read_blocks(tree, jobs, *m, values, o);
    r.blocks_read = std::count(values.begin(), values.end(), true);
    add_health(jobs, res, s, *m, r);
  } else {
    r.not_read.emplace_back("no model: give one for sizes and values (--model M.gguf|config.json)", r.blocks);
  }
  if (verify && !o.prompt.empty()) {
    KVT_CHECK(!o.model.empty(), USAGE, "a prompt's blocks are compared with a GGUF model: give model (--model M.gguf)");
    r.content = check_store_prompt(root, o, o.model, r.findings);
  }
  if (verify && !o.seal.empty())
    check_seal(root, read_seal(o.seal), o.trusted_keys, o.threads, o.quiet, r.findings, r.sealed_files, o.shard_index,
               o.shard_count);
  return r;
}

}  // namespace

bool StoreReport::ok() const {
  return std::none_of(findings.begin(), findings.end(), [](const StoreFinding& f) { return !f.warning; });
}

json StoreReport::to_json() const {
  json j = {{"schema_version", kJsonSchemaVersion}, {"root", root}, {"kind", kind}, {"ok", ok()}};
  j["counts"] = {{"blocks", blocks},           {"block_bytes", block_bytes}, {"configs", configs},
                 {"temporaries", temporaries}, {"foreign", foreign},         {"blocks_read", blocks_read}};
  for (const StoreNamespace& n : namespaces)
    j["namespaces"].push_back({{"name", n.name},
                               {"model", n.model},
                               {"dtype", n.dtype},
                               {"world_size", n.world_size},
                               {"blocks", n.blocks},
                               {"bytes", n.bytes},
                               {"config", n.config}});
  for (const auto& [why, n] : not_read) j["not_read"].push_back({{"why", why}, {"blocks", n}});
  for (const HeadHealth& h : health)
    j["health"].push_back({{"namespace", h.ns},
                           {"layer", h.layer},
                           {"head", h.head},
                           {"values", h.values},
                           {"nonfinite", h.nonfinite},
                           {"max_abs", h.max_abs}});
  j["findings"] = json::array();
  for (const StoreFinding& f : findings)
    j["findings"].push_back(
        {{"reason", reason_name(f.reason)}, {"path", f.path}, {"message", f.message}, {"warning", f.warning}});
  if (sealed_files) j["sealed_files"] = sealed_files;
  if (content) j["content"] = content->to_json();
  return j;
}

StoreReport inspect_store(const std::string& root, const StoreCheckOptions& o) { return examine(root, o, false); }
StoreReport verify_store(const std::string& root, const StoreCheckOptions& o) { return examine(root, o, true); }

}  // namespace kvtool
