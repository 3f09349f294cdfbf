// kvdump v1 (formats/kvdump-v1.md): HDF5 reader that streams one (layer, kv head) slice at a time
// and converts to float32, and an atomic writer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvtool {

enum class DType { f32, f16, bf16 };
const char* dtype_name(DType t);
DType parse_dtype(const std::string& s);  // "f32|float32", "f16|float16", "bf16|bfloat16"; USAGE otherwise
size_t dtype_size(DType t);

// Identity attributes of a dump (DESIGN.md §4–§5).
struct DumpIdentity {
  std::string model_artifact_sha256;
  int64_t checkpoint_generation = 0;
  std::string adapter_set_sha256;
  std::string position_contract = "post-rope-absolute-v1";
  std::string rope_config;  // JSON string
  std::string tenant_namespace = "default";
  int64_t namespace_generation = 0;
  int64_t request_generation = 0;
  int64_t cache_generation = 0;
  int64_t publication_generation = 0;
  std::vector<int32_t> q_to_kv_head;
  std::string representation;
};

// SHA-256 of the empty adapter set (the canonical digest of "no adapters").
std::string empty_adapter_set_digest();

struct DumpGeometry {
  int64_t layers = 0, kv_heads = 0, tokens = 0, head_dim = 0;
  int64_t q_heads = 0;   // length of q_to_kv_head
  int64_t q_tokens = 0;  // T_q of /kv/q; 0 when the dump has no queries
  DType dtype = DType::f32;
};

struct DumpInfo {
  DumpIdentity id;
  DumpGeometry geo;
  int64_t committed_frontier = 0;
  bool has_q = false, has_tokens = false, has_positions = false;
  std::string generator;  // optional root attribute "generator" (e.g. "kvtool synth ...")
  bool synthetic = false; // optional root attribute "synthetic" = 1
};

// True when the file starts with the HDF5 signature.
bool looks_like_hdf5(const std::string& path);

class DumpReader {
 public:
  // Opens and checks the structure: required attributes, shapes, dtype, head map, frontier.
  explicit DumpReader(const std::string& path);
  ~DumpReader();
  DumpReader(const DumpReader&) = delete;
  DumpReader& operator=(const DumpReader&) = delete;

  const DumpInfo& info() const { return info_; }
  const std::string& path() const { return path_; }

  // Rows [r0, r1) of one (layer, kv head) slice as float32, row-major [(r1-r0), d].
  void read_k(int64_t layer, int64_t head, int64_t r0, int64_t r1, float* out) const;
  void read_v(int64_t layer, int64_t head, int64_t r0, int64_t r1, float* out) const;
  // Same rows in the stored dtype's little-endian bytes ((r1-r0)*d*dtype_size bytes).
  void read_k_raw(int64_t layer, int64_t head, int64_t r0, int64_t r1, void* out) const;
  void read_v_raw(int64_t layer, int64_t head, int64_t r0, int64_t r1, void* out) const;
  // All dumped queries of one query head, [T_q, d] float32.
  void read_q(int64_t layer, int64_t q_head, float* out) const;
  std::vector<int64_t> q_positions() const;
  std::vector<int64_t> tokens() const;
  std::vector<int64_t> positions() const;  // default 0..T-1

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string path_;
  DumpInfo info_;
};

struct DumpSpec {
  DumpIdentity id;
  DumpGeometry geo;  // q_tokens > 0 writes /kv/q and /kv/q_positions
  int64_t committed_frontier = -1;  // -1: T
  std::string generator;
  bool synthetic = false;
};

class DumpWriter {
 public:
  DumpWriter(const std::string& path, const DumpSpec& spec, bool overwrite = true);
  ~DumpWriter();
  DumpWriter(const DumpWriter&) = delete;
  DumpWriter& operator=(const DumpWriter&) = delete;
  // One (layer, kv head) slice, [T, d] float32 each, converted to the dump dtype.
  void write_kv(int64_t layer, int64_t head, const float* k, const float* v);
  void write_q(int64_t layer, int64_t q_head, const float* q);  // [T_q, d]
  void write_q_positions(const std::vector<int64_t>& p);
  void write_tokens(const std::vector<int64_t>& t);
  void write_positions(const std::vector<int64_t>& p);
  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvtool
