// fuzz_cache_store: bytes as a small directory tree (formats/cache-stores.md) through the store
// scanners, the model checks, block maps, inspect/verify (values included) and the seal reader.
// Input: a kind byte (auto, vllm, lmcache, sglang), a layout byte, then up to 12 entries, each a
// '\n'-terminated relative path, a 2-byte little-endian length and that many content bytes; the
// rest of the input is also read as a seal. A block map whose last value lies past the file it
// maps is a finding, as is any INTERNAL error or crash.
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "fuzz_common.h"
#include "kvtool/store_check.h"

namespace {

void fail(const char* what) {
  std::fprintf(stderr, "fuzz finding: cache store: %s\n", what);
  std::abort();
}

int remove_entry(const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }

// A relative path of at most 5 components, none empty, "." or "..": anything else is skipped.
bool safe_path(const std::string& p) {
  if (p.empty() || p.size() > 200 || p[0] == '/') return false;
  int parts = 0;
  size_t start = 0;
  for (size_t i = 0; i <= p.size(); ++i)
    if (i == p.size() || p[i] == '/') {
      const std::string c = p.substr(start, i - start);
      if (c.empty() || c == "." || c == ".." || c.find('\0') != std::string::npos) return false;
      ++parts, start = i + 1;
    }
  return parts <= 5;
}

void write_entry(const std::string& root, const std::string& rel, const std::vector<uint8_t>& bytes) {
  for (size_t i = rel.find('/'); i != std::string::npos; i = rel.find('/', i + 1))
    ::mkdir((root + "/" + rel.substr(0, i)).c_str(), 0700);
  std::ofstream(root + "/" + rel, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void check_maps(const kvtool::StoreScan& s, const kvtool::StoreModel& m, const kvtool::StoreOptions& o) {
  for (const kvtool::StoreFile& f : s.files) {
    std::string why;
    const auto b = kvtool::block_map(s, f, m, o, why);
    if (!b || b->dtype.empty() || f.entry.size != b->bytes) continue;
    if (b->first_layer + b->layers > m.layers || b->first_head + b->heads > m.kv_heads)
      fail("a block map names a layer or head the model does not have");
    if (static_cast<uint64_t>(b->span() * b->elem_bytes) > b->bytes - b->offset)
      fail("a block map passes its file's end");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char* kinds[] = {"", "vllm", "lmcache", "sglang"};
  static const char* layouts[] = {"", "hnd", "split", "KV_T2D", "KV_2TD", "page_first", "page_head", "nhd"};
  kvtool::fuzz::FuzzBytes in{data, size};
  kvtool::StoreCheckOptions o;
  o.store.kind = kinds[in.u8() % 4];
  o.store.memory_format = layouts[in.u8() % 8];
  o.store.block_tokens = 4;
  o.quiet = true;
  char tmpl[] = "/tmp/kvtool-fuzz-store.XXXXXX";
  if (!::mkdtemp(tmpl)) return 0;
  const std::string dir = tmpl, root = dir + "/s";
  ::mkdir(root.c_str(), 0700);
  for (int e = 0; e < 12 && in.at < in.n; ++e) {
    std::string path;
    for (uint8_t c; in.at < in.n && (c = in.u8()) != '\n';) path.push_back(static_cast<char>(c));
    const size_t len = in.u8() | (size_t{in.u8()} << 8);
    const std::vector<uint8_t> bytes = in.take(len);
    if (safe_path(path)) write_entry(root, path, bytes);
  }
  std::ofstream(dir + "/config.json") << R"({"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 4, "torch_dtype": "float16"})";
  o.model = dir + "/config.json";
  try {
    const kvtool::DirectoryTree tree(root);
    const kvtool::StoreScan s = kvtool::scan_cache_store(tree, o.store);
    const kvtool::StoreModel m = kvtool::read_store_model(o.model);
    std::vector<kvtool::StoreFinding> findings;
    kvtool::check_store_config(s, &m, o.store, findings);
    check_maps(s, m, o.store);
    (void)kvtool::json_text(kvtool::verify_store(root, o).to_json());
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  try {
    std::ofstream(dir + "/seal.json", std::ios::binary)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    const kvtool::json seal = kvtool::read_seal(dir + "/seal.json");
    std::vector<kvtool::StoreFinding> findings;
    int64_t n = 0;
    kvtool::check_seal(root, seal, {}, 1, true, findings, n);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}
