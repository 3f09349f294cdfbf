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
  return "";
}

void refuse_unsupported_caches(const GgufFile& m, const std::string& a, const std::string& what) {
  KVT_CHECK(!m.has(a + ".attention.kv_lora_rank"), UNSUPPORTED_CACHE,
            what << " is an MLA model (" << a << ".attention.kv_lora_rank): its cache holds one latent per token, "
                 << "not K and V per head");
  KVT_CHECK(!m.has(a + ".attention.sliding_window") || m.any_number(a + ".attention.sliding_window", 0) == 0,
            UNSUPPORTED_CACHE,
            what << " has sliding-window layers (" << a << ".attention.sliding_window): llama.cpp keeps them in a "
                 << "second cache with other rows, which kvtool does not import");
  KVT_CHECK(!m.has_prefix(a + ".ssm.") && !m.has_prefix(a + ".wkv.") && !m.has(a + ".shortconv.l_cache"),
            UNSUPPORTED_CACHE, what << " has recurrent layers: its state is not a K/V cache");
  // llama.cpp's M-RoPE architectures (rope type MROPE / IMROPE in llama_model_rope_type) and those
  // using rope sections: each cell carries 12 more bytes (its 2-D position and token), and K is
  // rotated by several position streams.
  static const std::set<std::string> mrope = {"qwen2vl",  "qwen3vl",  "qwen3vlmoe", "qwen35",    "qwen35moe",
                                              "qwen4exp", "qwen3tts", "paddleocr",  "hunyuan-vl"};
  KVT_CHECK(!mrope.count(a) && !m.has(a + ".rope.dimension_sections"), UNSUPPORTED_CACHE,
            what << " uses M-RoPE (" << a << "): its cells carry 2-D positions kvtool does not import");
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
  g.heads = m.count(a + ".attention.head_count", 0);
  KVT_CHECK(g.layers > 0 && embd > 0 && g.heads > 0, BAD_MODEL,
            m.what() << " lacks " << a << ".block_count, .embedding_length or .attention.head_count");
  g.kv_heads = m.count(a + ".attention.head_count_kv", g.heads);
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
  g.rope_dims = rot;
  g.vocab_size = m.string_count("tokenizer.ggml.tokens");
  if (rot != g.head_dim && !g.rope_pairing.empty()) g.rope_pairing += "-partial";  // only the first rot channels rotate
  return g;
}

std::string model_sha256(const std::string& path) { return to_hex(sha256_file(path)); }

}  // namespace kvtool
