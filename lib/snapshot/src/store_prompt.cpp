// A prompt's blocks in a cache store (kvtool/store_prompt.h, formats/cache-stores.md): the stacks'
// block hashes recomputed, the blocks found in position order, read as one snapshot.
#include "kvtool/store_prompt.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "kvtool/gguf.h"
#include "kvtool/half.h"
#include "kvtool/sha256.h"

namespace kvtool {

namespace {

// pickle.dumps(obj, protocol=5) of the objects vLLM hashes (bytes, tuples of non-negative ints,
// None, str), framed as CPython's C pickler frames: a frame is committed at the first object
// boundary at or past 64 KiB, and the last one (with STOP) when it holds at least 4 bytes.
class Pickle5 {
 public:
  void bytes(const uint8_t* p, size_t n) {
    frame_ += 'C', frame_ += static_cast<char>(n);  // SHORT_BINBYTES (n < 256 here)
    frame_.append(reinterpret_cast<const char*>(p), n);
    memoize();
  }
  void str(const std::string& s) {
    if (s.size() < 256) {
      frame_ += '\x8c', frame_ += static_cast<char>(s.size());  // SHORT_BINUNICODE
    } else {
      frame_ += 'X';  // BINUNICODE
      for (int i = 0; i < 4; ++i) frame_ += static_cast<char>((s.size() >> (8 * i)) & 0xff);
    }
    frame_ += s;
    memoize();
  }
  void none() { frame_ += 'N', boundary(); }
  void tuple_of_ints(const int32_t* t, size_t n) {
    if (n == 0) return frame_ += ')', boundary();  // EMPTY_TUPLE, never memoized
    if (n > 3) frame_ += '(';                      // MARK
    for (size_t i = 0; i < n; ++i) integer(t[i]);
    frame_ += n > 3 ? 't' : static_cast<char>(0x84 + n);  // TUPLE or TUPLE1..3
    memoize();
  }
  void tuple3() { frame_ += '\x87', memoize(); }
  std::string finish() {
    frame_ += '.';
    commit();
    return out_;
  }

 private:
  void integer(int32_t v) {
    const auto u = static_cast<uint32_t>(v);
    if (v >= 0 && v < 256) {
      frame_ += 'K', frame_ += static_cast<char>(u);
    } else if (v >= 0 && v < 65536) {
      frame_ += 'M', frame_ += static_cast<char>(u & 0xff), frame_ += static_cast<char>(u >> 8);
    } else {
      frame_ += 'J';
      for (int i = 0; i < 4; ++i) frame_ += static_cast<char>((u >> (8 * i)) & 0xff);
    }
    boundary();
  }
  void memoize() { frame_ += '\x94', boundary(); }
  void boundary() {
    if (frame_.size() >= 65536) commit();
  }
  void commit() {
    if (frame_.size() >= 4) {
      out_ += '\x95';
      for (int i = 0; i < 8; ++i) out_ += static_cast<char>((static_cast<uint64_t>(frame_.size()) >> (8 * i)) & 0xff);
    }
    out_ += frame_;
    frame_.clear();
  }
  std::string out_ = "\x80\x05", frame_;
};

DType dump_dtype(const std::string& d) { return d == "f32" ? DType::f32 : d == "bf16" ? DType::bf16 : DType::f16; }

struct FoundBlock {
  std::vector<std::string> files;
  std::vector<BlockMap> maps;
};

class StorePromptSnapshot final : public KvSnapshot {
 public:
  StorePromptSnapshot(const std::string& root, std::vector<FoundBlock> blocks, SnapshotInfo info, int64_t span,
                      StoreModel model)
      : tree_(root), blocks_(std::move(blocks)), info_(std::move(info)), span_(span), model_(std::move(model)) {}
  const SnapshotInfo& info() const override { return info_; }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override;
  std::string label(char what, int64_t layer) const override {
    return std::string(1, what) + " of layer " + std::to_string(layer) + " in the store's blocks";
  }
  // A GGUF model names the dump's model and RoPE, as for a llama.cpp state (llama_state.cpp).
  void complete_meta(json& meta) const override {
    if (!model_.gguf) return;
    const GgufModel g = read_gguf_model(model_.path);
    if (!meta.contains("model_artifact_sha256")) meta["model_artifact_sha256"] = model_sha256(model_.path);
    if (!meta.contains("rope_config") && !g.rope_config().empty()) meta["rope_config"] = g.rope_config();
    if (!meta.contains("generator")) meta["generator"] = "kvtool import (" + info_.format + ")";
  }

