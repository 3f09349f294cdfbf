// kind "squeeze", offline half: the fine level (cosine k-means), the coarse level (L2 k-means of the
// fine centroids), each flat or tree (common/kmeans.h), and the observation-window calibration
// (formats/kinds-v1.md, "squeeze").
#include "squeeze/squeeze_builder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/cluster_build.h"
#include "common/param_json.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/sha256.h"
#include "squeeze/squeeze_internal.h"

namespace kvtool {

using squeeze::cluster_scores;

std::vector<double> parse_quantiles(const std::string& s) {
  std::vector<double> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t pos = 0;
      double v = std::stod(item, &pos);
      KVT_CHECK(pos == item.size() && v > 0 && v < 1, USAGE, "bad quantile");
      out.push_back(v);
    } catch (...) {
      KVT_THROW(USAGE, "quantiles '" << s << "' must be comma-separated numbers in (0, 1)");
    }
  }
  KVT_CHECK(!out.empty(), USAGE, "quantiles is empty");
  return out;
}

std::vector<float> calibration_from_bytes(std::string_view bytes, const std::string& source) {
  KVT_CHECK(!bytes.empty() && bytes.size() % 4 == 0, SHAPE_MISMATCH,
            "'" << source << "' is not a float32 array (" << bytes.size() << " bytes)");
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

SqueezeBuilder::SqueezeBuilder(SqueezeParams p) : p_(std::move(p)) {
  const std::vector<float>& cal = p_.calibration_queries;
  if (cal.empty()) return;
  for (float x : cal) KVT_CHECK(std::isfinite(x), NON_FINITE, "the calibration queries hold NaN/Inf");
  calibration_sha256_ = to_hex(sha256(cal.data(), cal.size() * sizeof(float)));
}

json SqueezeBuilder::params() const {
  json j = {{"assignment", "cosine"},
            {"centroid", "raw-mean"},
            {"calibration", p_.calibration_queries.empty() ? "dump /kv/q in the observation window" : "file"},
            {"calibration_sha256", calibration_sha256_}};
#define KVTOOL_PARAM KVTOOL_MANIFEST_PARAM
#define KVTOOL_PARAM_TEXT KVTOOL_MANIFEST_TEXT_PARAM
#include "kvtool/kinds/squeeze_params.def"
  add_kmeans_params(j, p_.kmeans);
  return j;
}

void SqueezeBuilder::check(int64_t) const {
  KVT_CHECK(p_.percent_clusters > 0 && p_.percent_clusters <= 100, USAGE, "percent_clusters must be in (0, 100]");
  KVT_CHECK(p_.coarse_percent > 0 && p_.coarse_percent <= 100, USAGE, "coarse_percent must be in (0, 100]");
  KVT_CHECK(p_.observation_window >= 1, USAGE, "observation_window must be >= 1");
  KVT_CHECK(p_.iters >= 1 && p_.iters <= 10000, USAGE, "iters must be in 1..10000");
  KVT_CHECK(p_.coarse_factor >= 0 && p_.coarse_factor <= 1, USAGE, "coarse_factor must be in [0, 1]");
  KVT_CHECK(!p_.quantiles.empty(), USAGE, "no quantiles");
  check_kmeans_options(p_.kmeans);
}

namespace {

// Coarse level: L2 k-means of the fine centroids (unweighted) into kc groups; every fine centroid
// gets a parent. Stored coarse centroid = mean of its fine centroids (a group that ends empty keeps
// the k-means centroid). Returns the method used.
KmeansMethod coarse_level(const ClusterSet& fine, int64_t kc, int64_t iters, uint64_t seed, const KmeansOptions& km,
                          std::vector<float>& coarse, std::vector<uint32_t>& parent) {
  const int64_t d = fine.d, kf = fine.clusters();
  const KmeansMethod method = resolve_kmeans(km, kf, kc, iters);
  std::vector<int64_t> lab;
  std::vector<float> cent;
  kmeans(KmeansMetric::l2, method, km, fine.centroids.data(), kf, d, kc, iters, seed, lab, cent);
  std::vector<double> sum(static_cast<size_t>(kc * d), 0.0);
  std::vector<int64_t> cnt(static_cast<size_t>(kc), 0);
  parent.assign(static_cast<size_t>(kf), 0);
  for (int64_t j = 0; j < kf; ++j) {
    parent[j] = static_cast<uint32_t>(lab[j]);
    ++cnt[lab[j]];
    for (int64_t t = 0; t < d; ++t) sum[lab[j] * d + t] += fine.centroids[j * d + t];
  }
  coarse.resize(static_cast<size_t>(kc * d));
  for (int64_t g = 0; g < kc; ++g)
    for (int64_t t = 0; t < d; ++t)
      coarse[g * d + t] = cnt[g] ? static_cast<float>(sum[g * d + t] / cnt[g]) : cent[g * d + t];
  return method;
}

// The calibration queries of one part, in order, d floats each: the rows of --calibration-queries
// for every query head mapped to this kv head, else the dump's /kv/q queries of those heads in the
// observation window [E - window, E). Gathered before clustering, so that a dump without usable
// queries fails before the work.
std::vector<float> calibration_queries(const PartInput& in, const std::vector<float>& file, int64_t window) {
  const DumpReader& dump = *in.dump;
  const auto& info = dump.info();
  const int64_t d = in.head_dim;
  std::vector<float> out;
  auto mapped = [&](int64_t h) { return info.id.q_to_kv_head[static_cast<size_t>(h)] == in.kv_head; };
  if (!file.empty()) {
    const int64_t per = info.geo.layers * info.geo.q_heads * d;
    KVT_CHECK(static_cast<int64_t>(file.size()) % per == 0, SHAPE_MISMATCH,
              "calibration_queries holds " << file.size() << " floats, not a multiple of L x H_q x d = " << per);
    const int64_t N = static_cast<int64_t>(file.size()) / per;
    for (int64_t h = 0; h < info.geo.q_heads; ++h)
      if (mapped(h)) {
        const float* q = file.data() + (in.layer * info.geo.q_heads + h) * N * d;
        out.insert(out.end(), q, q + N * d);
      }
    return out;
  }
  KVT_CHECK(info.has_q, NO_QUERIES,
            "squeeze calibration needs /kv/q queries (a dump written with queries) or calibration_queries");
  std::vector<int64_t> qpos = dump.q_positions();
  const int64_t w0 = std::max<int64_t>(0, in.coverage_end - window);
  std::vector<size_t> qsel;
  for (size_t j = 0; j < qpos.size(); ++j)
    if (qpos[j] >= w0 && qpos[j] < in.coverage_end) qsel.push_back(j);
  KVT_CHECK(!qsel.empty(), NO_QUERIES,
            "the dump has no queries in the observation window [" << w0 << ", " << in.coverage_end << ")");
  std::vector<float> Q(static_cast<size_t>(info.geo.q_tokens * d));
  for (int64_t h = 0; h < info.geo.q_heads; ++h) {
    if (!mapped(h)) continue;
    dump.read_q(in.layer, h, Q.data());
    for (size_t j : qsel) out.insert(out.end(), Q.data() + static_cast<int64_t>(j) * d, Q.data() + (j + 1) * d);
  }
  return out;
}

}  // namespace

PartOutput SqueezeBuilder::build_part(const PartInput& in) const {
  const int64_t d = in.head_dim, rb = in.row_begin(), n = in.row_end() - rb;
  PartOutput out;
  out.meta = {{"indexed_rows", n}};
  if (n == 0) return out;
  const std::vector<float> cal = calibration_queries(in, p_.calibration_queries, p_.observation_window);
  // Fine level: cosine k-means, stored centroid = mean of the raw keys of each final cluster.
  const int64_t kf =
      std::max<int64_t>(1, std::min<int64_t>(n, static_cast<int64_t>(std::floor(p_.percent_clusters / 100.0 * n))));
  ClusterSet fine;
  fine.d = d;
  const KmeansMethod fine_method =
      add_clusters(fine, in.keys + rb * d, rb, n, kf, p_.iters, in.seed, CentroidRule::raw_mean, p_.kmeans);
  std::vector<uint32_t> labels(static_cast<size_t>(n));
  for (int64_t c = 0; c < fine.clusters(); ++c)
    for (uint32_t i = fine.prefix[c] - fine.sizes[c]; i < fine.prefix[c]; ++i)
      labels[fine.members[i] - rb] = static_cast<uint32_t>(c);
  // Coarse level: L2 k-means of the fine centroids (unweighted); every fine centroid gets a parent.
  const int64_t kc = std::max<int64_t>(1, std::min<int64_t>(kf, std::llround(p_.coarse_percent / 100.0 * kf)));
  std::vector<float> coarse;
  std::vector<uint32_t> parent;
  const KmeansMethod coarse_method = coarse_level(fine, kc, p_.iters, in.seed ^ 0x5bd1e995u, p_.kmeans, coarse, parent);
  out.meta["kmeans"] = {{"fine", kmeans_method_name(fine_method)}, {"coarse", kmeans_method_name(coarse_method)}};
  // Calibration: per fine cluster the mean over the calibration queries of exp(z_c) / sum_j N_j exp(z_j).
  std::vector<double> mean(static_cast<size_t>(kf), 0.0), sc;
  const int64_t nq = static_cast<int64_t>(cal.size()) / d;
  Sha256 cal_digest;  // digest of the calibration set this part used (float32 queries, in order)
  cal_digest.update(cal.data(), cal.size() * sizeof(float));
  for (int64_t j = 0; j < nq; ++j) {
    cluster_scores(cal.data() + j * d, fine.centroids, fine.sizes, d, sc);
    for (int64_t c = 0; c < kf; ++c) mean[c] += sc[c];
  }
  out.meta["calibration_sha256"] = to_hex(cal_digest.finish());
  json scores = json::array(), weights = json::array();
  for (int64_t c = 0; c < kf; ++c) {
    scores.push_back(static_cast<double>(static_cast<float>(mean[c] / static_cast<double>(nq))));
    weights.push_back(fine.sizes[c]);
  }
  out.meta["fine_clusters"] = kf;
  out.meta["coarse_groups"] = kc;
  out.meta["calibration_queries"] = nq;
  out.meta["calibration_scores"] = scores;
  out.meta["calibration_weights"] = weights;
  cluster_sections(fine, out.sections, "sq_fine");
  auto bytes = [](const void* p, size_t nb) {
    std::vector<uint8_t> b(nb);
    if (nb) std::memcpy(b.data(), p, nb);
    return b;
  };
  out.sections.push_back({"sq_labels", "u32", {n}, bytes(labels.data(), labels.size() * 4)});
  out.sections.push_back({"sq_coarse_centroids", "f32", {kc, d}, bytes(coarse.data(), coarse.size() * 4)});
  out.sections.push_back({"sq_parent", "u32", {kf}, bytes(parent.data(), parent.size() * 4)});
  return out;
}

}  // namespace kvtool
