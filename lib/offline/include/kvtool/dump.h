// kvdump v1 (formats/kvdump-v1.md): HDF5 reader that streams one (layer, kv head) slice at a time
// and converts to float32, and an atomic writer.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/identity.h"

namespace kvtool {

struct DumpInfo {
  DumpIdentity id;
  DumpGeometry geo;
  int64_t committed_frontier = 0;
  bool has_q = false, has_tokens = false, has_positions = false;
  std::string generator;   // optional root attribute "generator" (e.g. "kvtool synth ...")
  bool synthetic = false;  // optional root attribute "synthetic" = 1
};

// True when the file starts with the HDF5 signature.
bool looks_like_hdf5(const std::string& path);

// Whether libhdf5's own error stacks are printed on stderr (off by default: kvtool reports a reason
// and a sentence; `kvtool -v` turns them on for diagnosing a damaged dump). Process-wide.
void set_hdf5_error_stacks(bool print);

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
  DumpGeometry geo;                 // q_tokens > 0 writes /kv/q and /kv/q_positions
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