 private:
  DirectoryTree tree_;
  std::vector<FoundBlock> blocks_;
  SnapshotInfo info_;
  int64_t span_;  // tokens a block holds
  StoreModel model_;
};

void StorePromptSnapshot::read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) {
  const int64_t H = info_.geo.kv_heads, T = info_.geo.tokens, d = info_.geo.head_dim;
  k.assign(static_cast<size_t>(H * T * d), 0.f);
  v.assign(k.size(), 0.f);
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < blocks_.size(); ++i)
    for (size_t f = 0; f < blocks_[i].files.size(); ++f) {
      const BlockMap& b = blocks_[i].maps[f];
      TreeFile file(tree_, blocks_[i].files[f]);
      KVT_CHECK(file.file().size() == b.bytes, BLOCK_SIZE_MISMATCH,
                "'" << blocks_[i].files[f] << "' changed size while it was read");
      bytes.resize(static_cast<size_t>(b.bytes));
      file.file().pread_exact(0, bytes.size(), bytes.data());
      const uint8_t* data = bytes.data() + b.offset;
      const int64_t l = layer - b.first_layer;
      for (int64_t h = 0; h < b.heads; ++h)
        for (int64_t t = 0; t < b.tokens; ++t) {
          const int64_t base = b.element(0, l, t, h);
          const int64_t row = static_cast<int64_t>(i) * span_ + t;
          float* kd = k.data() + ((b.first_head + h) * T + row) * d;
          float* vd = v.data() + ((b.first_head + h) * T + row) * d;
          decode_block_values(b, data, base, d, kd);
          decode_block_values(b, data, base + b.s_kv, d, vd);
        }
    }
}

std::string hex(const Digest& d) { return to_hex(d); }

// The store's block files by path.
using Blocks = std::map<std::string, const StoreFile*>;

// vLLM: per namespace, the leading blocks whose files exist; files of rank 0, group 0.
std::vector<FoundBlock> find_vllm(const StoreScan& s, const Blocks& have, const std::vector<int32_t>& tok,
                                  const StorePromptOptions& po, std::string& ns, int64_t& span, int64_t& wanted) {
  KVT_CHECK(po.hash_seed, USAGE,
            "vLLM names blocks by hashes chained from NONE_HASH, which is random unless the server ran with "
            "PYTHONHASHSEED: give it (hash_seed, --hash-seed)");
  std::vector<FoundBlock> best;
  for (const StoreNamespace& n : s.namespaces) {
    if (!n.config.is_object() || (!po.namespace_name.empty() && n.name != po.namespace_name)) continue;
    const json& c = n.config;
    if (c["kv_cache_groups"].size() != 1) continue;
    const int64_t tph = c["tokens_per_hash"].get<int64_t>(), bpf = c["blocks_per_file"].get<int64_t>();
    const int64_t F = bpf * c["kv_cache_groups"][0]["tokens_per_block"].get<int64_t>();
    if (F % tph != 0) continue;
    const std::vector<Digest> h = vllm_block_hashes(tok, tph, *po.hash_seed);
    std::vector<FoundBlock> got;
    for (int64_t i = 0; (i + 1) * F <= static_cast<int64_t>(tok.size()); ++i) {
      const std::string x = hex(h[static_cast<size_t>((i + 1) * F / tph - 1)]);
      const std::string path = n.name + "_r0/" + x.substr(0, 3) + "/" + x.substr(3, 2) + "_g0/" + x + ".bin";
      if (!have.count(path)) break;
      got.push_back({{path}, {}});
    }
    if (got.size() > best.size() || ns.empty())
      best = got, ns = n.name, span = F, wanted = static_cast<int64_t>(tok.size()) / F;
  }
  return best;
}

// SGLang: per family (model, tp size), the leading pages every rank stored.
std::vector<FoundBlock> find_sglang(const StoreScan& s, const Blocks& have, const std::vector<int32_t>& tok,
                                    const StoreOptions& so, const StorePromptOptions& po, std::string& ns,
                                    int64_t& span, int64_t& wanted) {
  KVT_CHECK(so.block_tokens > 0, USAGE, "SGLang pages record no page size: give block_tokens (--block-tokens)");
  const std::vector<Digest> keys = sglang_page_keys(tok, so.block_tokens);
  std::map<std::string, std::vector<const StoreNamespace*>> families;  // by family, ranks in order
  for (const StoreNamespace& n : s.namespaces) families[n.config.value("family", "")].push_back(&n);
  std::vector<FoundBlock> best;
  for (auto& [family, ranks] : families) {
    std::sort(ranks.begin(), ranks.end(), [](const StoreNamespace* a, const StoreNamespace* b) {
      return a->config.value("tp_rank", 0) < b->config.value("tp_rank", 0);
    });
    if (!po.namespace_name.empty() && ranks.front()->name != po.namespace_name) continue;
    if (static_cast<int64_t>(ranks.size()) != ranks.front()->world_size) continue;  // a rank lacks every page
    std::vector<FoundBlock> got;
    for (const Digest& k : keys) {
      FoundBlock b;
      for (const StoreNamespace* r : ranks) b.files.push_back(hex(k) + r->name + ".bin");
      if (!std::all_of(b.files.begin(), b.files.end(), [&](const std::string& f) { return have.count(f) > 0; })) break;
      got.push_back(b);
    }
    if (got.size() > best.size() || ns.empty()) best = got, ns = ranks.front()->name;
  }
  span = so.block_tokens, wanted = static_cast<int64_t>(keys.size());
  return best;
}

}  // namespace

