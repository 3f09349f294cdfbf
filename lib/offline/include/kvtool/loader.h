// `kvtool load`: publish artifacts into a runtime pool, run every dumped query through it, and
// check each answer against the library's query path on the artifact file.
#pragma once
#include <string>
#include <vector>

#include "kvtool/json.h"
#include "kvtool/pool.h"
#include "kvtool/query.h"
#include "kvtool/store.h"

namespace kvtool {

struct LoadOptions {
  std::vector<std::string> artifacts;
  std::string source;  // dump: binding check (expected content digest, tenant) and the queries
  std::string store_dir;
  StoreKey store_key;  // with store_dir: the artifact the store holds for this key is loaded too
  PoolOptions pool;    // budgets and the device backend (nullptr: host tier only)
  std::string tenant;  // expected tenant (default: the dump's)
  TrustPolicy trust;
  Budget budget;
  int64_t min_collisions = 2;
};

// Returns {"schema_version", "device", "receipts": [...], "tiers", "publish", "queries"}. Throws the
// publish refusal's Error; a pool answer that differs from the file's is an INTERNAL error.
json load_artifacts(const LoadOptions& opt);

// "4096", "512K", "64M", "8G", "1T" (binary units; "B"/"iB" suffixes accepted). USAGE otherwise.
int64_t parse_bytes(const std::string& s);

}  // namespace kvtool
