// Source checks that need the dump itself (offline layer): binding an artifact to a dump's rows and
// checking a dump against a recorded binding so that `verify --source` can name the first field
// that differs. The binding's types and digests are in kvtool/identity.h (format layer).
#pragma once
#include <string>

#include "kvtool/dump.h"
#include "kvtool/identity.h"

namespace kvtool {

// Digest of the K/V payload of rows [0, end) for every (layer, kv head), in stored bytes.
Digest payload_digest(const DumpReader& dump, int64_t end);

// Reads the dump once and computes everything an artifact records for coverage [0, coverage_end).
// Also requires every committed K/V value and every dumped query to be finite (NON_FINITE).
SourceBinding bind_source(const DumpReader& dump, int64_t coverage_end);

// Checks that `dump` is a valid source for an artifact that recorded `recorded`. Throws Error naming
// the first differing field (TENANT_MISMATCH, MODEL_MISMATCH, ..., PAYLOAD_MISMATCH, STALE_SOURCE).
void check_source(const SourceBinding& recorded, const DumpReader& dump, bool strict_snapshot);
// Its two halves, in the order check_source runs them: the recorded fields (identity, geometry,
// prefix tokens, frontier; cheap), then the covered rows' payload and content digests (reads
// every covered K/V byte; eval runs it beside its passes).
void check_source_fields(const SourceBinding& recorded, const DumpReader& dump);
void check_source_rows(const SourceBinding& recorded, const DumpReader& dump);

}  // namespace kvtool
