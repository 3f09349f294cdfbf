// llama.cpp's sequence-state (`ggsq` v3) and session (`ggsn` v10) files (formats/llama-state.md):
// their structure, the chosen sequence's rows and per-(layer, head) health. Every size in a state
// file is checked against the file's real size and against the model before anything is allocated.
// The registry (kvtool/snapshot.h) reads them as a KvSnapshot with the model's GGUF.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/gguf.h"
#include "kvtool/json.h"

namespace kvtool {

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
  int64_t layer = 0;           // the model's layer (a hybrid model's K/V layers are some of them)
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
  std::string path, magic, arch;  // magic: "ggsq", "ggsn" or "blob" (llama_state_seq_get_data); arch: ggsn only
  uint32_t version = 0;           // 0 for a blob
  int32_t blob_seq_id = -1;       // a blob: the sequence it was taken from
  int64_t file_bytes = 0, n_tokens = 0, streams = 0, cells = 0;
  std::vector<int32_t> seq_ids;   // every sequence id present
  std::optional<int32_t> seq_id;  // the sequence read (when one could be chosen)
  // The rows import reads: the sequence's positions that every K/V cache holds (in an iSWA cache the
  // sliding window's; all of them otherwise).
  int64_t rows = 0;
  int64_t pos_min = 0, pos_max = 0, gaps = 0;  // gaps: missing positions inside [pos_min, pos_max]
  // The memory (formats/llama-state.md, "Variants"): "kv", "iswa" or "hybrid" (from the model's
  // GGUF; "kv" without one), the sequence's rows in each K/V cache, a hybrid's recurrent state
  // (skipped: cells, entries, bytes) and M-RoPE cells (image cells: x or y differs from the position).
  std::string memory = "kv";
  struct Section {
    std::string name;
    std::vector<int64_t> layers;
    int64_t streams = 0, rows = 0, pos_min = 0, pos_max = 0;
  };
  std::vector<Section> sections;
  int64_t recurrent_cells = 0, recurrent_entries = 0, recurrent_bytes = 0;
  bool cell_ext = false;
  int64_t image_cells = 0;
  bool cells_in_order = true, v_trans = false, rotated = false;
  std::vector<LlamaLayerInfo> layers;
  std::vector<LlamaHeadHealth> health;  // per (layer, head) with a model; per layer (head 0) without
  std::string model;                    // the GGUF path given, "" when none
  json to_json() const;
};
LlamaStateInspection inspect_llama_state(const std::string& path, const GgufModel* model, const LlamaStateOptions& o);

// The default tolerance for a cache type (formats/llama-state.md, "Verify against a dump").
double default_state_tolerance(const std::string& ggml_type);

}  // namespace kvtool
