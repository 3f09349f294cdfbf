// The metadata of a GGUF model file (formats/llama-state.md, "The model's GGUF header"): only the
// key/value section is read, never the tensor infos or data. Values kvtool does not need (the
// tokenizer's arrays among them) are skipped with every length checked against the file.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <variant>

#include "impl/byte_reader.h"
#include "kvtool/gguf.h"
#include "kvtool/identity.h"
#include "kvtool/sha256.h"

namespace kvtool {

namespace {

enum GgufType : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64, COUNT };

// A kept value: a number (with its GGUF type: a bool or an integer is not a float), a string, or a
// short array of numbers (per-layer head counts). A string too long to keep is kept as its length.
struct Number {
  double value = 0;
  uint32_t type = 0;
};
struct LongString {
  uint64_t bytes = 0;
};
struct StringArray {  // its strings skipped, their count kept (tokenizer.ggml.tokens: the vocabulary size)
  uint64_t count = 0;
};
using Value = std::variant<Number, std::string, std::vector<double>, LongString, StringArray>;

constexpr uint64_t kMaxKeys = uint64_t(1) << 20;
constexpr uint64_t kMaxKeptString = 1 << 16;
constexpr uint64_t kMaxKeptArray = 4096;

uint64_t scalar_size(uint32_t t) {
  static const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < COUNT ? sizes[t] : 0;
}

double read_scalar(impl::ByteReader& r, uint32_t t) {
  switch (t) {
    case U8:
    case BOOL:
      return r.get<uint8_t>("a value");
    case I8:
      return r.get<int8_t>("a value");
    case U16:
      return r.get<uint16_t>("a value");
    case I16:
      return r.get<int16_t>("a value");
    case U32:
      return r.get<uint32_t>("a value");
    case I32:
      return r.get<int32_t>("a value");
    case F32:
      return r.get<float>("a value");
    case U64:
      return static_cast<double>(r.get<uint64_t>("a value"));
    case I64:
      return static_cast<double>(r.get<int64_t>("a value"));
    default:
      return r.get<double>("a value");
  }
}

// A string (u64 length, bytes): returned when short enough to keep, else skipped (its length in
// `skipped`).
std::optional<std::string> read_string(impl::ByteReader& r, const char* field, uint64_t* skipped = nullptr) {
  const uint64_t n = r.u64(field);
  r.need(n, field);
  if (n > kMaxKeptString) {
    r.skip(n, field);
    if (skipped) *skipped = n;
    return std::nullopt;
  }
  std::string s(static_cast<size_t>(n), '\0');
  r.read(s.data(), n, field);
  return s;
}

std::optional<Value> read_value(impl::ByteReader& r, uint32_t type, const std::string& key) {
  KVT_CHECK(type < COUNT, BAD_MODEL, r.what() << ": key '" << excerpt(key) << "' has unknown value type " << type);
  if (type == STR) {
    uint64_t skipped = 0;
    auto s = read_string(r, "a string value", &skipped);
    if (!s) return Value(LongString{skipped});
    return Value(*s);
  }
  if (type != ARR) return Value(Number{read_scalar(r, type), type});
  const uint32_t et = r.u32("an array's element type");
  const uint64_t n = r.u64("an array's length");
  KVT_CHECK(et < COUNT && et != ARR, BAD_MODEL,
            r.what() << ": key '" << excerpt(key) << "' is an array of unsupported type " << et);
  if (et == STR) {
    KVT_CHECK(n <= r.remaining() / 8, TRUNCATED,
              r.what() << ": array '" << excerpt(key) << "' claims " << n << " strings");
    for (uint64_t i = 0; i < n; ++i) read_string(r, "a string in an array");
    return Value(StringArray{n});
  }
  const uint64_t es = scalar_size(et);
  KVT_CHECK(n <= r.remaining() / es, TRUNCATED,
            r.what() << ": array '" << excerpt(key) << "' claims " << n << " elements beyond the end of the file");
  if (n > kMaxKeptArray) {
    r.skip(n * es, "an array");
    return std::nullopt;
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = read_scalar(r, et);
  return Value(std::move(v));
}

std::map<std::string, Value> read_metadata(impl::ByteReader& r) {
  char magic[4];
  r.read(magic, 4, "the magic");
  KVT_CHECK(std::memcmp(magic, "GGUF", 4) == 0, BAD_MODEL, r.what() << " is not a GGUF file (no GGUF magic)");
  const uint32_t version = r.u32("the version");
  KVT_CHECK(version == 2 || version == 3, UNSUPPORTED_VERSION,
            r.what() << " is GGUF version " << version << "; kvtool reads versions 2 and 3 (little-endian)");
  r.u64("the tensor count");
  const uint64_t n_kv = r.u64("the key count");
  KVT_CHECK(n_kv <= kMaxKeys && n_kv <= r.remaining() / 12, BAD_MODEL,
            r.what() << " claims " << n_kv << " metadata keys, more than its size allows");
  std::map<std::string, Value> kv;
  for (uint64_t i = 0; i < n_kv; ++i) {
    auto key = read_string(r, "a key");
    KVT_CHECK(key && !key->empty(), BAD_MODEL, r.what() << ": metadata key " << i << " is empty or too long");
    const uint32_t type = r.u32("a value type");
    auto v = read_value(r, type, *key);
    if (v) KVT_CHECK(kv.emplace(*key, std::move(*v)).second, BAD_MODEL, r.what() << ": key '" << *key << "' twice");
  }
  return kv;
}

class Meta {
 public:
  Meta(std::map<std::string, Value> kv, std::string what) : kv_(std::move(kv)), what_(std::move(what)) {}
  bool has(const std::string& k) const { return kv_.count(k) > 0; }
  bool has_prefix(const std::string& p) const {
    auto it = kv_.lower_bound(p);
    return it != kv_.end() && it->first.compare(0, p.size(), p) == 0;
  }
  std::string str(const std::string& k) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return "";
    if (const auto* l = std::get_if<LongString>(&it->second))
      KVT_THROW(BAD_MODEL, what_ << ": '" << k << "' is a string of " << l->bytes << " bytes, longer than any value "
                                 << "kvtool reads (" << kMaxKeptString << ")");
    KVT_CHECK(std::holds_alternative<std::string>(it->second), BAD_MODEL, what_ << ": '" << k << "' is not a string");
    return std::get<std::string>(it->second);
  }
  // A positive integer (a scalar, or an array whose entries are all equal: per-layer head counts).
  int64_t count(const std::string& k, int64_t def) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    double x = 0;
    if (const auto* a = std::get_if<std::vector<double>>(&it->second)) {
      KVT_CHECK(!a->empty(), BAD_MODEL, what_ << ": '" << k << "' is an empty array");
      KVT_CHECK(std::all_of(a->begin(), a->end(), [&](double y) { return y == a->front(); }), UNSUPPORTED_CACHE,
                what_ << ": '" << k << "' differs between layers; kvtool imports caches with one geometry per layer");
      x = a->front();
    } else {
      const auto* n = std::get_if<Number>(&it->second);
      KVT_CHECK(n && n->type != BOOL && n->type != F32 && n->type != F64, BAD_MODEL,
                what_ << ": '" << k << "' is not an integer");
      x = n->value;
    }
    KVT_CHECK(x >= 1 && x <= 1e9 && x == static_cast<double>(static_cast<int64_t>(x)), BAD_MODEL,
              what_ << ": '" << k << "' = " << x << " is not a positive integer");
    return static_cast<int64_t>(x);
  }
  // The length of an array of strings (0 when absent).
  int64_t string_count(const std::string& k) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return 0;
    const auto* a = std::get_if<StringArray>(&it->second);
    KVT_CHECK(a, BAD_MODEL, what_ << ": '" << k << "' is not an array of strings");
    KVT_CHECK(a->count <= uint64_t(INT32_MAX), BAD_MODEL,
              what_ << ": '" << k << "' holds " << a->count << " strings, more than llama.cpp's int32 token ids reach");
    return static_cast<int64_t>(a->count);
  }
  // A float, as llama.cpp reads one (gguf_get_val_f32: the key must hold a float32; float64 too).
  double number(const std::string& k, double def) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    const auto* n = std::get_if<Number>(&it->second);
    KVT_CHECK(n && (n->type == F32 || n->type == F64), BAD_MODEL,
              what_ << ": '" << k << "' is not a float (llama.cpp reads it as float32)");
    return n->value;
  }
  // Any number (a bool or an integer included), for keys kvtool only tests against zero.
  double any_number(const std::string& k, double def) const {
    auto it = kv_.find(k);
    if (it == kv_.end()) return def;
    const auto* n = std::get_if<Number>(&it->second);
    KVT_CHECK(n, BAD_MODEL, what_ << ": '" << k << "' is not a number");
    return n->value;
  }

 private:
  std::map<std::string, Value> kv_;
  std::string what_;
};

