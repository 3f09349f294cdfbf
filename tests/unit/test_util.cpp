#include "test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kvtool/error.h"
#include "kvtool/source_binding.h"

namespace kvtool::test {

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvtool-test-XXXXXX").string();
  char* p = mkdtemp(tmpl.data());
  if (!p) throw std::runtime_error("mkdtemp failed");
  path = p;
}
TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string shared_dir() {
  if (const char* s = std::getenv("KVTOOL_SHARED")) return s;
  return KVTOOL_SHARED_DEFAULT;
}

std::string source_dir() { return KVTOOL_SOURCE_DEFAULT; }

void small_dump(const std::string& path, uint64_t seed, DType dt, const IdentityOptions& id) {
  SynthOptions o;
  o.layers = 2;
  o.kv_heads = 2;
  o.q_heads = 4;
  o.head_dim = 16;
  o.tokens = 48;
  o.seed = seed;
  o.dtype = dt;
  o.query_count = 8;
  synth_dump(o, id, path);
}

void kind_dump(const std::string& path, int64_t tokens, uint64_t seed, int64_t query_count, int64_t head_dim,
               int64_t layers) {
  SynthOptions o;
  o.layers = layers;
  o.kv_heads = 2;
  o.q_heads = 4;
  o.head_dim = head_dim;
  o.tokens = tokens;
  o.seed = seed;
  o.dtype = DType::f32;
  o.query_count = query_count;
  synth_dump(o, {}, path);
}

BuildOptions quiet_build(const std::string& out, int threads, uint64_t seed) {
  BuildOptions b;
  b.output = out;
  b.threads = threads;
  b.quiet = true;
  b.seed = seed;
  return b;
}

void copy_dump(const std::string& src, const std::string& dst, const std::function<void(DumpSpec&)>& edit,
               const std::function<void(int64_t, int64_t, std::vector<float>&, std::vector<float>&)>& poke) {
  DumpReader r(src);
  DumpSpec spec;
  spec.id = r.info().id;
  spec.geo = r.info().geo;
  spec.committed_frontier = r.info().committed_frontier;
  spec.generator = r.info().generator;
  spec.synthetic = r.info().synthetic;
  DumpGeometry src_geo = spec.geo;
  if (edit) edit(spec);
  bool copy_q = spec.geo.q_tokens > 0 && r.info().has_q && spec.geo.q_heads == src_geo.q_heads &&
                spec.geo.head_dim == src_geo.head_dim && spec.geo.layers == src_geo.layers &&
                spec.geo.q_tokens == src_geo.q_tokens;
  if (!copy_q) spec.geo.q_tokens = 0;
  const auto& g = spec.geo;
  DumpWriter w(dst, spec);
  std::vector<float> k(static_cast<size_t>(g.tokens * g.head_dim)), v(k.size());
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      std::vector<float> sk(static_cast<size_t>(src_geo.tokens * src_geo.head_dim)), sv(sk.size());
      r.read_k(l % src_geo.layers, h % src_geo.kv_heads, 0, src_geo.tokens, sk.data());
      r.read_v(l % src_geo.layers, h % src_geo.kv_heads, 0, src_geo.tokens, sv.data());
      for (int64_t t = 0; t < g.tokens; ++t)
        for (int64_t i = 0; i < g.head_dim; ++i) {
          int64_t st = t % src_geo.tokens, si = i % src_geo.head_dim;
          k[t * g.head_dim + i] = sk[st * src_geo.head_dim + si];
          v[t * g.head_dim + i] = sv[st * src_geo.head_dim + si];
        }
      if (poke) poke(l, h, k, v);
      w.write_kv(l, h, k.data(), v.data());
    }
  if (copy_q) {
    std::vector<float> q(static_cast<size_t>(g.q_tokens * g.head_dim));
    for (int64_t l = 0; l < g.layers; ++l)
      for (int64_t h = 0; h < g.q_heads; ++h) {
        r.read_q(l, h, q.data());
        w.write_q(l, h, q.data());
      }
    w.write_q_positions(r.q_positions());
  }
  if (r.info().has_tokens && g.tokens == src_geo.tokens) w.write_tokens(r.tokens());
  w.commit();
}

void write_test_artifact(const std::string& dump, const std::string& out, const SigningKey* key, int64_t coverage,
                         int zstd_level) {
  DumpReader r(dump);
  const auto& g = r.info().geo;
  int64_t E = coverage < 0 ? r.info().committed_frontier : coverage;
  SourceBinding b = bind_source(r, E);
  ArtifactWriter w(out, zstd_level);
  std::vector<float> k(static_cast<size_t>(E * g.head_dim));
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      r.read_k(l, h, 0, E, k.data());
      w.add_section("keys", "f32", {E, g.head_dim}, k.data(), k.size() * 4, l, h);
      std::vector<uint16_t> ids(static_cast<size_t>(E));
      for (int64_t t = 0; t < E; ++t) ids[t] = static_cast<uint16_t>((t * 7 + l + h) % 65536);
      w.add_section("ids", "u16", {E}, ids.data(), ids.size() * 2, l, h);
    }
  std::vector<uint8_t> note(100, 0x5a);
  w.add_section("note", "u8", {100}, note.data(), note.size());
  ManifestCore core;
  core.kind = "container-test";
  core.params = {{"zstd_level", zstd_level}, {"purpose", "container self-test"}};
  core.source = b;
  w.finish(core, key);
}

