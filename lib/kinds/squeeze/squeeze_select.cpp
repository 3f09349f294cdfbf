// kind "squeeze", runtime half: structural validation (including the recomputed thresholds), the
// two-level (or flat) threshold selector and its device path, the thresholds finalized from every
// part, and the kind's registration (formats/kinds-v1.md, "squeeze").
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>

#include "common/cluster_set.h"
#include "common/device_batch.h"
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

// The selector's query path takes a `dots` callable, void(bool coarse, const int64_t* rows,
// int64_t count, double scale, double* out): scaled dot products z = q·c / sqrt(d) of centroids of
// one level (coarse or fine), all of them (rows == nullptr) or the listed ones, computed on the
// host or by the device tier. A template parameter rather than a std::function, which may allocate.

// squeeze's query options: which calibrated quantile's threshold to apply, the flat lookup (every
// fine centroid scored, as the reference does) instead of the two-level pass, and the two-level
// pass's coarse pruning rule: "bound" (prunes only groups the bound proves empty of passing
// children) or "factor" (params.coarse_factor x tau on the coarse score).
// With a rank budget (option rank_budget, apart from the budget kinds' "budget" so that one set of
// options for several kinds keeps squeeze on its threshold), the quantile's threshold gives way to a rank: the fine
// clusters of highest score, whole, best first, the last one cut, until the budget's rows (as clusterkv takes its
// clusters), so that squeeze compares with the budget kinds at the same row count; the quantile and the pass are then
// unused and left out of the setting.
struct SqueezeParams : QueryParams {
  double quantile = 0.5;
  std::string key;  // quantile_key(quantile), the thresholds' key: made once, not per query
  bool flat = false;
  bool factor_rule = false;
  std::optional<Budget> budget;
  json setting() const override {
    if (budget) return {{"budget", budget->str()}, {"budget_is_fraction", budget->fraction}, {"mode", "budget"}};
    json j = {{"quantile", quantile}, {"mode", flat ? "flat" : "hierarchical"}};
    if (!flat) j["coarse_rule"] = factor_rule ? "factor" : "bound";
    return j;
  }
  json receipt(int64_t indexed) const override {
    json j = setting();
    if (budget) j["budget_rows"] = budget->rows(indexed);
    return j;
  }
  std::string label() const override {
    if (budget) return budget->str();
    return "q=" + json(quantile).dump() + (flat ? "/flat" : factor_rule ? "/hier-factor" : "/hier");
  }
};

// What bounds the children of each coarse group g (formats/kinds-v1.md §6.6, rule "bound"), from
// the stored centroids in f64: radius = max over non-empty children of |fine_c - coarse_g|, mean_offset =
// |sum_c N_c fine_c / S_g - coarse_g| and norm = |coarse_g|. Empty groups hold zeros.
struct GroupBounds {
  std::vector<double> radius, mean_offset, norm;
};