// llama.cpp's RoPE type of an architecture (llama_model_rope_type in src/llama-model.cpp at the
// version formats/llama-state.md names): NORM rotates adjacent pairs, NEOX the two halves.
std::string rope_pairing(const std::string& arch) {
  static const std::set<std::string> norm = {
      "llama",      "llama4",    "deci",       "baichuan", "starcoder", "internlm2", "minicpm",      "xverse",
      "command-r",  "cohere2",   "olmo",       "arctic",   "deepseek",  "plm",       "chatglm",      "granite",
      "granitemoe", "chameleon", "bailingmoe", "smollm3",  "arcee",     "ernie4_5",  "ernie4_5-moe", "mistral3"};
  static const std::set<std::string> neox = {
      "falcon",   "grok",     "dbrx",     "stablelm",   "bitnet",   "qwen",          "qwen2",
      "qwen2moe", "qwen3",    "qwen3moe", "olmo2",      "olmoe",    "phi2",          "phi3",
      "phimoe",   "plamo",    "gemma",    "starcoder2", "openelm",  "gptneox",       "codeshell",
      "orion",    "nemotron", "exaone",   "exaone4",    "minicpm3", "hunyuan-dense", "seed_oss"};
  if (norm.count(arch)) return "interleaved";
  if (neox.count(arch)) return "half";
  return "";
}