json StorePromptFound::to_json() const {
  return {{"namespace", ns},
          {"block_tokens", block_tokens},
          {"blocks_wanted", blocks_wanted},
          {"blocks_found", files.size()},
          {"files", files},
          {"layout_assumed", layout_assumed}};
}

std::vector<Digest> vllm_block_hashes(const std::vector<int32_t>& tokens, int64_t block_tokens,
                                      const std::string& hash_seed) {
  KVT_CHECK(block_tokens > 0, USAGE, "tokens per block must be positive");
  Pickle5 seed;
  seed.str(hash_seed);
  Digest parent = sha256(seed.finish());
  std::vector<Digest> out;
  for (size_t at = 0; at + static_cast<size_t>(block_tokens) <= tokens.size();
       at += static_cast<size_t>(block_tokens)) {
    Pickle5 p;
    p.bytes(parent.data(), parent.size());
    p.tuple_of_ints(tokens.data() + at, static_cast<size_t>(block_tokens));
    p.none();
    p.tuple3();
    parent = sha256(p.finish());
    out.push_back(parent);
  }
  return out;
}

std::vector<Digest> sglang_page_keys(const std::vector<int32_t>& tokens, int64_t page_tokens) {
  KVT_CHECK(page_tokens > 0, USAGE, "tokens per page must be positive");
  std::vector<Digest> out;
  for (size_t at = 0; at + static_cast<size_t>(page_tokens) <= tokens.size(); at += static_cast<size_t>(page_tokens)) {
    Sha256 h;
    if (!out.empty()) h.update(out.back().data(), out.back().size());
    for (size_t i = at; i < at + static_cast<size_t>(page_tokens); ++i) {
      const auto u = static_cast<uint32_t>(tokens[i]);
      const uint8_t le[4] = {static_cast<uint8_t>(u), static_cast<uint8_t>(u >> 8), static_cast<uint8_t>(u >> 16),
                             static_cast<uint8_t>(u >> 24)};
      h.update(le, 4);
    }
    out.push_back(h.finish());
  }
  return out;
}

std::unique_ptr<KvSnapshot> open_store_prompt(const std::string& root, const StoreOptions& so, const StoreModel& model,
                                              const std::vector<int32_t>& tokens, const StorePromptOptions& po,
                                              StorePromptFound& found) {
  const DirectoryTree tree(root);
  const StoreScan s = scan_cache_store(tree, so);
  KVT_CHECK(s.kind != "lmcache", USAGE,
            "LMCache names chunks by Python's hash() of the tokens, which kvtool cannot recompute: give the chunk "
            "files in token order to `kvtool import --format lmcache-raw` (formats/lmcache.md)");
  Blocks have;
  for (const StoreFile& f : s.files)
    if (f.role == StoreFile::Role::block) have[f.entry.path] = &f;
  int64_t span = 0, wanted = 0;
  std::vector<FoundBlock> blocks = s.kind == "vllm" ? find_vllm(s, have, tokens, po, found.ns, span, wanted)
                                                    : find_sglang(s, have, tokens, so, po, found.ns, span, wanted);
  found.block_tokens = span, found.blocks_wanted = wanted;
  KVT_CHECK(!blocks.empty(), STORE_MISS,
            "the store holds none of the prompt's " << wanted << " blocks of " << span
                                                    << " tokens (another prompt, model, hash seed or page size)");
  SnapshotInfo info;
  for (FoundBlock& b : blocks) {
    found.files.push_back(b.files);
    for (const std::string& f : b.files) {
      std::string why;
      const std::optional<BlockMap> m = block_map(s, *have[f], model, so, why);
      KVT_CHECK(m && !m->dtype.empty(), USAGE, "the block '" << f << "' cannot be read: " << why);
      KVT_CHECK(have[f]->entry.size == m->bytes, BLOCK_SIZE_MISMATCH,
                "'" << f << "' holds " << have[f]->entry.size << " bytes; its geometry gives " << m->bytes);
      KVT_CHECK(m->tokens == span && m->layers == model.layers, USAGE,
                "the block '" << f << "' does not hold whole layers of " << span << " tokens");
      b.maps.push_back(*m);
      found.layout_assumed = found.layout_assumed || m->layout_assumed;
      info.source_dtype = m->dtype;
    }
  }
  const int64_t T = static_cast<int64_t>(blocks.size()) * span;
  info.format = s.kind + " store";
  info.geo.layers = model.layers, info.geo.kv_heads = model.kv_heads, info.geo.head_dim = model.head_dim;
  info.geo.tokens = T, info.geo.dtype = dump_dtype(info.source_dtype);
  info.tokens.assign(tokens.begin(), tokens.begin() + T);
  return std::make_unique<StorePromptSnapshot>(root, std::move(blocks), std::move(info), span, model);
}

}  // namespace kvtool
