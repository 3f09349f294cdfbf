// The decoders behind the chunk-file readers (kvtool/chunk_files.h): each input file becomes a
// source of float values and one or more pieces that say where K and V of which layers and rows are
// inside it. Every piece is a strided view: value (kv, layer, row, head, i) of a piece is element
//   kv * s_kv + (layer - first_layer) * s_l + row * s_t + head * s_h + i
// of its source, so one reader serves every layout of formats/lmcache.md and
// formats/sglang-hicache.md. plan_chunks() checks every header and size; read_layer() only reads
// what the plan was checked to describe.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/chunk_files.h"

namespace kvtool::chunks {

// Values of one input file as float32, elements [first, first + count) of its data.
class Source {
 public:
  virtual ~Source() = default;
  virtual void read(int64_t first, int64_t count, float* out) const = 0;
  // Closes the file until the next read (a plan holds one source per chunk file).
  virtual void release() const {}
};

struct Piece {
  size_t source = 0;
  int64_t first_layer = 0, layers = 0;  // the layers it holds: all of them, or one
  int64_t row0 = 0, rows = 0;           // dump rows [row0, row0 + rows)
  int64_t s_kv = 0, s_l = 0, s_t = 0, s_h = 0;
};

struct Plan {
  std::string format, memory_format;
  std::string source_dtype;  // "f16", "bf16", "f32"
  int64_t layers = 0, kv_heads = 0, head_dim = 0, tokens = 0;
  std::vector<std::unique_ptr<Source>> sources;
  std::vector<Piece> pieces;
};

Plan plan_chunks(const std::vector<std::string>& inputs, const ChunkOptions& o);

// K and V of `layer` for every row, each [kv_heads][tokens][head_dim].
void read_layer(const Plan& p, int64_t layer, std::vector<float>& k, std::vector<float>& v);

}  // namespace kvtool::chunks