GroupBounds group_bounds(const std::vector<float>& fine, const std::vector<uint32_t>& sizes,
                         const std::vector<float>& coarse, const std::vector<std::vector<int64_t>>& children,
                         int64_t d) {
  const size_t G = children.size();
  GroupBounds b{std::vector<double>(G, 0.0), std::vector<double>(G, 0.0), std::vector<double>(G, 0.0)};
  std::vector<double> mean(static_cast<size_t>(d));
  for (size_t g = 0; g < G; ++g) {
    const float* cg = coarse.data() + g * d;
    double total = 0, norm = 0;
    std::fill(mean.begin(), mean.end(), 0.0);
    for (int64_t j : children[g]) {
      const float* cj = fine.data() + j * d;
      double dist = 0;
      for (int64_t t = 0; t < d; ++t) {
        const double e = static_cast<double>(cj[t]) - cg[t];
        dist += e * e;
        mean[t] += static_cast<double>(sizes[j]) * cj[t];
      }
      if (sizes[j] > 0) b.radius[g] = std::max(b.radius[g], std::sqrt(dist));  // empty clusters hold no rows
      total += sizes[j];
    }
    double off = 0;
    for (int64_t t = 0; t < d; ++t) {
      norm += static_cast<double>(cg[t]) * cg[t];
      if (total > 0) off += (mean[t] / total - cg[t]) * (mean[t] / total - cg[t]);
    }
    b.mean_offset[g] = std::sqrt(off);
    b.norm[g] = std::sqrt(norm);
  }
  return b;
}

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
    bounds_ = group_bounds(fine_.centroids, fine_.sizes, coarse_, children_, d_);
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
  void reserve_device_batches(const DevicePart& dp, int64_t max_queries) const override {
    if (n_ > 0 && dp.find("sq_fine_centroids") && dp.find("sq_coarse_centroids"))
      dp.dev->reserve_score_batches({max_queries, d_, std::max<int64_t>(fine_.clusters(), coarse_groups()), 0});
  }
  // Every query's fine (and, two-level, coarse) centroid scores in device batches, then each query's
  // pass on the host reading the scores it asks for from them: the same values as select_device's
  // per-call products, so the same selection. The device scores every fine centroid, the pruned
  // ones too: one batch instead of a round trip per query and level.
  void select_device_batch(const DevicePart& dp, const DeviceQueries& qs, GroupAnswers& answers) const override {
    const DeviceSection* f = dp.find("sq_fine_centroids");
    const DeviceSection* c = dp.find("sq_coarse_centroids");
    if (n_ == 0 || !f || !c) return;
    const bool flat = params_of<SqueezeParams>(qs.request(0)).flat;
    const int64_t C = fine_.clusters(), G = flat ? 0 : coarse_groups();
    const int64_t capacity = dp.dev->score_batch_capacity({1, d_, std::max(C, G), 0});
    if (capacity <= 0) return;
    auto& s = DeviceBatchScratch<double>::of_this_thread();
    const float* q = qs.contiguous(s.q);
    double* zf = s.out_for(capacity * (C + G));
    double* zg = zf + capacity * C;
    const double inv = 1.0 / std::sqrt(static_cast<double>(d_));
    auto score = [&](int64_t first, int64_t count) {
      const float* qb = q + first * qs.d;
      return dp.dev->dot_scores_f64_batch(static_cast<const float*>(f->ptr), C, d_, inv, qb, count, qs.stream, zf) &&
             (flat ||
              dp.dev->dot_scores_f64_batch(static_cast<const float*>(c->ptr), G, d_, inv, qb, count, qs.stream, zg));
    };
    run_device_batches(qs, capacity, answers, s, score, [&](int64_t j, int64_t i, Selection& sel) {
      select_with(qs.request(j), sel, [&](bool coarse, const int64_t* rows, int64_t count, double scale, double* z) {
        KVT_CHECK(scale == inv, INTERNAL, "squeeze's device batch holds scores scaled by 1/sqrt(d) only");
        const double* all = coarse ? zg + i * G : zf + i * C;
        for (int64_t r = 0; r < count; ++r) z[r] = all[rows ? rows[r] : r];
      });
    });
  }
  template <typename Dots>
  void select_with(const SelectRequest& req, Selection& out, const Dots& dots) const {
    const SqueezeParams& p = params_of<SqueezeParams>(req);
    const auto it = thresholds_.find(p.key);
    KVT_CHECK(it != thresholds_.end(), USAGE,
              "quantile " << p.key << " was not calibrated; the artifact has " << thresholds_.dump());
    const double tau = *it;
    if (p.budget) out.budget_rows = p.budget->rows(n_);
    if (n_ == 0) {
      out.centroids_scored = 0;
      return;
    }
    const int64_t C = fine_.clusters();
    std::vector<double>& score = scratch().score;
    if (p.budget) {
      score.resize(static_cast<size_t>(C));
      dots(false, nullptr, C, 1.0 / std::sqrt(static_cast<double>(d_)), score.data());
      std::vector<float>& z = scratch().zf32;
      z.assign(score.begin(), score.end());
      fine_.take_best(z.data(), out.budget_rows, scratch().order, out);
      out.centroids_scored = C;
      return;
    }
    score.assign(static_cast<size_t>(C), -1.0);
    if (p.flat) {
      dots(false, nullptr, C, 1.0 / std::sqrt(static_cast<double>(d_)), score.data());
      normalize_scores(fine_.sizes, score);
      out.centroids_scored = C;
    } else if (p.factor_rule) {
      out.centroids_scored = factor_pass(tau, dots, score);
    } else {
      out.centroids_scored = bound_pass(req.q, tau, dots, score);
    }
    pick(score, tau, out);
  }

  int64_t coarse_groups() const { return static_cast<int64_t>(children_.size()); }
  json describe() const override { return {{"fine_clusters", fine_.clusters()}, {"coarse_groups", coarse_groups()}}; }
  bool cluster_view(ClusterView& out) const override {
    if (n_ == 0) return false;
    out = fine_.view();
    return true;
  }
  int64_t resident_bytes() const override {
    int64_t b = fine_.resident_bytes() + vector_bytes(coarse_) + vector_bytes(parent_) + vector_bytes(group_size_) +
                vector_bytes(children_) + vector_bytes(bounds_.radius) + vector_bytes(bounds_.mean_offset) +
                vector_bytes(bounds_.norm);
    for (const auto& c : children_) b += vector_bytes(c);
    return b;
  }

 private:
  // Relative slack of rule "bound" against f64 rounding (§6.6): the dot products, norms and sums it
  // compares err by far less (d·2^-53 relative for any head dim below 2^20).
  static constexpr double kBoundSlack = 1e-9;

  // Rule "factor" (§6.6): groups scored like clusters of their total size; a group survives when
  // its per-key score reaches coarse_factor x tau. Pruned groups enter the denominator through their
  // coarse centroid. Returns the centroids scored.
  template <typename Dots>
  int64_t factor_pass(double tau, const Dots& dots, std::vector<double>& score) const {
    const int64_t C = fine_.clusters(), G = static_cast<int64_t>(children_.size());
    const double inv = 1.0 / std::sqrt(static_cast<double>(d_));
    Scratch& sc = scratch();
    std::vector<double>& zg = sc.zg;
    zg.resize(static_cast<size_t>(G));
    double mx = -INFINITY;
    dots(true, nullptr, G, inv, zg.data());
    for (int64_t g = 0; g < G; ++g) mx = std::max(mx, zg[g]);
    double den_c = 0;
    for (int64_t g = 0; g < G; ++g) den_c += group_size_[g] * std::exp(zg[g] - mx);
    std::vector<char>& keep = sc.flag;
    keep.assign(static_cast<size_t>(G), 0);
    for (int64_t g = 0; g < G; ++g) keep[g] = std::exp(zg[g] - mx) / den_c >= coarse_factor_ * tau;
    std::vector<double>& zf = sc.zf;
    zf.assign(static_cast<size_t>(C), 0.0);
    int64_t scored = G;
    for (int64_t g = 0; g < G; ++g) {
      if (!keep[g]) continue;
      const auto& ch = children_[g];
      std::vector<double>& z = sc.z;
      z.resize(ch.size());
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
    return scored;
  }

  // Rule "bound" (§6.6): every child of g scores z <= up_g = zg_g + |q| r_g / sqrt(d), and by
  // Jensen the children's sum of N_c exp(z_c) is at least S_g exp(lo_g), lo_g = zg_g - |q| s_g /
  // sqrt(d). Groups are visited by up_g descending; the denominator's lower bound counts visited
  // children exactly and the others by lo_g. Visiting stops at the first group whose up_g cannot
  // reach tau against that lower bound: no later child can pass flat's threshold either. The final
  // scores divide by a lower bound of flat's denominator, so every row flat keeps is kept.
  template <typename Dots>
  int64_t bound_pass(const float* q, double tau, const Dots& dots, std::vector<double>& score) const {
    const int64_t G = static_cast<int64_t>(children_.size());
    const double inv = 1.0 / std::sqrt(static_cast<double>(d_));
    Scratch& sc = scratch();
    std::vector<double>&zg = sc.zg, &up = sc.up, &lo = sc.lo;
    for (auto* v : {&zg, &up, &lo}) v->resize(static_cast<size_t>(G));
    dots(true, nullptr, G, inv, zg.data());
    double qn = 0, m = -INFINITY;
    for (int64_t t = 0; t < d_; ++t) qn += static_cast<double>(q[t]) * q[t];
    qn = std::sqrt(qn);
    std::vector<int64_t>& order = sc.order;
    order.clear();
    for (int64_t g = 0; g < G; ++g) {
      if (group_size_[g] == 0) continue;
      const double r = bounds_.radius[g], s = bounds_.mean_offset[g], c = bounds_.norm[g];
      up[g] = zg[g] + inv * qn * (r + kBoundSlack * (c + r));
      lo[g] = zg[g] - inv * qn * (s + kBoundSlack * (c + s));
      m = std::max(m, up[g]);
      order.push_back(g);
    }
    // By up descending, ties by lower group: a stable sort's order (for the finite bounds of a
    // finite query), without its temporary buffer.
    std::sort(order.begin(), order.end(),
              [&](int64_t a, int64_t b) { return up[a] > up[b] || (up[a] == up[b] && a < b); });
    const size_t K = order.size();
    std::vector<double>& rest = sc.rest;  // rest[k]: lower bounds of the groups order[k..]
    rest.assign(K + 1, 0.0);
    for (size_t k = K; k-- > 0;) rest[k] = rest[k + 1] + group_size_[order[k]] * std::exp(lo[order[k]] - m);
    std::vector<double>& zf = sc.zf;
    zf.assign(static_cast<size_t>(fine_.clusters()), 0.0);
    std::vector<char>& visited = sc.flag;
    visited.assign(static_cast<size_t>(G), 0);
    double known = 0;
    int64_t scored = G;
    for (size_t k = 0; k < K; ++k) {
      const int64_t g = order[k];
      // Below the smallest normal double the sums' rounding is no longer relative: never stop there.
      const double bar = tau * (known + rest[k]) * (1 - kBoundSlack);
      if (bar >= DBL_MIN && std::exp(up[g] - m) < bar) break;
      const auto& ch = children_[g];
      std::vector<double>& z = sc.z;
      z.resize(ch.size());
      dots(false, ch.data(), static_cast<int64_t>(ch.size()), inv, z.data());
      for (size_t i = 0; i < ch.size(); ++i) {
        zf[ch[i]] = z[i];
        known += fine_.sizes[ch[i]] * std::exp(z[i] - m);
      }
      visited[g] = 1;
      scored += static_cast<int64_t>(ch.size());
    }
    bound_scores(zf, lo, visited, score);
    return scored;
  }

  // The final scores of the visited children: exp(zf_c - m) over the denominator's lower bound
  // (visited children exact, other non-empty groups S_g exp(lo_g)), with m their largest exponent,
  // so that no term overflows and the denominator is at least 1. Shrunk by kBoundSlack against
  // rounding.
  void bound_scores(const std::vector<double>& zf, const std::vector<double>& lo, const std::vector<char>& visited,
                    std::vector<double>& score) const {
    const int64_t G = static_cast<int64_t>(children_.size());
    double m = -INFINITY, den = 0;
    for (int64_t g = 0; g < G; ++g) {
      if (visited[g])
        for (int64_t j : children_[g]) m = std::max(m, zf[j]);
      else if (group_size_[g] > 0)
        m = std::max(m, lo[g]);
    }
    for (int64_t g = 0; g < G; ++g) {
      if (visited[g])
        for (int64_t j : children_[g]) den += fine_.sizes[j] * std::exp(zf[j] - m);
      else if (group_size_[g] > 0)
        den += group_size_[g] * std::exp(lo[g] - m);
    }
    den *= 1 - kBoundSlack;
    for (int64_t g = 0; g < G; ++g)
      if (visited[g])
        for (int64_t j : children_[g]) score[j] = std::exp(zf[j] - m) / den;
  }

  // Members of every cluster with score >= tau, ascending ids, each with its cluster's score.
  void pick(const std::vector<double>& score, double tau, Selection& out) const {
    const int64_t C = fine_.clusters();
    std::vector<std::pair<int64_t, float>>& picked = scratch().picked;
    picked.clear();
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

  // Per-thread buffers reused across queries (no allocation once they reached a part's sizes).
  struct Scratch {
    std::vector<double> score, zg, up, lo, rest, zf, z;
    std::vector<float> zf32;  // budget mode: the fine scores ranked
    std::vector<int64_t> order;
    std::vector<char> flag;  // kept (rule factor) or visited (rule bound) groups
    std::vector<std::pair<int64_t, float>> picked;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  IndexedRows rows_;
  int64_t n_ = 0, d_ = 0;
  json thresholds_;
  double coarse_factor_ = 0.5;
  ClusterSet fine_;
  std::vector<float> coarse_;
  std::vector<uint32_t> parent_;
  std::vector<std::vector<int64_t>> children_;
  std::vector<uint64_t> group_size_;
  GroupBounds bounds_;
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
      {"flat", "score every fine centroid (the reference's lookup) instead of the two-level pass", "false"},
      {"coarse_rule",
       "two-level pass: bound (prune a coarse group only when a bound proves no child reaches the threshold; "
       "keeps every row flat keeps) or factor (keep groups scoring >= params.coarse_factor x the threshold)",
       "bound"},
      {"rank_budget",
       "rank instead of threshold: the fine clusters of highest score, whole, best first, until this many rows (a "
       "fraction of the indexed rows such as 0.1, or a count); unset: the quantile's threshold",
       ""}};
  k.parse_query = [](const ArtifactReader& r, const QuerySettings& s) -> std::unique_ptr<QueryParams> {
    const KindSpec& self = *find_kind("squeeze");
    check_query_settings(self, s);
    auto p = std::make_unique<SqueezeParams>();
    const std::string q = setting_or_default(self, s, "quantile");
    p->quantile = q.empty() ? r.manifest()["params"]["quantiles"][0].get<double>() : parse_double_option("quantile", q);
    p->key = quantile_key(p->quantile);
    const json& kd = r.manifest()["kind_data"];  // an unmerged shard has none: its parts refuse queries
    KVT_CHECK(!kd.contains("thresholds") || !kd["thresholds"].is_object() ||
                  kd["thresholds"].contains(quantile_key(p->quantile)),
              USAGE,
              "quantile " << quantile_key(p->quantile) << " was not calibrated; the artifact has "
                          << kd["thresholds"].dump());
    p->flat = parse_bool_option("flat", setting_or_default(self, s, "flat"));
    const std::string rule = setting_or_default(self, s, "coarse_rule");
    KVT_CHECK(rule == "bound" || rule == "factor", USAGE, "coarse_rule must be bound or factor (got '" << rule << "')");
    p->factor_rule = rule == "factor";
    if (const std::string b = setting_or_default(self, s, "rank_budget"); !b.empty()) p->budget = Budget::parse(b);
    return p;
  };
  // Eval: every calibrated quantile, each hierarchical (rule bound) and flat.
  k.default_sweep = [](const ArtifactReader& r, const std::string& option) {
    std::vector<std::string> v;
    if (option == "flat") return std::vector<std::string>{"false", "true"};
    if (option == "quantile")
      for (const auto& q : r.manifest()["params"]["quantiles"]) v.push_back(q.dump());
    return v;  // coarse_rule: its default, "bound"
  };
  k.finalize = finalize_squeeze;
  return k;
}

}  // namespace kvtool
