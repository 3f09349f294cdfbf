// The one admission check that every reader of an artifact runs before it trusts a byte of it:
// `kvtool verify`, `query`, `eval`, `load`, the runtime pool and the prefix store. A file that
// fails one of them fails all of them, with the same reason (docs/architecture.md).
#pragma once
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/kinds.h"
#include "kvtool/signing.h"

namespace kvtool {

struct TrustPolicy {
  std::vector<PublicKeyRaw> trusted;  // empty: any valid signature (or none) is accepted
  bool require_signature = false;
};

// In this order, cheapest and most trust-relevant first: the signature (when present or required;
// before any section is decompressed), the section digests, then the kind's structure validation.
// Returns the artifact's kind.
const KindSpec& admit_artifact(const ArtifactReader& r, const TrustPolicy& trust);

}  // namespace kvtool
