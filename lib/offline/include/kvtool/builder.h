// The builder framework shared by every index kind: reads a dump slice by slice, builds one part
// per (layer, kv head) in parallel, writes the parts in order into one signed kvi artifact.
// Deterministic whatever the thread count: parts are seeded from (seed, layer, kv head), each
// part's FAISS/BLAS work runs single-threaded, and parts are written in (layer, kv head) order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/json.h"

namespace kvtool {

// The most worker threads any command takes: every thread costs a stack and a slice buffer, so an
// unbounded count (a typo, a hostile KVTOOL_THREADS) would grow memory without end.
inline constexpr int kMaxThreads = 1024;

struct BuildOptions {
  std::string output;
  int64_t prefix = -1;                       // coverage end; -1: the dump's committed frontier
  int64_t sink = -1;                         // -1: the kind's default
  int64_t local = -1;                        // -1: the kind's default
  int64_t layer_first = 0, layer_last = -1;  // inclusive; -1: last layer
  uint64_t seed = 0;
  // Worker threads. The library reads no environment: callers pass the count they want (the CLI
  // uses tools/common/env.h default_threads(): affinity, cgroup quota, SLURM_CPUS_PER_TASK).
  // 0: std::thread::hardware_concurrency() (at least 1); at most kMaxThreads.
  int threads = 0;
  int64_t shard_index = 0, shard_count = 1;
  std::string sign_key;
  int zstd_level = 3;
  bool quiet = false;
};

// Keeps OpenBLAS (and OpenMP) single-threaded in the calling thread (parallelism is across parts).
void pin_blas_single_thread();

// One section produced by a part.
struct PartSection {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  SectionFilter filter = SectionFilter::none;  // delta: sorted ids, running offsets (codec zstd-delta)
};

class DumpReader;

struct PartInput {
  int64_t layer, kv_head, head_dim;
  int64_t coverage_end, sink, local;  // indexed rows: [row_begin(), row_end())
  uint64_t seed;                      // part_seed(seed, layer, kv_head)
  uint64_t base_seed;                 // --seed itself (for kinds that derive more streams per part)
  const float* keys;                  // rows [0, coverage_end), row-major [coverage_end, head_dim]
  const DumpReader* dump;             // the source (e.g. for calibration queries); thread-safe reads
  int64_t row_begin() const;
  int64_t row_end() const;
};

struct PartOutput {
  std::vector<PartSection> sections;
  json meta = json::object();  // recorded in kind_data.parts (with layer and kv_head added)
};

class KindBuilder {
 public:
  virtual ~KindBuilder() = default;
  virtual std::string kind() const = 0;
  virtual int64_t default_sink() const = 0;
  virtual int64_t default_local() const = 0;
  // Kind parameters recorded in the manifest params (common parameters are added by the framework).
  virtual json params() const = 0;
  // Checks the parameters against the dump geometry (USAGE on error).
  virtual void check(int64_t head_dim) const = 0;
  // A copy whose defaults that depend on the part size are resolved for parts of `indexed_rows`
  // rows of dimension `head_dim`; null when no parameter depends on them. build_artifact builds
  // and records the resolved one.
  virtual std::unique_ptr<KindBuilder> resolved(int64_t /*head_dim*/, int64_t /*indexed_rows*/) const {
    return nullptr;
  }
  // Builds one part; called concurrently from several threads.
  virtual PartOutput build_part(const PartInput& in) const = 0;
};

// What build_artifact wrote; the CLI prints the fields, --json is to_json().
struct BuildSummary {
  std::string output, kind;
  int64_t parts_total = 0;
  int64_t part_begin = 0, part_end = 0;  // this build's parts [part_begin, part_end) of parts_total
  int64_t coverage_end = 0;              // covered rows [0, coverage_end)
  std::string content_digest, manifest_sha256;
  uint64_t section_raw_bytes = 0;
  int threads = 0;
  bool is_signed = false;
  json to_json() const;
};

// Builds the artifact and returns its summary. Throws Error on bad input; nothing is left at the
// output path on failure.
BuildSummary build_artifact(const std::string& dump_path, const BuildOptions& opt, const KindBuilder& kind);

// What merge_artifacts wrote; --json is to_json().
struct MergeSummary {
  std::string output, manifest_sha256;
  size_t shards = 0;
  int64_t parts_total = 0;
  bool is_signed = false;
  json to_json() const;
};

// Combines shard artifacts (same kind, params, source binding) into the artifact an unsharded build
// gives, byte for byte (before signing). Returns its summary.
MergeSummary merge_artifacts(const std::vector<std::string>& shards, const std::string& output,
                             const std::string& sign_key, bool quiet);

}  // namespace kvtool
