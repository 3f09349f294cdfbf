// kind "squeeze", runtime half: structural validation (including the recomputed thresholds), the
// two-level (or flat) threshold selector and its device path, the thresholds finalized from every
// part, and the kind's registration (formats/kinds-v1.md, "squeeze").
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "common/cluster_set.h"
#include "kvtool/artifact.h"
#include "kvtool/device.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/scoring.h"
#include "squeeze/squeeze_internal.h"

namespace kvtool {

namespace {

using squeeze::normalize_scores;
using squeeze::quantile_key;

// Scaled dot products z = q·c / sqrt(d) of centroids of one level (coarse or fine), all of them
// (rows == nullptr) or the listed ones: computed on the host or by the device tier.
using LevelDots = std::function<void(bool coarse, const int64_t* rows, int64_t count, double scale, double* out)>;

// squeeze's query options: which calibrated quantile's threshold to apply, and the flat lookup
// (every fine centroid scored, as the reference does) instead of the two-level pass.
struct SqueezeParams : QueryParams {
  double quantile = 0.5;
  bool flat = false;
  json receipt(int64_t) const override { return {{"quantile", quantile}, {"mode", flat ? "flat" : "hierarchical"}}; }
  std::string label() const override { return "q=" + json(quantile).dump() + (flat ? "/flat" : "/hier"); }
  json setting() const override { return {{"quantile", quantile}, {"mode", flat ? "flat" : "hierarchical"}}; }
};

class SqueezeSelector : public PartSelector {
 public:
  SqueezeSelector(const ArtifactReader& r, int64_t layer, int64_t head) : rows_(IndexedRows::of(r)) {
    const json& pm = part_meta(r, layer, head);
    n_ = int_member(pm, "indexed_rows", "squeeze part");
    d_ = r.source().geo.head_dim;
    const json& kd = r.manifest()["kind_data"];
    KVT_CHECK(kd.contains("thresholds"), PART_INVALID,
              "the squeeze artifact has no calibrated thresholds (an unmerged shard?)");
    thresholds_ = kd["thresholds"];
    coarse_factor_ = member(r.manifest()["params"], "coarse_factor", "params").get<double>();
    if (n_ == 0) return;
    fine_ = ClusterSet::load(r, layer, head, d_, "sq_fine");
    auto cb = r.read_section(require_section(r, "sq_coarse_centroids", layer, head));
    coarse_.resize(cb.size() / 4);
    std::memcpy(coarse_.data(), cb.data(), cb.size());
    auto pb = r.read_section(require_section(r, "sq_parent", layer, head));
    parent_.resize(pb.size() / 4);
    std::memcpy(parent_.data(), pb.data(), pb.size());
    const int64_t G = static_cast<int64_t>(coarse_.size()) / d_;
    children_.assign(static_cast<size_t>(G), {});
    group_size_.assign(static_cast<size_t>(G), 0);
    for (size_t j = 0; j < parent_.size(); ++j) {
      children_[parent_[j]].push_back(static_cast<int64_t>(j));
      group_size_[parent_[j]] += fine_.sizes[j];
    }
  }
  int64_t indexed_rows() const override { return n_; }
  void select(const SelectRequest& req, Selection& out) const override {
    select_with(req, out, [&](bool coarse, const int64_t* rows, int64_t count, double scale, double* z) {
      scoring::dot_scores_f64(req.q, coarse ? coarse_.data() : fine_.centroids.data(), rows, count, d_, scale, z);
    });
  }
  bool select_device(const SelectRequest& req, const DevicePart& dp, Selection& out) const override {
    const DeviceSection* f = dp.find("sq_fine_centroids");
    const DeviceSection* c = dp.find("sq_coarse_centroids");
    if (n_ == 0 || !f || !c) return false;
    select_with(req, out, [&](bool coarse, const int64_t* rows, int64_t count, double scale, double* z) {
      dp.dev->dot_scores_f64(static_cast<const float*>(coarse ? c->ptr : f->ptr), rows, count, d_, scale, req.q, z);
    });
    return true;
  }
  void select_with(const SelectRequest& req, Selection& out, const LevelDots& dots) const {
    const SqueezeParams& p = params_of<SqueezeParams>(req);
    std::string key = quantile_key(p.quantile);
    KVT_CHECK(thresholds_.contains(key), USAGE,
              "quantile " << key << " was not calibrated; the artifact has " << thresholds_.dump());
    const double tau = thresholds_[key];
    if (n_ == 0) {
      out.centroids_scored = 0;
      return;
    }
    const int64_t C = fine_.clusters(), G = static_cast<int64_t>(children_.size());
    std::vector<double> score(static_cast<size_t>(C), -1.0);
    if (p.flat) {
      dots(false, nullptr, C, 1.0 / std::sqrt(static_cast<double>(d_)), score.data());
      normalize_scores(fine_.sizes, score);
      out.centroids_scored = C;
    } else {
      // Coarse pass: groups scored like clusters of their total size; a group survives when its
      // per-key score reaches coarse_factor x tau. The fine pass scores only surviving children;
      // pruned groups enter the denominator through their coarse centroid.
      const double inv = 1.0 / std::sqrt(static_cast<double>(d_));
      std::vector<double> zg(static_cast<size_t>(G));
      double mx = -INFINITY;
      dots(true, nullptr, G, inv, zg.data());
      for (int64_t g = 0; g < G; ++g) mx = std::max(mx, zg[g]);
      double den_c = 0;
      for (int64_t g = 0; g < G; ++g) den_c += group_size_[g] * std::exp(zg[g] - mx);
      std::vector<char> keep(static_cast<size_t>(G), 0);
      for (int64_t g = 0; g < G; ++g) keep[g] = std::exp(zg[g] - mx) / den_c >= coarse_factor_ * tau;
      std::vector<double> zf(static_cast<size_t>(C), 0.0);
      int64_t scored = G;
      for (int64_t g = 0; g < G; ++g) {
        if (!keep[g]) continue;
        const auto& ch = children_[g];
        std::vector<double> z(ch.size());
        dots(false, ch.data(), static_cast<int64_t>(ch.size()), inv, z.data());
        for (size_t i = 0; i < ch.size(); ++i) {
          zf[ch[i]] = z[i];
          mx = std::max(mx, z[i]);
        }
        scored += static_cast<int64_t>(ch.size());
      }
      double den = 0;
      for (int64_t g = 0; g < G; ++g) {
        if (keep[g])
          for (int64_t j : children_[g]) den += fine_.sizes[j] * std::exp(zf[j] - mx);
        else
          den += group_size_[g] * std::exp(zg[g] - mx);
      }
      for (int64_t g = 0; g < G; ++g)
        if (keep[g])
          for (int64_t j : children_[g]) score[j] = std::exp(zf[j] - mx) / den;
      out.centroids_scored = scored;
    }
    std::vector<std::pair<int64_t, float>> picked;
    for (int64_t c = 0; c < C; ++c)
      if (score[c] >= tau) {
        const uint32_t* m = fine_.members.data() + (fine_.prefix[c] - fine_.sizes[c]);
        for (uint32_t i = 0; i < fine_.sizes[c]; ++i) picked.emplace_back(m[i], static_cast<float>(score[c]));
      }
    std::sort(picked.begin(), picked.end());  // members expanded in ascending position order
    for (auto& [id, s] : picked) {
      out.ids.push_back(id);
      out.scores.push_back(s);
    }
  }
  json describe() const override { return {{"fine_clusters", fine_.clusters()}, {"coarse_groups", children_.size()}}; }
  int64_t resident_bytes() const override {
    int64_t b = fine_.resident_bytes() + vector_bytes(coarse_) + vector_bytes(parent_) + vector_bytes(group_size_) +
                vector_bytes(children_);
    for (const auto& c : children_) b += vector_bytes(c);
    return b;
  }

