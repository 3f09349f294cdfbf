// Loading a GGUF model for the forward pass (kvtool/gguf_model.h, formats/gguf.md): what the graph
// needs from the metadata, llama.cpp's defaults where it has them, refusals by name for anything the
// forward would only approximate, and every weight read through the checked tensor infos.
#include <algorithm>
#include <cmath>
#include <set>

#include <unistd.h>

#include "impl/gguf_weights.h"
#include "kvtool/canonical.h"
#include "kvtool/error.h"
#include "kvtool/gguf_file.h"
#include "kvtool/json.h"
#include "kvtool/random_access_file.h"
#include "kvtool/sha256.h"

namespace kvtool {

namespace {

// Features of llama.cpp models whose cache or graph this forward does not compute.
void refuse_features(const GgufFile& f, const std::string& a) {
  auto refuse_if = [&](bool present, const std::string& what) {
    KVT_CHECK(!present, UNSUPPORTED_MODEL,
              f.what() << ": " << what << "; kvtool runs dense llama and qwen2 models only");
  };
  refuse_if(f.any_number(a + ".expert_count", 0) > 0, "a mixture-of-experts model (" + a + ".expert_count)");
  refuse_if(f.has(a + ".attention.kv_lora_rank"), "multi-head latent attention (" + a + ".attention.kv_lora_rank)");
  refuse_if(f.any_number(a + ".attention.sliding_window", 0) > 0, "sliding-window attention");
  refuse_if(f.has(a + ".rope.dimension_sections"), "multi-axis RoPE (" + a + ".rope.dimension_sections)");
  const std::string scaling = f.has(a + ".rope.scaling.type") ? f.str(a + ".rope.scaling.type") : "none";
  refuse_if(scaling != "none" && scaling != "linear",
            "RoPE scaling '" + printable(excerpt(scaling, 40)) +
                "' (kvtool computes none, linear and Llama 3 frequency factors)");
}

GgufModelConfig read_config(const GgufFile& f) {
  GgufModelConfig c;
  c.arch = f.str("general.architecture");
  KVT_CHECK(c.arch == "llama" || c.arch == "qwen2", UNSUPPORTED_MODEL,
            f.what() << " is architecture '" << printable(excerpt(c.arch, 40))
                     << "'; kvtool's forward pass runs llama and qwen2 (docs/models.md)");
  const std::string& a = c.arch;
  refuse_features(f, a);
  auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  c.layers = i32(f.count(a + ".block_count", 0));
  c.dim = i32(f.count(a + ".embedding_length", 0));
  c.hidden = i32(f.count(a + ".feed_forward_length", 0));
  c.heads = i32(f.count(a + ".attention.head_count", 0));
  KVT_CHECK(
      c.layers > 0 && c.dim > 0 && c.hidden > 0 && c.heads > 0, BAD_MODEL,
      f.what() << " lacks " << a << ".block_count, .embedding_length, .feed_forward_length or .attention.head_count");
  c.kv_heads = i32(f.count(a + ".attention.head_count_kv", c.heads));
  KVT_CHECK(c.dim % c.heads == 0 || f.has(a + ".attention.key_length"), BAD_MODEL,
            f.what() << ": embedding_length " << c.dim << " is not a multiple of head_count " << c.heads);
  c.head_dim = i32(f.count(a + ".attention.key_length", c.dim / c.heads));
  KVT_CHECK(f.count(a + ".attention.value_length", c.head_dim) == c.head_dim, UNSUPPORTED_MODEL,
            f.what() << ": K and V head sizes differ");
  KVT_CHECK(c.layers <= 4096 && c.heads <= 4096 && c.head_dim <= 4096 && c.heads % c.kv_heads == 0 &&
                c.dim <= (1 << 20) && c.hidden <= (1 << 22),
            BAD_MODEL, f.what() << ": geometry out of range");
  c.context = i32(std::min<int64_t>(f.count(a + ".context_length", 4096), (int64_t(1) << 31) - 1));
  c.rope_dims = i32(f.count(a + ".rope.dimension_count", c.head_dim));
  KVT_CHECK(c.rope_dims <= c.head_dim && c.rope_dims % 2 == 0, BAD_MODEL,
            f.what() << ": rope.dimension_count " << c.rope_dims << " is not even and at most head_dim");
  c.rope_neox = a == "qwen2";  // llama_model_rope_type: LLAMA_ROPE_TYPE_NORM for llama, NEOX for qwen2
  c.rope_theta = static_cast<float>(f.number(a + ".rope.freq_base", 10000.0));
  const double factor = f.has(a + ".rope.scaling.factor") ? f.number(a + ".rope.scaling.factor", 1.0) : 1.0;
  const bool linear = f.has(a + ".rope.scaling.type") && f.str(a + ".rope.scaling.type") == "linear";
  KVT_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0 && std::isfinite(factor) && factor > 0, BAD_MODEL,
            f.what() << ": rope.freq_base or rope.scaling.factor is not a positive number");
  c.rope_freq_scale = linear ? static_cast<float>(1.0 / factor) : 1.f;
  KVT_CHECK(f.has(a + ".attention.layer_norm_rms_epsilon"), BAD_MODEL,
            f.what() << " lacks " << a << ".attention.layer_norm_rms_epsilon (llama.cpp requires it)");
  c.rms_eps = static_cast<float>(f.number(a + ".attention.layer_norm_rms_epsilon", 1e-5));
  KVT_CHECK(std::isfinite(c.rms_eps) && c.rms_eps > 0 && c.rms_eps < 1, BAD_MODEL,
            f.what() << ": layer_norm_rms_epsilon " << c.rms_eps << " is not in (0, 1)");
  return c;
}

// The float32 weights must fit in `limit` bytes (0: physical memory), checked from the tensor
// infos (each already checked against the file's size) before any weight is expanded.
void check_weight_memory(const GgufFile& f, uint64_t limit) {
  if (limit == 0) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    limit = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : UINT64_MAX;
  }
  uint64_t bytes = 0;
  for (const auto& t : f.tensors()) bytes += static_cast<uint64_t>(t.elements()) * 4;
  constexpr double kGiB = 1024.0 * 1024 * 1024;
  KVT_CHECK(bytes <= limit, OUT_OF_MEMORY,
            f.what() << ": its weights take " << bytes / kGiB << " GiB as float32, the form kvtool's forward pass "
                     << "runs on, more than the " << limit / kGiB
                     << " GiB allowed (the machine's memory unless a budget is given)");
}

}  // namespace

