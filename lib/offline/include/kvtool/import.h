// `kvtool import`: any cache the snapshot registry reads (kvtool/snapshot.h: tensor files with a
// --layout, llama.cpp state files, LMCache and SGLang chunk files) into a kvdump v1 file
// (formats/kvdump-v1.md), one layer at a time, with one identity rule (--meta) and one value rule
// (finite, and within the range of the dump's dtype) for every format.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "kvtool/dump.h"
#include "kvtool/identity.h"
#include "kvtool/json.h"
#include "kvtool/snapshot.h"

namespace kvtool {

// Where and how the dump is written.
struct ImportOptions {
  std::optional<DType> dtype;  // dump dtype; default: the snapshot's (SnapshotInfo::geo.dtype)
  json meta = json::object();  // root attributes of the dump (formats/kvdump-v1.md); see import.cpp
  bool overwrite = false;
};

struct ImportSummary {
  DumpGeometry geo;
  int64_t committed_frontier = 0;
  std::string source_format;  // "npy", "npz", "safetensors" (several: comma-separated), "llama.cpp ggsq", ...
  std::string source_dtype;   // e.g. "f16"
  bool has_q = false, has_tokens = false, has_positions = false;
  json to_json() const;
};

// The dump spec an import writes: `meta` (the --meta object; model_artifact_sha256 and rope_config
// required, every other key optional with the defaults man/kvtool-import.1 lists) over `geo`;
// q_heads > 0 fixes the head map's length.
DumpSpec dump_spec_from_meta(const json& meta, const DumpGeometry& geo, int64_t q_heads);

// Writes the snapshot into the dump `out` atomically (nothing at `out` on failure; OUTPUT_EXISTS
// when it exists and !o.overwrite). Every committed value must be finite and fit the dump's dtype
// (NON_FINITE otherwise). Memory: a few copies of one layer's K and V.
ImportSummary import_snapshot(KvSnapshot& snapshot, const ImportOptions& o, const std::string& out);

// `kvtool import`: the request's snapshot (open_snapshot) written as above.
ImportSummary import_snapshot(const SnapshotRequest& request, const ImportOptions& o, const std::string& out);

}  // namespace kvtool