void refuse_unsupported_caches(const Meta& m, const std::string& a, const std::string& what) {
  KVT_CHECK(!m.has(a + ".attention.kv_lora_rank"), UNSUPPORTED_CACHE,
            what << " is an MLA model (" << a << ".attention.kv_lora_rank): its cache holds one latent per token, "
                 << "not K and V per head");
  KVT_CHECK(!m.has(a + ".attention.sliding_window") || m.any_number(a + ".attention.sliding_window", 0) == 0,
            UNSUPPORTED_CACHE,
            what << " has sliding-window layers (" << a << ".attention.sliding_window): llama.cpp keeps them in a "
                 << "second cache with other rows, which kvtool does not import");
  KVT_CHECK(!m.has_prefix(a + ".ssm.") && !m.has_prefix(a + ".wkv."), UNSUPPORTED_CACHE,
            what << " has recurrent layers: its state is not a K/V cache");
}

}  // namespace

std::string GgufModel::rope_config() const {
  if (rope_pairing.empty()) return "";
  if (rope_pairing == "interleaved" && rope_scaling == "none") return llama_rope_config(head_dim, rope_theta);
  json j{{"theta", rope_theta}, {"scaling", rope_scaling}, {"pairing", rope_pairing}, {"head_dim", head_dim}};
  if (rope_dims != head_dim) j["rotated_dims"] = rope_dims;  // partial RoPE: how many channels rotate
  return canonical_json(j);
}

