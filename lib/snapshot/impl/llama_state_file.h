// The structure of a llama.cpp state file (formats/llama-state.md) as offsets: parsed once with
// every size checked, then read a layer at a time. Internal to lib/offline.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/byte_reader.h"
#include "kvtool/llama_state.h"

namespace kvtool::impl {

// A ggml element type kvtool decodes: `block` elements take `bytes` bytes.
struct GgmlType {
  int32_t id = -1;
  const char* name = "";
  int64_t block = 1, bytes = 4;
  bool quantized = false;
};

struct StateCell {
  int32_t pos = 0;
  uint32_t stream = 0, index = 0;  // the stream and the cell's place in the stream's rows
  std::vector<int32_t> seqs;
  // M-RoPE caches (llama_kv_cell_ext): the 2-D position and the token; a text token has x = y = pos.
  bool ext = false;
  int32_t x = 0, y = 0, token = -1;
};

struct StateTensor {  // one layer's K or V of one stream
  GgmlType type;
  uint64_t offset = 0;  // first data byte
  int64_t width = 0;    // elements per cell
  bool transposed = false;
};

struct StateStream {
  uint32_t cells = 0;  // 0: the stream is empty and has nothing below
  bool v_trans = false;
  uint32_t section = 0;           // the K/V cache it belongs to
  std::vector<StateTensor> k, v;  // per layer of its section
};

// One K/V cache of the memory (formats/llama-state.md, "Variants"): a plain model has one; an iSWA
// model the full-attention layers' ("base") then the sliding-window layers' ("swa"); a hybrid
// model the attention layers' ("attention"), followed by the recurrent state.
struct StateSection {
  std::string name;
  std::vector<int64_t> layers;  // the model layer of each of the section's layers
  uint32_t first_stream = 0, streams = 0;
};

// A hybrid model's recurrent state (llama_memory_recurrent::state_write): walked and skipped, never
// read as K/V.
struct RecurrentState {
  bool present = false;
  uint32_t cells = 0, entries = 0;
  uint64_t offset = 0, bytes = 0;
  std::vector<int32_t> positions;
};

struct StateFile {
  std::string magic, arch;  // magic: "ggsq", "ggsn" or "blob" (llama_state_seq_get_data's)
  uint32_t version = 0;     // 0 for a blob, which has none
  int32_t blob_seq = -1;    // a blob: the sequence it was taken from
  std::vector<int32_t> tokens;
  std::vector<StateSection> sections;
  std::vector<StateStream> streams;  // of every section, in file order
  std::vector<StateCell> cells;      // every cell of every stream, in file order
  RecurrentState recurrent;
  uint64_t file_bytes = 0;
};

// Parses and checks the whole structure (BAD_STATE_FILE, TRUNCATED, UNSUPPORTED_VERSION,
// UNSUPPORTED_DTYPE; trailing bytes are BAD_STATE_FILE). With a model, the memory has the model's
// sections (GgufModel::kv_sections, then a hybrid's recurrent state), each section's layer count and
// each row's width must match it (SHAPE_MISMATCH), and a blob that holds only the last section
// (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) is UNSUPPORTED_CACHE.
class StateReader {
 public:
  StateReader(const std::string& path, const GgufModel* model);
  const StateFile& file() const { return f_; }
  // The rows `cells` (indices into file().cells, all of one stream) of layer `layer`'s K or V as
  // float32, [cells.size(), width], row i = cells[i].
  void read_rows(const StateTensor& t, uint32_t stream_cells, const std::vector<uint32_t>& rows,
                 std::vector<float>& out);

 private:
  void check_version(bool seq);
  void parse_memory(const GgufModel* model);
  void parse_sections(const GgufModel* model);
  void refuse_partial(uint64_t start, const GgufModel& model);
  void parse_kv_section(const std::string& name, const std::vector<int64_t>* layers, const GgufModel* model);
  void parse_stream(uint32_t s, const std::vector<int64_t>* layers, const GgufModel* model);
  void parse_cells(uint32_t s, uint32_t count, bool ext);
  void parse_recurrent(const GgufModel& model);
  void check_one_stream_per_sequence() const;
  void parse_tensor(StateTensor& t, uint32_t cells, bool v, bool v_trans, int64_t layer, const GgufModel* model);
  ByteReader r_;
  StateFile f_;
};

// Undoes llama.cpp's Hadamard rotation of a quantized cache in place: each block of `n` values of
// every row is multiplied by the orthonormal Sylvester Hadamard matrix of order n (its own inverse).
void unrotate_hadamard(float* rows, int64_t count, int64_t width, int64_t n);

}  // namespace kvtool::impl
