// The append framework shared by the kinds that grow an artifact by index generations (pq,
// clusterkv): open and verify the old artifact, check the dump still holds the rows it was built
// from, bind the new coverage, rewrite every part through the kind's step, and record generation
// index_generation + 1. A kind supplies only what differs: how far the new coverage reaches, how
// one part grows, and its generation record.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/json.h"

namespace kvtool {

class ArtifactReader;

// What a kind's plan decides for the whole artifact.
struct AppendPlan {
  int64_t coverage_end = 0;              // the new source binding covers [0, coverage_end)
  int64_t rows_begin = 0, rows_end = 0;  // the new rows of every indexed part: dump rows [begin, end)
  int64_t indexed_rows = 0;              // recorded as indexed_rows in every part's meta
};

// One indexed (not dense) part to grow.
struct AppendPartInput {
  const ArtifactReader& old;  // the part's old sections: old.find(name, layer, kv_head)
  int64_t layer, kv_head, head_dim;
  int64_t index_generation;  // the generation being written
  const float* rows;         // the plan's new rows, row-major [rows_end - rows_begin, head_dim]
  int64_t rows_begin, rows_end;
};

class KindAppender {
 public:
  virtual ~KindAppender() = default;
  virtual std::string kind() const = 0;
  // The new coverage from the old (verified) artifact and the requested prefix, which is within
  // the dump's committed frontier. USAGE when it is not a valid new generation.
  virtual AppendPlan plan(const ArtifactReader& old, int64_t prefix) = 0;
  // Grows one indexed part: out.meta arrives as the old part meta with indexed_rows updated; the
  // step adds the part's sections (all of them: the old ones are not copied) and any meta it keeps.
  virtual void append_part(const AppendPartInput& in, PartOutput& out) = 0;
  // kind_data.generations: the record an artifact without one implies for its first generation,
  // and the record of the generation being written.
  virtual json first_generation() const = 0;
  virtual json generation(int64_t index_generation) const = 0;
};

// What append_generation wrote. A kind's append function returns its own summary holding this one
// and the fields the kind adds (from its appender, after every part was appended).
struct AppendSummary {
  std::string output, manifest_sha256;
  int64_t index_generation = 0;
  int64_t coverage_end = 0;  // the new coverage [0, coverage_end)
  int64_t parts = 0;         // parts rewritten (not in the JSON: a kind's per-part averages divide by it)
  json to_json() const;
};

// What an append reads, writes and signs: the same for every kind (a kind's own choices, as
// clusterkv's window, are further arguments of its append function).
struct AppendOptions {
  std::string artifact;  // the existing artifact
  std::string dump;      // the dump it was built from, grown since
  std::string output;    // the new artifact; nothing is left there on failure
  int64_t prefix = -1;   // the new coverage reaches up to here (-1: the dump's committed frontier)
  std::string sign_key;  // Ed25519 PEM to sign with; empty: unsigned
  bool quiet = false;    // no progress
};

// Writes `o.output`: the artifact at `o.artifact` with a new index generation covering the dump up
// to `o.prefix`. Refuses a dump whose rows under the old coverage differ. Returns the summary.
AppendSummary append_generation(const AppendOptions& o, KindAppender& kind);

}  // namespace kvtool
