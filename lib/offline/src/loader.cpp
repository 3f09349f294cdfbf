#include "kvtool/loader.h"

#include <algorithm>
#include <chrono>

#include "kvtool/stats.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/source_binding.h"

namespace kvtool {

using Clock = std::chrono::steady_clock;

LoadReport load_artifacts(const LoadOptions& opt) {
  std::vector<std::pair<std::string, std::string>> items;  // (pool key, path)
  for (const auto& a : opt.artifacts) items.emplace_back(a, a);
  if (!opt.store_dir.empty()) {
    // The store admits the object under the same trust policy the pool applies.
    items.emplace_back("store:" + opt.store_key.tenant + "/" + opt.store_key.kind + "/" + opt.store_key.prefix_hash,
                       Store(opt.store_dir).get(opt.store_key, opt.trust).path);
  }
  KVT_CHECK(!items.empty(), USAGE, "give at least one artifact or a store with a key");
  std::unique_ptr<DumpReader> dump;
  if (!opt.source.empty()) dump = std::make_unique<DumpReader>(opt.source);

  Pool pool(opt.pool);
  LoadReport rep;
  if (opt.pool.device) rep.device = opt.pool.device->name();
  for (const auto& [key, path] : items) {
    PublishRequest req;
    req.key = key;
    req.artifact = path;
    req.device = pool.device_available();
    req.tenant = opt.tenant;
    ArtifactReader r(path);
    if (dump) {
      check_source(r.source(), *dump, false);  // this dump is the artifact's source (STALE_SOURCE, ...)
      req.expected_content_digest = r.source().content_digest;
      if (req.tenant.empty()) req.tenant = dump->info().id.tenant_namespace;
    }
    // A tenant's own key folder vouches for that tenant's artifacts only.
    req.trust =
        tenant_policy(opt.trust, req.tenant.empty() ? r.source().id.tenant_namespace : req.tenant, r.is_signed());
    auto t0 = Clock::now();
    PublishReceipt rc = pool.publish(req);
    rep.publish_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    rep.publish_bytes += static_cast<int64_t>(pool.acquire(key).artifact().file_size());
    rep.receipts.emplace_back(path, rc);
  }

  std::vector<double> lat;
  if (dump && dump->info().has_q) {
    const auto& geo = dump->info().geo;
    const std::vector<int64_t> qpos = dump->q_positions();
    std::vector<float> qs(static_cast<size_t>(geo.q_tokens * geo.head_dim)), keys;
    int64_t count = 0, mismatches = 0, host = 0, device = 0;
    for (const auto& [key, path] : items) {
      Lease lease = pool.acquire(key);
      ArtifactReader file(path);
      const KindSpec* kind = find_kind(file.kind());
      if (!kind || !kind->load) continue;  // published as bytes only (container-test): nothing to ask
      SelectorSet direct(file);
      const auto params = direct.params(settings_for(*kind, opt.settings));
      const int64_t cov = file.source().coverage_end;
      const auto parts = artifact_parts(file);  // a partial artifact (--layers) is asked only about its parts
      for (int64_t l = 0; l < geo.layers; ++l)
        for (int64_t h = 0; h < geo.q_heads; ++h) {
          if (!parts.count({l, file.source().id.q_to_kv_head[static_cast<size_t>(h)]})) continue;
          dump->read_q(l, h, qs.data());
          KeyRows kr;
          if (kind->needs_keys) {
            keys.resize(static_cast<size_t>(cov * geo.head_dim));
            dump->read_k(l, file.source().id.q_to_kv_head[static_cast<size_t>(h)], 0, cov, keys.data());
            kr = KeyRows{keys.data(), cov, geo.head_dim};
          }
          const KeyRows* kp = kind->needs_keys ? &kr : nullptr;
          for (int64_t i = 0; i < geo.q_tokens; ++i) {
            const int64_t pos = qpos[static_cast<size_t>(i)];
            if (pos < cov - 1) continue;
            const float* q = qs.data() + i * geo.head_dim;
            auto t0 = Clock::now();
            CandidateReceipt p = lease.query(l, h, q, pos, *params, kp);
            lat.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            CandidateReceipt f = direct.query(l, h, q, pos, *params, kp);
            ++count;
            (p.tier == "device" ? device : host)++;
            if (p.candidates != f.candidates) ++mismatches;
          }
        }
    }
    KVT_CHECK(mismatches == 0, INTERNAL,
              mismatches << " of " << count << " pool answers differ from the artifact file's; please report this");
    rep.queries = {count, mismatches, host, device, nearest_rank(lat, 0.5) * 1e6, nearest_rank(lat, 0.99) * 1e6};
  }
  rep.tiers = pool.stats();
  return rep;
}

json ReplayStats::to_json() const {
  json j = {{"count", count}, {"mismatches", mismatches}, {"host", host}, {"device", device}};
  if (p50_us) j["latency_us"] = {{"p50", *p50_us}, {"p99", p99_us.value_or(0)}};
  return j;
}

json LoadReport::to_json() const {
  json rs = json::array();
  for (const auto& [path, rc] : receipts) {
    json j = rc.to_json();
    j["artifact"] = path;
    rs.push_back(j);
  }
  return {{"schema_version", kJsonSchemaVersion},
          {"device", device ? json(*device) : json(nullptr)},
          {"receipts", rs},
          {"tiers", tiers.to_json()},
          {"publish", {{"bytes", publish_bytes}, {"seconds", publish_seconds}, {"mb_per_s", publish_mb_per_s()}}},
          {"queries", queries.to_json()}};
}

}  // namespace kvtool
