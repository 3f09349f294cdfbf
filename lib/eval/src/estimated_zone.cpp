// See impl/estimated_zone.h.
#include "impl/estimated_zone.h"

#include <algorithm>
#include <cmath>

#include "kvtool/error.h"

namespace kvtool::impl {

bool EstimatedZone::applies() {
  ClusterView v;
  for (const auto& [l, h] : artifact_parts(parts_.artifact()))
    if (parts_.part(l, h).cluster_view(v)) return true;
  return false;
}

const ZonePart& EstimatedZone::part(int64_t layer, int64_t kv_head) {
  auto [it, fresh] = cache_.try_emplace({layer, kv_head});
  ZonePart& p = it->second;
  if (!fresh) return p;
  p.clustered = parts_.part(layer, kv_head).cluster_view(p.view);
  if (!p.clustered) return p;
  const int64_t d = p.view.d;
  p.v.resize(static_cast<size_t>(E_ * d));
  dump_.read_v(layer, kv_head, 0, E_, p.v.data());
  p.cluster.assign(static_cast<size_t>(E_), -1);
  p.v_sum.assign(static_cast<size_t>(p.view.count * d), 0.0);
  for (int64_t c = 0; c < p.view.count; ++c) {
    const uint32_t* m = p.view.members + (p.view.prefix[c] - p.view.sizes[c]);
    for (uint32_t i = 0; i < p.view.sizes[c]; ++i) {
      KVT_CHECK(m[i] < static_cast<uint64_t>(E_), INTERNAL, "a cluster member is outside the prefix");
      p.cluster[m[i]] = static_cast<int32_t>(c);
      const float* vr = p.v.data() + static_cast<size_t>(m[i]) * d;
      for (int64_t k = 0; k < d; ++k) p.v_sum[static_cast<size_t>(c * d + k)] += vr[k];
    }
  }
  return p;
}

// For each cluster with rows the selection left out: logit q·centroid / sqrt(d) + log(left out),
// value the mean V of the rows left out (the cluster's sum less the fetched rows').
void EstimatedZone::add_estimates(const ZonePart& p, const float* q, AttentionRows& out) const {
  const int64_t C = p.view.count, d = p.view.d;
  thread_local std::vector<int64_t> fetched;
  thread_local std::vector<double> fetched_v;
  fetched.assign(static_cast<size_t>(C), 0);
  fetched_v.assign(static_cast<size_t>(C * d), 0.0);
  for (int32_t r : out.rows) {
    if (r >= E_) break;  // ascending: the decode rows follow
    const int32_t c = p.cluster[static_cast<size_t>(r)];
    if (c < 0) continue;  // sink, local window: no cluster holds them
    ++fetched[static_cast<size_t>(c)];
    const float* vr = p.v.data() + static_cast<size_t>(r) * d;
    for (int64_t k = 0; k < d; ++k) fetched_v[static_cast<size_t>(c * d + k)] += vr[k];
  }
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (int64_t c = 0; c < C; ++c) {
    const int64_t left = static_cast<int64_t>(p.view.sizes[c]) - fetched[static_cast<size_t>(c)];
    if (left <= 0) continue;
    const float* mu = p.view.centroids + c * d;
    double s = 0;
    for (int64_t k = 0; k < d; ++k) s += static_cast<double>(q[k]) * mu[k];
    out.extra_logit.push_back(static_cast<float>(s * scale + std::log(static_cast<double>(left))));
    for (int64_t k = 0; k < d; ++k) {
      const size_t i = static_cast<size_t>(c * d + k);
      out.extra_value.push_back(static_cast<float>((p.v_sum[i] - fetched_v[i]) / static_cast<double>(left)));
    }
  }
}

AttentionSelect EstimatedZone::wrap(AttentionSelect base) {
  return [this, base](int32_t l, int32_t h, const float* q, int32_t pos, AttentionRows& out) {
    if (!base(l, h, q, pos, out)) return false;
    const ZonePart& p = part(l, h / group_);
    if (p.clustered) add_estimates(p, q, out);
    return true;
  };
}

}  // namespace kvtool::impl