json GgufModel::to_json() const {
  return json{{"path", path},
              {"arch", arch},
              {"layers", layers},
              {"heads", heads},
              {"kv_heads", kv_heads},
              {"head_dim", head_dim},
              {"rope_theta", rope_theta},
              {"rope_pairing", rope_pairing.empty() ? "unknown" : rope_pairing}};
}

GgufModel read_gguf_model(const std::string& path) {
  impl::ByteReader r(path, "the GGUF file '" + path + "'");
  const Meta m(read_metadata(r), r.what());
  GgufModel g;
  g.path = path;
  g.arch = m.str("general.architecture");
  KVT_CHECK(!g.arch.empty(), BAD_MODEL, r.what() << " has no general.architecture");
  g.name = m.str("general.name");
  const std::string a = g.arch;
  refuse_unsupported_caches(m, a, r.what());
  g.layers = m.count(a + ".block_count", 0);
  const int64_t embd = m.count(a + ".embedding_length", 0);
  g.heads = m.count(a + ".attention.head_count", 0);
  KVT_CHECK(g.layers > 0 && embd > 0 && g.heads > 0, BAD_MODEL,
            r.what() << " lacks " << a << ".block_count, .embedding_length or .attention.head_count");
  g.kv_heads = m.count(a + ".attention.head_count_kv", g.heads);
  KVT_CHECK(embd % g.heads == 0 || m.has(a + ".attention.key_length"), BAD_MODEL,
            r.what() << ": embedding_length " << embd << " is not a multiple of head_count " << g.heads);
  g.head_dim = m.count(a + ".attention.key_length", embd / g.heads);
  KVT_CHECK(m.count(a + ".attention.value_length", g.head_dim) == g.head_dim, UNSUPPORTED_CACHE,
            r.what() << ": K and V head sizes differ; a kvdump holds one head_dim for both");
  KVT_CHECK(g.layers <= kMaxDumpLayers && g.kv_heads <= kMaxDumpHeads && g.heads <= kMaxDumpHeads &&
                g.head_dim <= kMaxDumpHeadDim && g.heads % g.kv_heads == 0,
            BAD_MODEL,
            r.what() << ": geometry out of range (layers " << g.layers << ", heads " << g.heads << "/" << g.kv_heads
                     << ", head_dim " << g.head_dim << ")");
  g.rope_theta = m.number(a + ".rope.freq_base", 10000.0);
  KVT_CHECK(std::isfinite(g.rope_theta) && g.rope_theta > 0, BAD_MODEL,
            r.what() << ": " << a << ".rope.freq_base = " << g.rope_theta << " is not a positive number");
  const int64_t rot = m.count(a + ".rope.dimension_count", g.head_dim);
  KVT_CHECK(rot <= g.head_dim && rot % 2 == 0, BAD_MODEL,
            r.what() << ": " << a << ".rope.dimension_count = " << rot << " is not an even count of at most head_dim "
                     << g.head_dim << " (RoPE rotates pairs)");
  g.rope_scaling = m.has(a + ".rope.scaling.type") ? m.str(a + ".rope.scaling.type") : "none";
  // llama_rope_scaling_type_from_string (src/llama-model.cpp at the version formats/llama-state.md
  // names) knows these; anything else llama.cpp itself refuses to load.
  static const std::set<std::string> scalings = {"none", "linear", "yarn", "longrope"};
  KVT_CHECK(scalings.count(g.rope_scaling) > 0, BAD_MODEL,
            r.what() << ": " << a << ".rope.scaling.type '" << excerpt(g.rope_scaling, 64)
                     << "' is not a RoPE scaling llama.cpp knows (none, linear, yarn, longrope)");
  g.rope_pairing = rope_pairing(a);
  g.rope_dims = rot;
  g.vocab_size = m.string_count("tokenizer.ggml.tokens");
  if (rot != g.head_dim && !g.rope_pairing.empty()) g.rope_pairing += "-partial";  // only the first rot channels rotate
  return g;
}

std::string model_sha256(const std::string& path) { return to_hex(sha256_file(path)); }

}  // namespace kvtool