namespace {
// What a builder supplied for r's manifest (the writer adds the rest).
ManifestCore core_of(const ArtifactReader& r) {
  ManifestCore core;
  core.kind = r.kind();
  core.params = r.manifest()["params"];
  core.source = r.source();
  core.index_generation = r.manifest()["index_generation"];
  core.selector_generation = r.manifest()["selector_generation"];
  core.kind_data = r.manifest()["kind_data"];
  return core;
}
}  // namespace

void forge_artifact(const ArtifactReader& r, const std::string& out, int64_t layer, int64_t kv_head,
                    const std::function<void(const SectionEntry&, std::vector<uint8_t>&)>& edit,
                    const std::function<void(json&)>& meta) {
  ArtifactWriter w(out, 0);
  for (const auto& s : r.sections()) {
    auto bytes = r.read_section(s);
    if (s.layer == layer && s.kv_head == kv_head) edit(s, bytes);
    w.add_section(s.name, s.dtype, s.shape, bytes.data(), bytes.size(), s.layer, s.kv_head);
  }
  ManifestCore core = core_of(r);
  if (meta) meta(core.kind_data);
  w.finish(core);
}

namespace {
bool names_section(const SectionEntry& e, const std::string& ref) {
  const size_t at = ref.find('@');
  if (at == std::string::npos) return e.name == ref && e.layer == -1 && e.kv_head == -1;
  const size_t comma = ref.find(',', at);
  return e.name == ref.substr(0, at) && e.layer == std::stoll(ref.substr(at + 1, comma - at - 1)) &&
         e.kv_head == std::stoll(ref.substr(comma + 1));
}
}  // namespace

void repack_artifact(const std::string& in, const std::string& out, const Repack& rp) {
  {
    ArtifactReader r(in);
    ArtifactWriter w(out, 0);
    for (const auto& s : r.sections()) {
      bool dropped = false;
      for (const auto& d : rp.drop) dropped = dropped || names_section(s, d);
      if (dropped) continue;
      auto bytes = r.read_section(s);
      for (const auto& [ref, byte] : rp.fill)
        if (names_section(s, ref) && !bytes.empty()) std::memset(bytes.data(), byte, bytes.size());
      w.add_section(s.name, s.dtype, s.shape, bytes.data(), bytes.size(), s.layer, s.kv_head);
    }
    w.finish(core_of(r));
  }
  rewrite_manifest(out, [&](json& m) {
    for (const auto& [pointer, value] : rp.set) m[json::json_pointer(pointer)] = value;
    m["params_digest"] = to_hex(sha256(canonical_json(m["params"])));
  });
}

std::string reason_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.reason_name();
  }
  return "OK";
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

namespace {
uint64_t le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
}  // namespace

void rewrite_manifest(const std::string& path, const std::function<void(json&)>& edit, bool canonical) {
  auto b = read_bytes(path);
  const uint8_t* f = b.data() + b.size() - kKviFooterSize;
  uint64_t moff = le64(f), msize = le64(f + 8), soff = le64(f + 16), ssize = le64(f + 24);
  json m = json::parse(std::string(reinterpret_cast<const char*>(b.data() + moff), msize));
  edit(m);
  std::string text = canonical ? canonical_json(m) : m.dump(1);
  std::vector<uint8_t> sig;
  if (ssize) sig.assign(b.begin() + static_cast<long>(soff), b.begin() + static_cast<long>(soff + ssize));
  std::vector<uint8_t> out(b.begin(), b.begin() + static_cast<long>(moff));
  out.insert(out.end(), text.begin(), text.end());
  uint64_t new_soff = 0;
  if (!sig.empty()) {
    while (out.size() % kKviAlign) out.push_back(0);
    new_soff = out.size();
    out.insert(out.end(), sig.begin(), sig.end());
  }
  std::vector<uint8_t> footer(f, f + kKviFooterSize);
  put64(footer.data() + 8, text.size());
  put64(footer.data() + 16, new_soff);
  Digest d = sha256(text);
  std::memcpy(footer.data() + 32, d.data(), 32);
  out.insert(out.end(), footer.begin(), footer.end());
  put64(out.data() + 16, out.size());
  write_bytes(path, out);
}

}  // namespace kvtool::test
