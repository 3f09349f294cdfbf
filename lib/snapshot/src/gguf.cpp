// The metadata of a GGUF model file (formats/llama-state.md, "The model's GGUF header"), through
// GgufFile (kvtool/gguf_file.h): only the key/value section is read, never the tensor infos or data.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kvtool/gguf_file.h"
#include "kvtool/gguf.h"
#include "kvtool/identity.h"
#include "kvtool/sha256.h"

namespace kvtool {

namespace {

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
  // M-RoPE (qwen2vl): NEOX pairs, each section of the pairs turned by its own position stream; a
  // text token's streams all hold its position, so its K is turned as NEOX's (formats/llama-state.md).
  // gemma2 and lfm2 are NEOX too; gemma2's sliding-window layers turn by rope.freq_base_swa when
  // its GGUF has one (read_gguf_model then leaves the pairing unknown: one theta cannot say it).
  if (arch == "qwen2vl" || arch == "gemma2" || arch == "lfm2") return "half";
  return "";
}

// llama.cpp's M-RoPE architectures (rope type MROPE / IMROPE in llama_model_rope_type): each cell
// of their cache carries 12 more bytes, its 2-D position and its token (llama_kv_cell_ext).
const std::set<std::string>& mrope_archs() {
  static const std::set<std::string> s = {"qwen2vl",  "qwen3vl",  "qwen3vlmoe", "qwen35",    "qwen35moe",
                                          "qwen4exp", "qwen3tts", "paddleocr",  "hunyuan-vl"};
  return s;
}

void refuse_unsupported_caches(const GgufFile& m, const std::string& a, const std::string& what) {
  KVT_CHECK(!m.has(a + ".attention.kv_lora_rank"), UNSUPPORTED_CACHE,
            what << " is an MLA model (" << a << ".attention.kv_lora_rank): its cache holds one latent per token, "
                 << "not K and V per head");
  KVT_CHECK(!m.has(a + ".rope.dimension_sections") || mrope_archs().count(a), UNSUPPORTED_CACHE,
            what << " has rope.dimension_sections but architecture '" << a << "' is not one of llama.cpp's M-RoPE "
                 << "architectures kvtool knows");
}

// A count key that may be 0 (a window, a period): a whole number in [0, most], else BAD_MODEL
// (a float, a NaN or a huge value is never cast).
int64_t whole_number(const GgufFile& m, const std::string& key, int64_t most) {
  const double x = m.any_number(key, 0);
  KVT_CHECK(std::isfinite(x) && x >= 0 && x <= static_cast<double>(most) && x == std::floor(x), BAD_MODEL,
            m.what() << ": " << key << " = " << x << " is not a whole number in [0, " << most << "]");
  return static_cast<int64_t>(x);
}

// Sliding-window layers: llama.cpp keeps the full-attention layers in one cache and the
// sliding-window ones in a second (llama_kv_cache_iswa). Which layers slide is the architecture's
// own rule (its load_arch_hparams): these set `il % period < period - 1` with a default period a
// scalar sliding_window_pattern overrides (an array is ignored there). Other architectures are
// refused: kvtool cannot know their layers.
void read_sliding_window(const GgufFile& m, const std::string& a, GgufModel& g) {
  static const std::map<std::string, int64_t> default_period = {
      {"gemma2", 2}, {"gemma3", 6}, {"cohere2", 4}, {"olmo2", 4}};
  const auto it = default_period.find(a);
  KVT_CHECK(it != default_period.end(), UNSUPPORTED_CACHE,
            m.what() << " has sliding-window layers (" << a << ".attention.sliding_window) and kvtool does not know "
                     << "which layers of architecture '" << a << "' slide (formats/llama-state.md, \"Variants\")");
  const std::string key = a + ".attention.sliding_window_pattern";
  int64_t period = it->second;
  if (m.has(key) && !m.is_numbers(key)) period = whole_number(m, key, int64_t{1} << 20);
  std::vector<int64_t> full, swa;
  for (int64_t il = 0; il < g.layers; ++il) (period == 0 || il % period < period - 1 ? swa : full).push_back(il);
  g.memory = "iswa";
  g.kv_sections = {full, swa};
}

// Attention + recurrent layers (llama_memory_hybrid: the attention layers' cache, then the recurrent
// state). lfm2 marks a recurrent layer by 0 KV heads (llama_model_lfm2::load_arch_hparams); other
// hybrid architectures pick their layers by rules kvtool does not mirror and are refused.
void read_hybrid(const GgufFile& m, const std::string& a, GgufModel& g) {
  const std::string key = a + ".attention.head_count_kv";
  const std::vector<double> kv = m.is_numbers(key) ? m.numbers(key) : std::vector<double>{};
  KVT_CHECK(a == "lfm2" && !m.has(a + ".attention.sliding_window"), UNSUPPORTED_CACHE,
            m.what() << " has recurrent layers (" << a << ") and kvtool does not know which of its layers hold "
                     << "K/V (formats/llama-state.md, \"Variants\")");
  KVT_CHECK(static_cast<int64_t>(kv.size()) == g.layers, BAD_MODEL,
            m.what() << ": " << a << ".attention.head_count_kv must hold one count per layer (" << g.layers << ")");
  std::vector<int64_t> attention;
  for (int64_t il = 0; il < g.layers; ++il) {
    const double n = kv[static_cast<size_t>(il)];
    KVT_CHECK(n == 0 || n == static_cast<double>(g.kv_heads), UNSUPPORTED_CACHE,
              m.what() << ": layer " << il << " has " << n << " KV heads, layers with K/V have " << g.kv_heads
                       << "; kvtool imports caches with one geometry per layer");
    if (n > 0) attention.push_back(il);
  }
  KVT_CHECK(!attention.empty(), UNSUPPORTED_CACHE, m.what() << " has no attention layer: its state is not a K/V cache");
  g.memory = "hybrid";
  g.kv_sections = {attention};
}

// A head count that may be per layer: hybrid models give 0 on their recurrent layers, and the
// other layers must agree (GgufFile::count refuses arrays that differ).
int64_t head_count(const GgufFile& m, const std::string& key, int64_t absent) {
  if (!m.is_numbers(key)) return m.count(key, absent);
  std::vector<double> v = m.numbers(key);
  v.erase(std::remove(v.begin(), v.end(), 0.0), v.end());
  if (v.empty() || v.size() == m.numbers(key).size()) return m.count(key, absent);
  KVT_CHECK(std::all_of(v.begin(), v.end(), [&](double y) { return y == v.front(); }) && v.front() >= 1 &&
                v.front() <= 1e9 && v.front() == std::floor(v.front()),
            UNSUPPORTED_CACHE,
            m.what() << ": '" << key << "' differs between layers; kvtool imports caches with one "
                     << "geometry per layer");
  return static_cast<int64_t>(v.front());
}

void read_memory(const GgufFile& m, const std::string& a, GgufModel& g) {
  std::vector<int64_t> all;
  for (int64_t il = 0; il < g.layers; ++il) all.push_back(il);
  g.kv_sections = {all};
  g.cell_ext = mrope_archs().count(a) > 0;
  const bool recurrent = m.has_prefix(a + ".ssm.") || m.has_prefix(a + ".wkv.") || m.has(a + ".shortconv.l_cache");
  if (recurrent) return read_hybrid(m, a, g);
  if (m.has(a + ".attention.sliding_window") && m.any_number(a + ".attention.sliding_window", 0) != 0) {
    g.sliding_window = whole_number(m, a + ".attention.sliding_window", kMaxDumpTokens);
    read_sliding_window(m, a, g);
  }
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
              {"rope_pairing", rope_pairing.empty() ? "unknown" : rope_pairing},
              {"memory", memory},
              {"kv_sections", kv_sections}};
}