 private:
  IndexedRows rows_;
  int64_t n_ = 0, d_ = 0;
  json thresholds_;
  double coarse_factor_ = 0.5;
  ClusterSet fine_;
  std::vector<float> coarse_;
  std::vector<uint32_t> parent_;
  std::vector<std::vector<int64_t>> children_;
  std::vector<uint64_t> group_size_;
};

// params.quantiles (numbers in (0, 1]) and params.coarse_factor (a finite number >= 0), which
// every query reads.
void validate_squeeze_params(const json& params) {
  const json& qs = member(params, "quantiles", "params");
  KVT_CHECK(qs.is_array() && !qs.empty(), BAD_MANIFEST, "params.quantiles must be a non-empty list");
  for (const auto& q : qs)
    KVT_CHECK(q.is_number() && q.get<double>() > 0 && q.get<double>() <= 1, BAD_MANIFEST,
              "params.quantiles holds " << q.dump() << ", not a number in (0, 1]");
  const json& cf = member(params, "coarse_factor", "params");
  KVT_CHECK(cf.is_number() && std::isfinite(cf.get<double>()) && cf.get<double>() >= 0, BAD_MANIFEST,
            "params.coarse_factor must be a finite number >= 0");
}

// The calibration record of one part: scores and weights, numbers, of equal length.
void validate_calibration(const json& pm, int64_t layer, int64_t head) {
  if (!pm.contains("calibration_scores") && !pm.contains("calibration_weights")) return;  // a part without rows
  const json& s = member(pm, "calibration_scores", "squeeze part");
  const json& w = member(pm, "calibration_weights", "squeeze part");
  KVT_CHECK(s.is_array() && w.is_array() && s.size() == w.size(), BAD_MANIFEST,
            "the calibration scores and weights of part (" << layer << ", " << head << ") are not lists of one length");
  for (size_t i = 0; i < s.size(); ++i)
    KVT_CHECK(s[i].is_number() && w[i].is_number() && std::isfinite(s[i].get<double>()) && w[i].get<double>() >= 0,
              BAD_MANIFEST, "calibration entry " << i << " of part (" << layer << ", " << head << ") is not a number");
  KVT_CHECK(!pm.contains("calibration_sha256") || pm["calibration_sha256"].is_string(), BAD_MANIFEST,
            "calibration_sha256 of part (" << layer << ", " << head << ") is not a string");
}

void validate_squeeze(const ArtifactReader& r) {
  validate_part_list(r);
  validate_squeeze_params(r.manifest()["params"]);
  IndexedRows rows = IndexedRows::of(r);
  const int64_t d = r.source().geo.head_dim;
  size_t sections = 0;
  for (const auto& pm : r.manifest()["kind_data"]["parts"]) {
    const int64_t layer = int_member(pm, "layer", "part"), head = int_member(pm, "kv_head", "part");
    validate_calibration(pm, layer, head);
    KVT_CHECK(int_member(pm, "indexed_rows", "squeeze part") == rows.count(), PART_INVALID,
              "squeeze part (" << layer << ", " << head << ") does not index the " << rows.count()
                               << " rows of its coverage");
    if (rows.count() == 0) continue;
    sections += 7;
    ClusterSet f = ClusterSet::load(r, layer, head, d, "sq_fine");
    const int64_t C = f.clusters();
    uint64_t run = 0;
    for (int64_t c = 0; c < C; ++c) {
      run += f.sizes[c];
      KVT_CHECK(f.prefix[c] == run, PREFIX_SUM_MISMATCH,
                "fine cluster " << c << " of part (" << layer << ", " << head << ")");
    }
    KVT_CHECK(run == static_cast<uint64_t>(rows.count()) && f.members.size() == run, MEMBERS_NOT_PARTITION,
              "fine cluster sizes of part (" << layer << ", " << head << ") add up to " << run << ", not the "
                                             << rows.count() << " indexed rows");
    const SectionEntry* le = r.find("sq_labels", layer, head);
    KVT_CHECK(le && le->dtype == "u32" && le->shape == std::vector<int64_t>({rows.count()}), PART_INVALID,
              "part (" << layer << ", " << head << ") lacks sq_labels u32 [" << rows.count() << "]");
    auto lb = r.read_section(*le);
    std::vector<uint32_t> labels(lb.size() / 4);
    std::memcpy(labels.data(), lb.data(), lb.size());
    // Every key has exactly one label, and that label's member list holds it.
    std::vector<int64_t> count(static_cast<size_t>(C), 0);
    for (int64_t c = 0; c < C; ++c) {
      const uint32_t* m = f.members.data() + (f.prefix[c] - f.sizes[c]);
      for (uint32_t i = 0; i < f.sizes[c]; ++i) {
        KVT_CHECK(m[i] >= rows.begin() && m[i] < rows.end() && labels[m[i] - rows.begin()] == c, MEMBERS_NOT_PARTITION,
                  "row " << m[i] << " of part (" << layer << ", " << head << ") is listed in cluster " << c
                         << " but labelled otherwise");
        // Ascending within a cluster and one label per row: no row is listed twice, so the
        // rows.count() members are exactly the indexed rows.
        KVT_CHECK(i == 0 || m[i] > m[i - 1], MEMBERS_NOT_PARTITION,
                  "members of fine cluster " << c << " of part (" << layer << ", " << head
                                             << ") are not in ascending row order");
        ++count[c];
      }
    }
    for (uint32_t l : labels) KVT_CHECK(l < C, MEMBERS_NOT_PARTITION, "a label is not a fine cluster");
    for (float x : f.centroids) KVT_CHECK(std::isfinite(x), NON_FINITE, "a fine centroid is not finite");
    const SectionEntry* ce = r.find("sq_coarse_centroids", layer, head);
    const SectionEntry* pe = r.find("sq_parent", layer, head);
    KVT_CHECK(ce && pe && ce->dtype == "f32" && ce->shape.size() == 2 && ce->shape[1] == d && pe->dtype == "u32" &&
                  pe->shape == std::vector<int64_t>({C}),
              HIERARCHY_NOT_COVERING,
              "part (" << layer << ", " << head << ") lacks a coarse level with a parent for each of its " << C
                       << " fine centroids");
    auto pb = r.read_section(*pe);
    std::vector<uint32_t> parent(pb.size() / 4);
    std::memcpy(parent.data(), pb.data(), pb.size());
    std::vector<char> used(static_cast<size_t>(ce->shape[0]), 0);
    for (uint32_t p : parent) {
      KVT_CHECK(p < ce->shape[0], HIERARCHY_NOT_COVERING, "a parent index is not a coarse group");
      used[p] = 1;
    }
    auto cb = r.read_section(*ce);
    for (size_t i = 0; i < cb.size(); i += 4) {
      float x;
      std::memcpy(&x, cb.data() + i, 4);
      KVT_CHECK(std::isfinite(x), NON_FINITE, "a coarse centroid is not finite");
    }
  }
  KVT_CHECK(sections == r.sections().size(), PART_INVALID, "the artifact has sections that belong to no squeeze part");
  const json& kd = r.manifest()["kind_data"];
  KVT_CHECK(!kd.contains("thresholds") || kd["thresholds"].is_object(), BAD_MANIFEST,
            "kind_data.thresholds is not an object");
  if (kd["part_range"][0] == 0 && kd["part_range"][1] == kd["parts_total"]) {
    json expect = kinds::squeeze_kind().finalize(r.manifest()["params"], kd["parts"]);
    KVT_CHECK(kd.contains("thresholds") && kd["thresholds"] == expect["thresholds"] &&
                  kd.value("calibration_set_sha256", std::string()) == expect["calibration_set_sha256"],
              THRESHOLDS_MISMATCH, "the recorded thresholds are not the quantiles of the recorded calibration scores");
  }
}

// Weighted nearest-rank quantiles of per-cluster calibration scores over every part: the threshold
// of quantile q is the smallest score whose cumulative key count reaches q x all keys.
json finalize_squeeze(const json& params, const json& parts) {
  std::vector<std::pair<double, double>> sw;
  for (const auto& pm : parts) {
    if (!pm.contains("calibration_scores")) continue;
    const json& s = pm["calibration_scores"];
    const json& w = pm["calibration_weights"];
    for (size_t i = 0; i < s.size(); ++i) sw.emplace_back(s[i].get<double>(), w[i].get<double>());
  }
  std::sort(sw.begin(), sw.end());
  double total = 0;
  for (auto& x : sw) total += x.second;
  json th = json::object();
  for (const auto& qj : params["quantiles"]) {
    double q = qj.get<double>(), cum = 0, t = sw.empty() ? 0.0 : sw.back().first;
    for (auto& [s, w] : sw) {
      cum += w;
      if (cum >= q * total) {
        t = s;
        break;
      }
    }
    th[quantile_key(q)] = t;
  }
  // The calibration set's digest: every part's digest, in part order.
  Sha256 cal;
  for (const auto& pm : parts)
    if (pm.contains("calibration_sha256")) cal.update(pm["calibration_sha256"].get<std::string>());
  return {{"thresholds", th}, {"calibration_set_sha256", to_hex(cal.finish())}};
}

}  // namespace

KindSpec kinds::squeeze_kind() {
  KindSpec k = make_kind_spec<SqueezeSelector>(
      "squeeze", "SqueezedAttention fine/coarse centroid hierarchy with calibrated thresholds",
      SelectionMode::quantile_threshold, validate_squeeze);
  k.query_options = {
      {"quantile", "calibrated quantile whose threshold to apply (default: the first calibrated)", ""},
      {"flat", "score every fine centroid (the reference's lookup) instead of the two-level pass", "false"}};
  k.parse_query = [](const ArtifactReader& r, const QuerySettings& s) -> std::unique_ptr<QueryParams> {
    const KindSpec& self = *find_kind("squeeze");
    check_query_settings(self, s);
    auto p = std::make_unique<SqueezeParams>();
    const std::string q = setting_or_default(self, s, "quantile");
    p->quantile = q.empty() ? r.manifest()["params"]["quantiles"][0].get<double>() : parse_double_option("quantile", q);
    p->flat = parse_bool_option("flat", setting_or_default(self, s, "flat"));
    return p;
  };
  // Eval: every calibrated quantile, each hierarchical and flat.
  k.default_sweep = [](const ArtifactReader& r, const std::string& option) {
    std::vector<std::string> v;
    if (option == "flat") return std::vector<std::string>{"false", "true"};
    for (const auto& q : r.manifest()["params"]["quantiles"]) v.push_back(q.dump());
    return v;
  };
  k.finalize = finalize_squeeze;
  return k;
}

}  // namespace kvtool
