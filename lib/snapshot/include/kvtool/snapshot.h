// One interface over every cache another stack wrote (docs/adding-a-format.md): a KvSnapshot says
// what it holds (geometry, positions, tokens, queries, what it knows of the dump's identity) before
// any value is read, then hands out one layer's K and V at a time. A registry picks the reader for
// a request — named by --format, or recognised by the first input's magic — as FAISS's read_index
// dispatches on a fourcc. offline's import, inspect and verify work over this interface only.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/identity.h"
#include "kvtool/json.h"
#include "kvtool/llama_state.h"
#include "kvtool/chunk_files.h"
#include "kvtool/tensor_layout.h"

namespace kvtool {

// What a snapshot holds, known once it is opened (every size checked, nothing large read yet).
struct SnapshotInfo {
  std::string format;        // as printed: "npy", "lmcache-raw KV_2LTD", "llama.cpp ggsq"
  std::string source_dtype;  // as stored: "f16", "f8_e4m3", "q8_0/f16"
  // Rows T, layers, heads, head_dim, query rows; geo.dtype is the dump dtype the source maps to
  // without --dtype (f64 and fp8 become f32: their values need it).
  DumpGeometry geo;
  int64_t q_heads = 0;             // query heads; 0 when the snapshot has no queries
  std::vector<int64_t> positions;  // the true position of each row; empty: not recorded
  std::vector<int64_t> tokens;     // the token of each row; empty: not known
  std::vector<int64_t> q_rows;     // the row (0-based, < T) of each query row
  std::string dequantized_from;    // "fp8-e4m3" / "fp8-e5m2" when values are codes x scale
};

class KvSnapshot {
 public:
  virtual ~KvSnapshot() = default;
  virtual const SnapshotInfo& info() const = 0;
  // K and V of `layer`, each [kv_heads][T][head_dim] float32 in row order: dequantized and
  // un-rotated, values as the source holds them (a reader never checks them against a dump dtype).
  virtual void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) = 0;
  // The queries of `layer`, [q_heads][q_tokens][head_dim]; only when info().q_heads > 0.
  virtual void read_q(int64_t layer, std::vector<float>& q);
  // What the values of `layer` are called in messages: what is 'K', 'V' or 'Q'.
  virtual std::string label(char what, int64_t layer) const;
  // Identity attributes the source knows (model_artifact_sha256 of a GGUF model, its rope_config,
  // a generator string), added to `meta` where it has none. Called once, by import.
  virtual void complete_meta(json& meta) const;
};

// Everything a reader may need; each reader reads its own part.
struct SnapshotRequest {
  std::vector<std::string> inputs;  // the files, in token order where a format spans several
  std::string format;               // a name of snapshot_formats(); "": recognised from the inputs
  TensorLayoutOptions tensors;      // npy / npz / safetensors: references and --layout
  ChunkOptions chunks;              // LMCache and SGLang chunk/page files (chunks.format: set by open_snapshot)
  LlamaStateOptions llama;          // llama.cpp state files
  std::string gguf;                 // llama.cpp state files: the model's GGUF (required to import)
};

// One registry entry: a format name, what --help says of it, whether `inputs` look like it (by
// content; nullptr: chosen by name only) and its reader.
struct SnapshotFormat {
  const char* name;
  const char* summary;
  bool (*probe)(const std::vector<std::string>& inputs);
  std::unique_ptr<KvSnapshot> (*open)(const SnapshotRequest& request);
};

// Every reader, in probe order; the last ("tensors") takes whatever no other recognises.
const std::vector<SnapshotFormat>& snapshot_formats();

// The format a request names or its inputs look like (USAGE for an unknown name).
const SnapshotFormat& snapshot_format_for(const SnapshotRequest& request);

// Opens the request's snapshot with the reader snapshot_format_for() picks.
std::unique_ptr<KvSnapshot> open_snapshot(const SnapshotRequest& request);

}  // namespace kvtool