GgufModel read_gguf_model(const std::string& path) {
  const GgufFile m(path, false);
  GgufModel g;
  g.path = path;
  g.arch = m.str("general.architecture");
  KVT_CHECK(!g.arch.empty(), BAD_MODEL, m.what() << " has no general.architecture");
  g.name = m.str("general.name");
  const std::string a = g.arch;
  refuse_unsupported_caches(m, a, m.what());
  g.layers = m.count(a + ".block_count", 0);
  const int64_t embd = m.count(a + ".embedding_length", 0);
  g.heads = head_count(m, a + ".attention.head_count", 0);
  KVT_CHECK(g.layers > 0 && embd > 0 && g.heads > 0, BAD_MODEL,
            m.what() << " lacks " << a << ".block_count, .embedding_length or .attention.head_count");
  g.kv_heads = head_count(m, a + ".attention.head_count_kv", g.heads);
  KVT_CHECK(embd % g.heads == 0 || m.has(a + ".attention.key_length"), BAD_MODEL,
            m.what() << ": embedding_length " << embd << " is not a multiple of head_count " << g.heads);
  g.head_dim = m.count(a + ".attention.key_length", embd / g.heads);
  KVT_CHECK(m.count(a + ".attention.value_length", g.head_dim) == g.head_dim, UNSUPPORTED_CACHE,
            m.what() << ": K and V head sizes differ; a kvdump holds one head_dim for both");
  KVT_CHECK(g.layers <= kMaxDumpLayers && g.kv_heads <= kMaxDumpHeads && g.heads <= kMaxDumpHeads &&
                g.head_dim <= kMaxDumpHeadDim && g.heads % g.kv_heads == 0,
            BAD_MODEL,
            m.what() << ": geometry out of range (layers " << g.layers << ", heads " << g.heads << "/" << g.kv_heads
                     << ", head_dim " << g.head_dim << ")");
  g.rope_theta = m.number(a + ".rope.freq_base", 10000.0);
  KVT_CHECK(std::isfinite(g.rope_theta) && g.rope_theta > 0, BAD_MODEL,
            m.what() << ": " << a << ".rope.freq_base = " << g.rope_theta << " is not a positive number");
  const int64_t rot = m.count(a + ".rope.dimension_count", g.head_dim);
  KVT_CHECK(rot <= g.head_dim && rot % 2 == 0, BAD_MODEL,
            m.what() << ": " << a << ".rope.dimension_count = " << rot << " is not an even count of at most head_dim "
                     << g.head_dim << " (RoPE rotates pairs)");
  g.rope_scaling = m.has(a + ".rope.scaling.type") ? m.str(a + ".rope.scaling.type") : "none";
  // llama_rope_scaling_type_from_string (src/llama-model.cpp at the version formats/llama-state.md
  // names) knows these; anything else llama.cpp itself refuses to load.
  static const std::set<std::string> scalings = {"none", "linear", "yarn", "longrope"};
  KVT_CHECK(scalings.count(g.rope_scaling) > 0, BAD_MODEL,
            m.what() << ": " << a << ".rope.scaling.type '" << excerpt(g.rope_scaling, 64)
                     << "' is not a RoPE scaling llama.cpp knows (none, linear, yarn, longrope)");
  g.rope_pairing = rope_pairing(a);
  if (m.has(a + ".rope.freq_base_swa") && m.number(a + ".rope.freq_base_swa", 0) != g.rope_theta) g.rope_pairing = "";
  g.rope_dims = rot;
  g.vocab_size = m.string_count("tokenizer.ggml.tokens");
  if (rot != g.head_dim && !g.rope_pairing.empty()) g.rope_pairing += "-partial";  // only the first rot channels rotate
  read_memory(m, a, g);
  return g;
}

void require_plain_cache(const GgufModel& m, const std::string& what) {
  KVT_CHECK(m.memory == "kv" && !m.cell_ext, UNSUPPORTED_CACHE,
            "'" << m.path << "' (" << m.arch << ") keeps "
                << (m.cell_ext           ? "M-RoPE cells"
                    : m.memory == "iswa" ? "its sliding-window layers in a second cache"
                                         : "recurrent state beside its K/V")
                << "; " << what << " maps one K/V cache of every layer (formats/llama-state.md, \"Variants\")");
}

std::string model_sha256(const std::string& path) { return to_hex(sha256_file(path)); }

}  // namespace kvtool
