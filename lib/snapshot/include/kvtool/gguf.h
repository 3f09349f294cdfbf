// The metadata of a GGUF model file (formats/llama-state.md, "The model's GGUF header"): what the
// attention cache of the model looks like. Only the key/value section is read, never the tensors.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/json.h"

namespace kvtool {

// What a model's GGUF header says about its attention cache (BAD_MODEL when malformed;
// UNSUPPORTED_CACHE when the cache is not K and V rows of kv_heads x head_dim per token and layer:
// MLA latents, per-layer head counts that differ, sliding-window or recurrent layers of an
// architecture whose layer rule kvtool does not know).
struct GgufModel {
  std::string path, arch, name;
  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double rope_theta = 10000.0;
  std::string rope_pairing;           // "interleaved" (llama.cpp NORM), "half" (NEOX); "" when unknown
  std::string rope_scaling = "none";  // none | linear | yarn | longrope (what llama.cpp knows)
  int64_t rope_dims = 0;              // channels RoPE rotates (rope.dimension_count; head_dim by default)
  int64_t vocab_size = 0;             // entries of tokenizer.ggml.tokens (llama.cpp's n_vocab); 0 when absent
  std::string rope_config() const;    // canonical JSON; "" when the pairing is unknown
  std::string sha256;                 // of the whole file, filled by model_sha256()
  // The memory llama.cpp keeps for the model (formats/llama-state.md, "Variants"): "kv" (one K/V
  // cache), "iswa" (the full-attention layers' cache, then the sliding-window layers'), "hybrid"
  // (the attention layers' cache, then the recurrent layers' state, which holds no K/V).
  std::string memory = "kv";
  std::vector<std::vector<int64_t>> kv_sections;  // the model layers of each K/V cache, in file order
  bool cell_ext = false;                          // M-RoPE: each cell carries x, y and its token
  int64_t sliding_window = 0;                     // iswa: the window in positions
  json to_json() const;
};
GgufModel read_gguf_model(const std::string& path);
// UNSUPPORTED_CACHE unless the model's memory is one K/V cache of every layer with plain cells
// (what a store or a forward pass maps): `what` names the use.
void require_plain_cache(const GgufModel& m, const std::string& what);
// SHA-256 of the GGUF file (streamed; the default model_artifact_sha256 of an import).
std::string model_sha256(const std::string& path);

}  // namespace kvtool