std::string GgufModelConfig::rope_config() const {
  json j{{"theta", static_cast<double>(rope_theta)},
         {"pairing", rope_neox ? "half" : "interleaved"},
         {"head_dim", head_dim},
         {"scaling", rope_freq_scale != 1.f ? "linear" : "none"}};
  if (rope_freq_scale != 1.f) j["freq_scale"] = static_cast<double>(rope_freq_scale);
  if (rope_freq_factors) j["freq_factors"] = true;
  if (rope_dims != head_dim) j["rotated_dims"] = rope_dims;
  return canonical_json(j);
}

GgufDecoder::GgufDecoder(const std::string& path, const GgufDecoderOptions& options) : opt_(options) {
  opt_.threads = std::max(1, opt_.threads);
  const GgufFile f(path, true);
  cfg_ = read_config(f);
  check_weight_memory(f, opt_.max_weight_bytes);
  w_ = std::make_unique<impl::GgufWeights>(impl::load_weights(f, cfg_));
  sha_ = to_hex(sha256_file(path));
  reset();
}

GgufDecoder::~GgufDecoder() = default;

void GgufDecoder::reset() {
  cache_.rows = 0;
  cache_.k.assign(static_cast<size_t>(cfg_.layers), {});
  cache_.v.assign(static_cast<size_t>(cfg_.layers), {});
}

}  // namespace kvtool
