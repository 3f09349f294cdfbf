// llama.cpp K/V snapshots (formats/llama-state.md): the metadata of a GGUF model file (never its
// tensors) and llama.cpp's sequence-state (`ggsq` v3) and session (`ggsn` v10) files — inspect,
// verify (alone or against a kvdump) and import into a kvdump v1 file. Every size in a state file
// is checked against the file's real size and against the model before anything is allocated.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/identity.h"
#include "kvtool/import.h"
#include "kvtool/json.h"

namespace kvtool {

// What a model's GGUF header says about its attention cache (BAD_MODEL when malformed;
// UNSUPPORTED_CACHE when the cache is not one K and V row of kv_heads x head_dim per token and layer:
// MLA latents, sliding-window or recurrent layers, per-layer head counts that differ).
struct GgufModel {
  std::string path, arch, name;
  int64_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double rope_theta = 10000.0;
  std::string rope_pairing;  // "interleaved" (llama.cpp NORM), "half" (NEOX); "" when unknown
  std::string rope_scaling = "none";
  std::string rope_config() const;  // canonical JSON; "" when the pairing is unknown
  std::string sha256;               // of the whole file, filled by model_sha256()
  json to_json() const;
};
GgufModel read_gguf_model(const std::string& path);
// SHA-256 of the GGUF file (streamed; the default model_artifact_sha256 of an import).
std::string model_sha256(const std::string& path);

// Whether a quantized cache is read as stored Hadamard-rotated (formats/llama-state.md, "Rotation").
enum class LlamaRotation { automatic, on, off };
LlamaRotation parse_llama_rotation(const std::string& s);  // "auto" | "on" | "off"; USAGE otherwise

struct LlamaStateOptions {
  std::optional<int32_t> seq_id;  // the sequence to read; default: the only one in the file
  LlamaRotation rotation = LlamaRotation::automatic;
  // Import only: post-RoPE queries recorded beside the cache (a state file has none), a float .npy
  // [L, heads, T_q, head_dim], and the position of each query row ([T_q] integer .npy; default the
  // last T_q positions of the sequence). Each position must be one the sequence holds.
  std::string q_path, q_positions_path;
};

// True when the file starts with the magic of a ggsq or ggsn file.
bool looks_like_llama_state(const std::string& path);

// One layer's cache as the file describes it.
struct LlamaLayerInfo {
  std::string k_type, v_type;  // ggml type names: f32, f16, bf16, q8_0
  int64_t k_row_bytes = 0, v_row_bytes = 0;
  int64_t k_width = 0, v_width = 0;  // elements per cell (kv_heads x head_dim)
};

// Per (layer, kv head) health of the K and V rows of the chosen sequence.
struct LlamaHeadHealth {
  int64_t layer = 0, head = 0;
  int64_t nonfinite_k = 0, nonfinite_v = 0;
  double max_abs_k = 0, max_abs_v = 0;
};

struct LlamaStateInspection {
  std::string path, magic, arch;  // magic: "ggsq" or "ggsn"; arch: ggsn only
  uint32_t version = 0;
  int64_t file_bytes = 0, n_tokens = 0, streams = 0, cells = 0;
  std::vector<int32_t> seq_ids;                // every sequence id present
  std::optional<int32_t> seq_id;               // the sequence read (when one could be chosen)
  int64_t rows = 0;                            // cells of that sequence
  int64_t pos_min = 0, pos_max = 0, gaps = 0;  // gaps: missing positions inside [pos_min, pos_max]
  bool cells_in_order = true, v_trans = false, rotated = false;
  std::vector<LlamaLayerInfo> layers;
  std::vector<LlamaHeadHealth> health;  // per (layer, head) with a model; per layer (head 0) without
  std::string model;                    // the GGUF path given, "" when none
  json to_json() const;
};
LlamaStateInspection inspect_llama_state(const std::string& path, const GgufModel* model, const LlamaStateOptions& o);

// verify: every size adds up, no trailing bytes, finite values, unique positions; with a source
// dump, each row's K and V equal the dump's row at the same position within `tolerance`, the
// largest |difference| relative to max|x| of that (layer, kv head) in the dump.
struct LlamaStateVerification {
  LlamaStateInspection state;
  std::string source;
  double tolerance = 0, max_rel_err_k = 0, max_rel_err_v = 0;
  std::vector<double> layer_rel_err;  // max over K and V per layer, with a source
  json to_json() const;
};
// The default tolerance for a cache type (formats/llama-state.md, "Verify against a dump").
double default_state_tolerance(const std::string& ggml_type);
LlamaStateVerification verify_llama_state(const std::string& path, const GgufModel* model, const LlamaStateOptions& o,
                                          const std::string& source_dump, std::optional<double> tolerance);

// Import: K and V [L, kv_heads, T, head_dim] with rows in position order, /kv/positions their true
// positions, /kv/tokens when the file's token list has one token per row. `meta` as for
// import_dump; model_artifact_sha256 defaults to the GGUF file's SHA-256 and rope_config to its
// RoPE keys. Written atomically (nothing at `out` on failure).
ImportSummary import_llama_state(const std::string& path, const GgufModel& model, const LlamaStateOptions& o,
                                 const json& meta, std::optional<DType> dtype, const std::string& out, bool overwrite);

}  // namespace kvtool
