// Source identity (DESIGN.md §5): the content digest of a covered row range, the snapshot digest of
// a whole dump, and the SourceBinding an artifact records so that `verify --source` can name the
// first field that differs.
#pragma once
#include <string>

#include "kvtool/dump.h"
#include "kvtool/json.h"
#include "kvtool/sha256.h"

namespace kvtool {

struct SourceBinding {
  DumpIdentity id;       // all identity attributes (generations recorded as provenance only)
  DumpGeometry geo;      // layers, kv_heads, head_dim, dtype are content; tokens/q_* provenance
  int64_t committed_frontier = 0;
  int64_t coverage_end = 0;
  std::string payload_sha256;   // SHA-256 of the K/V payload stream of rows [0, coverage_end)
  std::string content_digest;   // content_digest([0, coverage_end))
  std::string snapshot_digest;  // snapshot digest of the dump
  std::string prefix_tokens_sha256;  // SHA-256 of token ids [0, coverage_end) (empty without /kv/tokens)

  json to_json() const;
  static SourceBinding from_json(const json& j);  // BAD_MANIFEST on missing/mistyped fields
};

// Digest of the K/V payload of rows [0, end) for every (layer, kv head), in stored bytes.
Digest payload_digest(const DumpReader& dump, int64_t end);
// Content digest from identity + geometry + a payload digest (no generations, no frontier).
Digest content_digest(const DumpIdentity& id, const DumpGeometry& geo, int64_t end, const Digest& payload);
// Snapshot digest: every identity attribute incl. generations, T, frontier, content digest of [0, frontier).
Digest snapshot_digest(const DumpIdentity& id, const DumpGeometry& geo, int64_t frontier,
                       const Digest& content_of_frontier);
Digest prefix_tokens_digest(const std::vector<int64_t>& tokens, int64_t end);

// Canonical text of a rope_config attribute (canonical JSON); BAD_ATTRIBUTE when not a JSON object.
std::string canonical_rope_config(const std::string& rope);

// Reads the dump once and computes everything an artifact records for coverage [0, coverage_end).
// Also requires every committed K/V value to be finite (NON_FINITE).
SourceBinding bind_source(const DumpReader& dump, int64_t coverage_end);

// Checks that `dump` is a valid source for an artifact that recorded `recorded`. Throws Error naming
// the first differing field (TENANT_MISMATCH, MODEL_MISMATCH, ..., PAYLOAD_MISMATCH, STALE_SOURCE).
void check_source(const SourceBinding& recorded, const DumpReader& dump, bool strict_snapshot);

}  // namespace kvtool
