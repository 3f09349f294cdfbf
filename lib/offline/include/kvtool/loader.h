// `kvtool load`: publish artifacts into a runtime pool, run every dumped query through it, and
// check each answer against the library's query path on the artifact file.
#pragma once
#include <optional>
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
  // Trust as `kvtool store get` applies it: each artifact under its tenant's policy
  // (tenant_policy: the expected tenant, else the artifact's own).
  StoreTrust trust;
  // Query options for the replay (e.g. budget, min_collisions); each artifact takes the ones its
  // kind has (settings_for), so one set serves a pool of mixed kinds.
  QuerySettings settings;
};

// The replay of the dumped queries through the pool (all zero when no dump was given).
struct ReplayStats {
  int64_t count = 0, mismatches = 0, host = 0, device = 0;
  std::optional<double> p50_us, p99_us;  // when queries were replayed
  json to_json() const;
};

struct LoadReport {
  std::optional<std::string> device;                             // the device backend in use (none: host tier only)
  std::vector<std::pair<std::string, PublishReceipt>> receipts;  // (artifact path, receipt)
  PoolStats tiers;
  int64_t publish_bytes = 0;
  double publish_seconds = 0;
  ReplayStats queries;
  double publish_mb_per_s() const { return publish_seconds > 0 ? publish_bytes / publish_seconds / 1e6 : 0.0; }
  json to_json() const;  // --json: {"schema_version", "device", "receipts", "tiers", "publish", "queries"}
};

// Throws the publish refusal's Error; a pool answer that differs from the file's is an INTERNAL
// error.
LoadReport load_artifacts(const LoadOptions& opt);

}  // namespace kvtool
