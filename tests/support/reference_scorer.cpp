#include "reference_scorer.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <sstream>

#include "kvtool/error.h"
#include "kvtool/half.h"

namespace kvtool::test {

namespace {

// Section elements widened to double / int64 (the decoded arrays of formats/kinds-v1.md).
std::vector<double> f32_section(const ArtifactReader& r, const char* name, int64_t layer, int64_t kvh) {
  const SectionEntry* s = r.find(name, layer, kvh);
  KVT_CHECK(s && (s->dtype == "f32" || s->dtype == "f16" || s->dtype == "i8"), INTERNAL,
            "reference scorer: no f32/f16/i8 section " << name);
  std::vector<uint8_t> b = r.read_section(*s);
  if (s->dtype == "i8") {  // i8 rows: code x 2^(the row's exponent), from the exponent section
    const SectionEntry* x = r.find(std::string(name) + "_exp", layer, kvh);
    KVT_CHECK(x && x->dtype == "i8", INTERNAL, "reference scorer: no exponents for " << name);
    const std::vector<uint8_t> e = r.read_section(*x);
    KVT_CHECK(e.empty() ? b.empty() : b.size() % e.size() == 0, INTERNAL,
              "reference scorer: exponents do not fit " << name);
    const size_t cols = e.empty() ? 0 : b.size() / e.size();
    std::vector<double> out(b.size());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = std::ldexp(static_cast<double>(static_cast<int8_t>(b[i])), static_cast<int8_t>(e[i / cols]));
    return out;
  }
  if (s->dtype == "f16") {  // f16 centroids or codebooks: their exact f32 values
    const std::vector<float> f = widen_f16_bytes(b);
    return std::vector<double>(f.begin(), f.end());
  }
  std::vector<double> out(b.size() / 4);
  for (size_t i = 0; i < out.size(); ++i) {
    float x;
    std::memcpy(&x, b.data() + 4 * i, 4);
    out[i] = x;
  }
  return out;
}

std::vector<int64_t> int_section(const ArtifactReader& r, const char* name, int64_t layer, int64_t kvh) {
  const SectionEntry* s = r.find(name, layer, kvh);
  KVT_CHECK(s, INTERNAL, "reference scorer: no section " << name);
  std::vector<uint8_t> b = r.read_section(*s);
  const size_t w = s->dtype == "u8" ? 1 : s->dtype == "u16" ? 2 : 4;
  std::vector<int64_t> out(b.size() / w);
  for (size_t i = 0; i < out.size(); ++i) {
    uint64_t x = 0;
    for (size_t k = 0; k < w; ++k) x |= static_cast<uint64_t>(b[i * w + k]) << (8 * k);  // little-endian
    out[i] = static_cast<int64_t>(x);
  }
  return out;
}

struct Part {
  const ArtifactReader* r;
  int64_t layer, kvh, d, begin, end;
  json meta;
  int64_t n() const { return end - begin; }
};

Part part_of(const ArtifactReader& r, int64_t layer, int64_t q_head) {
  const json& m = r.manifest();
  const int64_t E = r.source().coverage_end;
  const int64_t sink = m["params"]["sink"].get<int64_t>(), local = m["params"]["local"].get<int64_t>();
  Part p{&r, layer, r.source().id.q_to_kv_head.at(static_cast<size_t>(q_head)), r.source().geo.head_dim, 0, 0, {}};
  p.begin = std::min(sink, E);
  p.end = std::max(p.begin, E - local);
  const int64_t first = m["params"]["layers"][0].get<int64_t>();
  const int64_t idx =
      (layer - first) * r.source().geo.kv_heads + p.kvh - m["kind_data"]["part_range"][0].get<int64_t>();
  p.meta = m["kind_data"]["parts"].at(static_cast<size_t>(idx));
  return p;
}

int64_t budget_rows(const RefQuery& rq, int64_t n) {
  if (rq.budget_rows >= 0) return std::min(rq.budget_rows, n);
  return std::min(n, static_cast<int64_t>(std::llround(rq.budget_fraction * static_cast<double>(n))));
}

void dense_answer(const Part& p, RefAnswer& a) {
  for (int64_t i = p.begin; i < p.end; ++i) {
    a.ids.push_back(i);
    a.scores.push_back(0);
  }
  a.row_score.assign(static_cast<size_t>(p.n()), 0.0);
}

// Budget kinds: the `k` rows of best row_score (ties: lower id, or `rank_key` when given), and the
// rows within 2·tol of the k-th score marked ambiguous.
void mark_boundary(RefAnswer& a, int64_t k) {
  a.ambiguous.assign(a.row_score.size(), 0);
  if (k <= 0 || a.ids.empty()) return;
  const double kth = a.scores[static_cast<size_t>(k - 1)];
  for (size_t i = 0; i < a.row_score.size(); ++i)
    if (std::fabs(a.row_score[i] - kth) <= 2 * a.tol) a.ambiguous[i] = 1;
}

// §3.5: lut and scores in double; best min(budget, n) rows, equal scores by lower row.
void pq_answer(const Part& p, const float* q, const RefQuery& rq, RefAnswer& a) {
  const int64_t m = p.r->manifest()["params"]["subspaces"].get<int64_t>();
  const int64_t k = int64_t{1} << p.r->manifest()["params"]["bits"].get<int64_t>();
  const int64_t dsub = p.d / m, n = p.n(), want = budget_rows(rq, n);
  std::vector<double> cent = f32_section(*p.r, "pq_centroids", p.layer, p.kvh);
  std::vector<int64_t> codes = int_section(*p.r, "pq_codes", p.layer, p.kvh);
  std::vector<double> lut(static_cast<size_t>(m * k));
  double scale = 0;  // sum over subspaces of the largest |term| sum: the size of one score's rounding
  for (int64_t j = 0; j < m; ++j) {
    double big = 0;
    for (int64_t c = 0; c < k; ++c) {
      double s = 0, abs_s = 0;
      for (int64_t t = 0; t < dsub; ++t) {
        const double x = q[j * dsub + t] * cent[static_cast<size_t>((j * k + c) * dsub + t)];
        s += x;
        abs_s += std::fabs(x);
      }
      lut[static_cast<size_t>(j * k + c)] = s;
      big = std::max(big, abs_s);
    }
    scale += big;
  }
  a.tol = 1e-5 * scale;
  a.row_score.assign(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      a.row_score[static_cast<size_t>(i)] += lut[static_cast<size_t>(j * k + codes[static_cast<size_t>(i * m + j)])];
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    return a.row_score[static_cast<size_t>(x)] > a.row_score[static_cast<size_t>(y)];
  });
  for (int64_t i = 0; i < want; ++i) {
    a.ids.push_back(p.begin + order[static_cast<size_t>(i)]);
    a.scores.push_back(a.row_score[static_cast<size_t>(order[static_cast<size_t>(i)])]);
  }
  mark_boundary(a, want);
}

// Whole clusters by score `s` (ties: lower index; §4.5, and §6.6 with a budget), each cluster's
// members in stored order, the last cluster cut at `want` rows.
void take_clusters(const Part& p, const std::vector<double>& s, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& members, int64_t want, RefAnswer& a) {
  const int64_t C = static_cast<int64_t>(sizes.size());
  a.row_score.assign(static_cast<size_t>(p.n()), 0.0);
  std::vector<int64_t> start(static_cast<size_t>(C) + 1, 0);
  for (int64_t c = 0; c < C; ++c) {
    start[static_cast<size_t>(c) + 1] = start[static_cast<size_t>(c)] + sizes[static_cast<size_t>(c)];
    for (int64_t i = start[static_cast<size_t>(c)]; i < start[static_cast<size_t>(c) + 1]; ++i)
      a.row_score[static_cast<size_t>(members[static_cast<size_t>(i)] - p.begin)] = s[static_cast<size_t>(c)];
  }
  std::vector<int64_t> order(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t x, int64_t y) { return s[static_cast<size_t>(x)] > s[static_cast<size_t>(y)]; });
  int64_t taken = 0;
  for (int64_t c : order) {
    if (taken >= want) break;
    const int64_t take = std::min(sizes[static_cast<size_t>(c)], want - taken);
    for (int64_t i = 0; i < take; ++i) {
      a.ids.push_back(members[static_cast<size_t>(start[static_cast<size_t>(c)] + i)]);
      a.scores.push_back(s[static_cast<size_t>(c)]);
    }
    taken += take;
  }
  a.ranked = true;
  mark_boundary(a, static_cast<int64_t>(a.ids.size()));
}

// §4.5: cluster scores in double; clusters by score (ties: lower index), members ascending.
void clusterkv_answer(const Part& p, const float* q, const RefQuery& rq, RefAnswer& a) {
  std::vector<double> cent = f32_section(*p.r, "ckv_centroids", p.layer, p.kvh);
  std::vector<int64_t> sizes = int_section(*p.r, "ckv_sizes", p.layer, p.kvh);
  std::vector<int64_t> members = int_section(*p.r, "ckv_members", p.layer, p.kvh);
  const int64_t C = static_cast<int64_t>(sizes.size());
  std::vector<double> s(static_cast<size_t>(C));
  double scale = 0;
  for (int64_t c = 0; c < C; ++c) {
    double abs_s = 0;
    for (int64_t t = 0; t < p.d; ++t) {
      const double x = q[t] * cent[static_cast<size_t>(c * p.d + t)];
      s[static_cast<size_t>(c)] += x;
      abs_s += std::fabs(x);
    }
    scale = std::max(scale, abs_s);
  }
  a.tol = 1e-5 * scale;
  take_clusters(p, s, sizes, members, budget_rows(rq, p.n()), a);
}

// §5.5 inclusion probability, in double.
double inclusion(const Part& p, const float* q, const KeyRows& keys, const std::vector<double>& mu, int64_t row,
                 int64_t K, int64_t T, int64_t c) {
  double dot = 0, qq = 0, kk = 0;
  for (int64_t j = 0; j < p.d; ++j) {
    const double kc = keys.row(row)[j] - mu[static_cast<size_t>(j)];
    dot += q[j] * kc;
    qq += static_cast<double>(q[j]) * q[j];
    kk += kc * kc;
  }
  const double cosv = qq > 0 && kk > 0 ? dot / (std::sqrt(qq) * std::sqrt(kk)) : 0.0;
  const double P = std::pow(1 - std::acos(std::clamp(cosv, -1.0, 1.0)) / M_PI, static_cast<double>(K));
  if (P <= 0) return 0;
  if (P >= 1) return 1;
  if (c == 2) return 1 - std::pow(1 - P, static_cast<double>(T - 1)) * (1 + static_cast<double>(T - 1) * P);
  double below = 0;  // P(fewer than c of T tables collide), binomial terms
  for (int64_t j = 0; j < c; ++j) {
    double log_choose = std::lgamma(T + 1.0) - std::lgamma(j + 1.0) - std::lgamma(static_cast<double>(T - j) + 1);
    below += std::exp(log_choose + static_cast<double>(j) * std::log(P) + static_cast<double>(T - j) * std::log1p(-P));
  }
  return std::max(0.0, 1 - below);
}

// §5.3: the id blocks of an lsh part. Layout "u16-segments" cuts the indexed rows [begin, end) at
// the multiples of 65,536 (a stored id is row - base); older artifacts hold one block of absolute ids.
struct LshSegment {
  int64_t index = 0, base = 0, rows = 0, first_id = 0;  // first_id: where the block's T·rows ids start
};
std::vector<LshSegment> lsh_segments(const ArtifactReader& r, int64_t begin, int64_t end) {
  if (!r.manifest()["params"].contains("id_layout")) return {{0, 0, end - begin, 0}};
  const int64_t T = r.manifest()["params"]["tables"].get<int64_t>();
  std::vector<LshSegment> out;
  for (int64_t lo = begin, at = 0; lo < end;) {
    const int64_t base = lo / 65536 * 65536, hi = std::min(end, base + 65536);
    out.push_back({static_cast<int64_t>(out.size()), base, hi - lo, at});
    at += T * (hi - lo);
    lo = hi;
  }
  return out;
}

// §5.5: the query's code per table in double; bits whose projection is within rounding of 0 are
// ambiguous, so a row's count lies in [lo, hi]; it is selected when lo >= c, ambiguous when
// lo < c <= hi. Bucket membership is read from the CSR tables (the spec's reader contract).
void lsh_answer(const Part& p, const float* q, const RefQuery& rq, const KeyRows* keys, RefAnswer& a) {
  const int64_t K = p.r->manifest()["params"]["bits"].get<int64_t>();
  const int64_t T = p.r->manifest()["params"]["tables"].get<int64_t>(), B = int64_t{1} << K, n = p.n();
  const int64_t c = rq.min_collisions;
  a.row_score.assign(static_cast<size_t>(n), 0.0);
  a.ambiguous.assign(static_cast<size_t>(n), 0);
  a.tol = static_cast<double>(T);  // applies to rows whose count is not exact only
  a.exact_score.assign(static_cast<size_t>(n), 1);
  if (n == 0) return;
  std::vector<double> w = f32_section(*p.r, "lsh_projections", p.layer, p.kvh);
  std::vector<double> mu = f32_section(*p.r, "lsh_mu", p.layer, p.kvh);
  std::vector<int64_t> off = int_section(*p.r, "lsh_offsets", p.layer, p.kvh);
  std::vector<int64_t> ids = int_section(*p.r, "lsh_ids", p.layer, p.kvh);
  std::vector<int64_t> lo(static_cast<size_t>(n), 0), hi(static_cast<size_t>(n), 0);
  const std::vector<LshSegment> segs = lsh_segments(*p.r, p.begin, p.begin + n);
  for (int64_t t = 0; t < T; ++t) {
    uint32_t code = 0, unsure = 0;
    for (int64_t b = 0; b < K; ++b) {
      double s = 0, abs_s = 0;
      for (int64_t j = 0; j < p.d; ++j) {
        const double x = q[j] * w[static_cast<size_t>(j * K * T + t * K + b)];
        s += x;
        abs_s += std::fabs(x);
      }
      if (s > 0) code |= 1u << b;
      if (std::fabs(s) <= 1e-5 * abs_s) unsure |= 1u << b;
    }
    for (int64_t x = 0; x < B; ++x) {
      const bool sure = static_cast<uint32_t>(x) == code && unsure == 0;
      if (!sure && (static_cast<uint32_t>(x) & ~unsure) != (code & ~unsure)) continue;
      const bool is_code = static_cast<uint32_t>(x) == code;
      for (const LshSegment& g : segs) {
        const size_t o = static_cast<size_t>((g.index * T + t) * (B + 1) + x);
        for (int64_t i = off[o]; i < off[o + 1]; ++i) {
          const size_t row =
              static_cast<size_t>(g.base + ids[static_cast<size_t>(g.first_id + t * g.rows + i)] - p.begin);
          lo[row] += sure;
          hi[row] += 1;
          a.row_score[row] += is_code;
        }
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const size_t u = static_cast<size_t>(i);
    a.exact_score[u] = lo[u] == hi[u];
    a.ambiguous[u] = lo[u] < c && c <= hi[u];
    if (a.row_score[u] < static_cast<double>(c)) continue;
    a.ids.push_back(p.begin + i);
    a.scores.push_back(a.row_score[u]);
    if (keys) a.inclusion.push_back(inclusion(p, q, *keys, mu, p.begin + i, K, T, c));
  }
}

// The tau lookup of §6.6: the key canonical JSON writes for the quantile (params.quantiles[0] by default).
double squeeze_tau(const json& m, const RefQuery& rq) {
  std::string key = rq.quantile;
  if (key.empty()) {
    const double q0 = m["params"]["quantiles"][0].get<double>();
    for (auto& [k, v] : m["kind_data"]["thresholds"].items())
      if (std::stod(k) == q0) key = k;
  }
  return m["kind_data"]["thresholds"].at(key).get<double>();
}

// §6.6 hierarchical steps 1-4: coarse scores, kept groups (`cut` = coarse_factor·tau), the fine
// scores of kept children, and the max and denominator over the mixed levels.
template <typename Z>
void squeeze_hierarchical(const Z& z, const std::vector<double>& fine, const std::vector<double>& coarse,
                          const std::vector<int64_t>& sizes, const std::vector<int64_t>& parent, double cut,
                          std::vector<double>& zf, std::vector<char>& kept, double& mx, double& den, RefAnswer& a) {
  const size_t C = sizes.size(), G = kept.size();
  std::vector<double> zg(G), S(G, 0.0);
  for (size_t c = 0; c < C; ++c) S[static_cast<size_t>(parent[c])] += static_cast<double>(sizes[c]);
  for (size_t g = 0; g < G; ++g) mx = std::max(mx, zg[g] = z(coarse, g));
  double dc = 0;
  for (size_t g = 0; g < G; ++g) dc += S[g] * std::exp(zg[g] - mx);
  a.centroids_scored = static_cast<int64_t>(G);
  for (size_t g = 0; g < G; ++g) {
    const double v = std::exp(zg[g] - mx) / dc;
    kept[g] = v >= cut;
    if (std::fabs(v - cut) <= 1e-9 * cut) a.all_ambiguous = true;
  }
  for (size_t c = 0; c < C; ++c)
    if (kept[static_cast<size_t>(parent[c])]) {
      mx = std::max(mx, zf[c] = z(fine, c));
      ++a.centroids_scored;
    }
  for (size_t g = 0; g < G; ++g) {
    if (kept[g]) {
      for (size_t c = 0; c < C; ++c)
        if (static_cast<size_t>(parent[c]) == g) den += static_cast<double>(sizes[c]) * std::exp(zf[c] - mx);
    } else {
      den += S[g] * std::exp(zg[g] - mx);
    }
  }
}

// §6.6 hierarchical rule "bound": the group bounds from the stored centroids, groups visited by
// up_g descending until one cannot reach tau against the denominator's lower bound, then the
// visited children scored against the final lower bound (max-shifted, times 1 - 1e-9). A stop
// test within 1e-9 of its threshold makes the whole part ambiguous.
void squeeze_bound(const std::vector<double>& zf_all, const std::vector<double>& fine,
                   const std::vector<double>& coarse, const std::vector<int64_t>& sizes,
                   const std::vector<int64_t>& parent, const float* q, int64_t d, double tau,
                   std::vector<double>& score, RefAnswer& a) {
  const size_t C = sizes.size(), G = coarse.size() / static_cast<size_t>(d);
  const double inv = 1 / std::sqrt(static_cast<double>(d)), slack = 1e-9;
  double qn = 0;
  for (int64_t t = 0; t < d; ++t) qn += static_cast<double>(q[t]) * q[t];
  qn = std::sqrt(qn);
  std::vector<double> S(G, 0.0), r(G, 0.0), up(G), lo(G);
  std::vector<std::vector<double>> wsum(G, std::vector<double>(static_cast<size_t>(d), 0.0));
  for (size_t c = 0; c < C; ++c) {
    const size_t g = static_cast<size_t>(parent[c]);
    double dist = 0;
    for (int64_t t = 0; t < d; ++t) {
      const double e = fine[c * d + t] - coarse[g * d + t];
      dist += e * e;
      wsum[g][t] += static_cast<double>(sizes[c]) * fine[c * d + t];
    }
    if (sizes[c] > 0) r[g] = std::max(r[g], std::sqrt(dist));
    S[g] += static_cast<double>(sizes[c]);
  }
  double m = -INFINITY;
  std::vector<size_t> order;
  for (size_t g = 0; g < G; ++g) {
    if (S[g] == 0) continue;
    double zg = 0, norm = 0, off = 0;
    for (int64_t t = 0; t < d; ++t) {
      zg += q[t] * coarse[g * d + t];
      norm += coarse[g * d + t] * coarse[g * d + t];
      off += (wsum[g][t] / S[g] - coarse[g * d + t]) * (wsum[g][t] / S[g] - coarse[g * d + t]);
    }
    zg *= inv;
    up[g] = zg + inv * qn * (r[g] + slack * (std::sqrt(norm) + r[g]));
    lo[g] = zg - inv * qn * (std::sqrt(off) + slack * (std::sqrt(norm) + std::sqrt(off)));
    m = std::max(m, up[g]);
    order.push_back(g);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return up[x] > up[y]; });
  std::vector<char> visited(G, 0);
  a.centroids_scored = static_cast<int64_t>(G);
  double known = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    double rest = 0;
    for (size_t i = k; i < order.size(); ++i) rest += S[order[i]] * std::exp(lo[order[i]] - m);
    const double lhs = std::exp(up[order[k]] - m), rhs = tau * (known + rest) * (1 - slack);
    if (std::fabs(lhs - rhs) <= 1e-9 * rhs) a.all_ambiguous = true;
    if (rhs >= DBL_MIN && lhs < rhs) break;
    visited[order[k]] = 1;
    for (size_t c = 0; c < C; ++c)
      if (static_cast<size_t>(parent[c]) == order[k]) {
        known += static_cast<double>(sizes[c]) * std::exp(zf_all[c] - m);
        ++a.centroids_scored;
      }
  }
  double m2 = -INFINITY, den = 0;
  for (size_t c = 0; c < C; ++c)
    if (visited[static_cast<size_t>(parent[c])]) m2 = std::max(m2, zf_all[c]);
  for (size_t g = 0; g < G; ++g)
    if (S[g] > 0 && !visited[g]) m2 = std::max(m2, lo[g]);
  for (size_t c = 0; c < C; ++c)
    if (visited[static_cast<size_t>(parent[c])]) den += static_cast<double>(sizes[c]) * std::exp(zf_all[c] - m2);
  for (size_t g = 0; g < G; ++g)
    if (S[g] > 0 && !visited[g]) den += S[g] * std::exp(lo[g] - m2);
  den *= 1 - slack;
  for (size_t c = 0; c < C; ++c)
    if (visited[static_cast<size_t>(parent[c])]) score[c] = std::exp(zf_all[c] - m2) / den;
}

// §6.6 with a budget: every fine centroid's z in double (the library rounds it to f32: the
// tolerance), whole clusters by z.
void squeeze_budget_answer(const Part& p, const float* q, const RefQuery& rq, RefAnswer& a) {
  std::vector<double> fine = f32_section(*p.r, "sq_fine_centroids", p.layer, p.kvh);
  std::vector<int64_t> sizes = int_section(*p.r, "sq_fine_sizes", p.layer, p.kvh);
  std::vector<int64_t> members = int_section(*p.r, "sq_fine_members", p.layer, p.kvh);
  const size_t C = sizes.size();
  std::vector<double> z(C, 0.0);
  double big = 0;
  for (size_t c = 0; c < C; ++c) {
    for (int64_t t = 0; t < p.d; ++t) z[c] += q[t] * fine[c * static_cast<size_t>(p.d) + static_cast<size_t>(t)];
    z[c] /= std::sqrt(static_cast<double>(p.d));
    big = std::max(big, std::fabs(z[c]));
  }
  a.rel_tol = 0;
  a.tol = 1e-6 * big;
  a.centroids_scored = static_cast<int64_t>(C);
  take_clusters(p, z, sizes, members, budget_rows(rq, p.n()), a);
}

// §6.6 in double. Scores are exp-normalized (relative tolerance); a cluster whose score is within
// 1e-9 of tau is ambiguous, and a coarse group on its pruning threshold makes the whole part so.
void squeeze_answer(const Part& p, const float* q, const RefQuery& rq, RefAnswer& a) {
  const json& m = p.r->manifest();
  a.rel_tol = 1e-6;
  a.row_score.assign(static_cast<size_t>(p.n()), -1.0);
  a.ambiguous.assign(static_cast<size_t>(p.n()), 0);
  const double tau = squeeze_tau(m, rq);
  if (p.n() == 0) return;
  if (rq.squeeze_budget) return squeeze_budget_answer(p, q, rq, a);
  const double cf = m["params"]["coarse_factor"].get<double>(), inv = 1 / std::sqrt(static_cast<double>(p.d));
  std::vector<double> fine = f32_section(*p.r, "sq_fine_centroids", p.layer, p.kvh);
  std::vector<double> coarse = f32_section(*p.r, "sq_coarse_centroids", p.layer, p.kvh);
  std::vector<int64_t> sizes = int_section(*p.r, "sq_fine_sizes", p.layer, p.kvh);
  std::vector<int64_t> members = int_section(*p.r, "sq_fine_members", p.layer, p.kvh);
  std::vector<int64_t> parent = int_section(*p.r, "sq_parent", p.layer, p.kvh);
  const size_t C = sizes.size(), G = coarse.size() / static_cast<size_t>(p.d);
  auto z = [&](const std::vector<double>& cent, size_t c) {
    double s = 0;
    for (int64_t t = 0; t < p.d; ++t) s += q[t] * cent[c * static_cast<size_t>(p.d) + static_cast<size_t>(t)];
    return s * inv;
  };
  std::vector<double> zf(C), score(C, -1.0);
  std::vector<char> kept(G, 1);
  double mx = -INFINITY, den = 0;
  if (rq.flat) {
    for (size_t c = 0; c < C; ++c) mx = std::max(mx, zf[c] = z(fine, c));
    for (size_t c = 0; c < C; ++c) den += static_cast<double>(sizes[c]) * std::exp(zf[c] - mx);
    a.centroids_scored = static_cast<int64_t>(C);
  } else if (rq.factor_rule) {
    squeeze_hierarchical(z, fine, coarse, sizes, parent, cf * tau, zf, kept, mx, den, a);
  } else {
    for (size_t c = 0; c < C; ++c) zf[c] = z(fine, c);
    squeeze_bound(zf, fine, coarse, sizes, parent, q, p.d, tau, score, a);
  }
  if (rq.flat || rq.factor_rule)
    for (size_t c = 0; c < C; ++c)
      if (rq.flat || kept[static_cast<size_t>(parent[c])]) score[c] = std::exp(zf[c] - mx) / den;
  int64_t at = 0;
  for (size_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < sizes[c]; ++i, ++at) {
      const size_t row = static_cast<size_t>(members[static_cast<size_t>(at)] - p.begin);
      a.row_score[row] = score[c];
      a.ambiguous[row] = a.all_ambiguous || std::fabs(score[c] - tau) <= 1e-9 * tau;
    }
  for (int64_t i = 0; i < p.n(); ++i)
    if (a.row_score[static_cast<size_t>(i)] >= tau) {
      a.ids.push_back(p.begin + i);
      a.scores.push_back(a.row_score[static_cast<size_t>(i)]);
    }
}

}  // namespace

RefAnswer reference_query(const ArtifactReader& r, int64_t layer, int64_t q_head, const float* q, int64_t position,
                          const RefQuery& rq, const KeyRows* keys) {
  RefAnswer a;
  a.kind = r.kind();
  const Part p = part_of(r, layer, q_head);
  a.begin = p.begin;
  a.end = p.end;
  for (int64_t i = 0; i < p.begin; ++i) a.always_included.push_back(i);
  for (int64_t i = p.end; i <= position; ++i) a.always_included.push_back(i);
  const bool dense = p.meta.contains("dense") && p.meta["dense"].get<bool>();
  if (dense) {
    dense_answer(p, a);
    a.ambiguous.assign(a.row_score.size(), 0);
  } else if (a.kind == "pq") {
    pq_answer(p, q, rq, a);
    a.ranked = true;
  } else if (a.kind == "clusterkv") {
    clusterkv_answer(p, q, rq, a);
  } else if (a.kind == "lsh") {
    lsh_answer(p, q, rq, keys, a);
  } else if (a.kind == "squeeze") {
    squeeze_answer(p, q, rq, a);
  } else {
    KVT_CHECK(false, INTERNAL, "reference scorer: kind " << a.kind << " has no queries");
  }
  if (a.ambiguous.empty()) a.ambiguous.assign(a.row_score.size(), 0);
  if (a.exact_score.empty()) a.exact_score.assign(a.row_score.size(), 0);
  return a;
}

std::string compare_with_reference(const CandidateReceipt& got, const RefAnswer& ref, int64_t* boundary) {
  std::ostringstream why;
  if (got.always_included != ref.always_included) why << "always-included rows differ; ";
  if (got.candidates.size() != got.scores.size()) why << "ids and scores differ in length; ";
  const bool budget_kind = ref.ranked;
  if (budget_kind && got.candidates.size() != ref.ids.size())
    why << got.candidates.size() << " rows, the budget gives " << ref.ids.size() << "; ";
  if (!ref.all_ambiguous && ref.centroids_scored >= 0 && got.centroids_scored != ref.centroids_scored)
    why << "centroids scored " << got.centroids_scored << ", expected " << ref.centroids_scored << "; ";
  std::set<int64_t> mine(got.candidates.begin(), got.candidates.end()), theirs(ref.ids.begin(), ref.ids.end());
  if (mine.size() != got.candidates.size()) why << "a row is returned twice; ";
  int64_t diffs = 0;
  auto check_diff = [&](int64_t id) {
    if (id < ref.begin || id >= ref.end) {
      why << "row " << id << " is not indexed; ";
      return;
    }
    if (!ref.ambiguous[static_cast<size_t>(id - ref.begin)]) why << "row " << id << " differs off the boundary; ";
    ++diffs;
  };
  for (int64_t id : mine)
    if (!theirs.count(id)) check_diff(id);
  for (int64_t id : theirs)
    if (!mine.count(id)) check_diff(id);
  for (size_t i = 0; i < got.candidates.size() && i < got.scores.size(); ++i) {
    const int64_t id = got.candidates[i];
    if (id < ref.begin || id >= ref.end) continue;
    const size_t u = static_cast<size_t>(id - ref.begin);
    const double want = ref.row_score[u], tol = ref.tol + ref.rel_tol * std::fabs(want);
    const bool exact = ref.exact_score[u];
    if (exact ? got.scores[i] != static_cast<float>(want) : std::fabs(got.scores[i] - want) > tol)
      why << "row " << id << " score " << got.scores[i] << ", expected " << want << "; ";
    if (i == 0) continue;
    if (budget_kind ? got.scores[i] > got.scores[i - 1] : id <= got.candidates[i - 1])
      why << "result order broken at " << i << "; ";
  }
  if (!ref.inclusion.empty()) {  // lsh with keys: compare the rows both selected
    if (got.inclusion.size() != got.candidates.size()) why << "inclusion probabilities missing; ";
    for (size_t i = 0, j = 0; i < got.candidates.size() && i < got.inclusion.size(); ++i) {
      while (j < ref.ids.size() && ref.ids[j] < got.candidates[i]) ++j;
      if (j == ref.ids.size() || ref.ids[j] != got.candidates[i]) continue;
      if (std::fabs(got.inclusion[i] - ref.inclusion[j]) > 1e-9 + 1e-6 * ref.inclusion[j])
        why << "row " << got.candidates[i] << " inclusion " << got.inclusion[i] << ", expected " << ref.inclusion[j]
            << "; ";
    }
  }
  if (boundary) *boundary += diffs;
  std::string s = why.str();
  return s.size() > 2000 ? s.substr(0, 2000) + "..." : s;
}

namespace {

// Dense attention probabilities of q over rows [0, E) (double).
std::vector<double> softmax_rows(const float* q, const float* K, int64_t E, int64_t d) {
  std::vector<double> p(static_cast<size_t>(E));
  double mx = -INFINITY, sum = 0;
  for (int64_t i = 0; i < E; ++i) {
    double z = 0;
    for (int64_t t = 0; t < d; ++t) z += static_cast<double>(q[t]) * K[i * d + t];
    mx = std::max(mx, p[static_cast<size_t>(i)] = z / std::sqrt(static_cast<double>(d)));
  }
  for (double& x : p) sum += (x = std::exp(x - mx));
  for (double& x : p) x /= sum;
  return p;
}

void add_masses(const std::vector<double>& p, const CandidateReceipt& rc, int64_t begin, int64_t end, QualityMeans& m) {
  const int64_t E = static_cast<int64_t>(p.size());
  std::vector<char> kept(p.size(), 0), spaced(p.size(), 0);
  for (int64_t id : rc.always_included)
    if (id < E) kept[static_cast<size_t>(id)] = spaced[static_cast<size_t>(id)] = 1;
  for (int64_t id : rc.candidates) kept[static_cast<size_t>(id)] = 1;
  const int64_t n = end - begin, k = static_cast<int64_t>(rc.candidates.size());
  for (int64_t i = 0; i < k; ++i) spaced[static_cast<size_t>(begin + i * n / k)] = 1;
  std::vector<double> sorted = p;
  std::sort(sorted.begin(), sorted.end(), [](double a, double b) { return a > b; });
  size_t rows = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    m.retained += kept[i] ? p[i] : 0;
    m.spaced += spaced[i] ? p[i] : 0;
    rows += static_cast<size_t>(kept[i]);
  }
  for (size_t i = 0; i < rows; ++i) m.oracle += sorted[i];
}

}  // namespace

QualityMeans recompute_quality(const ArtifactReader& r, const DumpReader& d, SelectorSet& sel,
                               const QueryParams& params) {
  const auto& geo = d.info().geo;
  const int64_t E = r.source().coverage_end, dim = geo.head_dim;
  const std::vector<int64_t> qpos = d.q_positions();
  const json& pm = r.manifest()["params"];
  const int64_t begin = std::min(pm["sink"].get<int64_t>(), E);
  const int64_t end = std::max(begin, E - pm["local"].get<int64_t>());
  std::vector<float> K(static_cast<size_t>(E * dim)), Q(static_cast<size_t>(geo.q_tokens * dim));
  QualityMeans m;
  for (int64_t l = pm["layers"][0].get<int64_t>(); l <= pm["layers"][1].get<int64_t>(); ++l)
    for (int64_t h = 0; h < geo.q_heads; ++h) {
      d.read_k(l, r.source().id.q_to_kv_head[static_cast<size_t>(h)], 0, E, K.data());
      d.read_q(l, h, Q.data());
      const KeyRows keys{K.data(), E, dim};
      for (size_t j = 0; j < qpos.size(); ++j) {
        if (qpos[j] < E || qpos[j] >= geo.tokens) continue;
        const float* q = Q.data() + static_cast<int64_t>(j) * dim;
        add_masses(softmax_rows(q, K.data(), E, dim), sel.query(l, h, q, qpos[j], params, &keys), begin, end, m);
        ++m.queries;
      }
    }
  const double n = static_cast<double>(std::max<int64_t>(m.queries, 1));
  m.retained /= n;
  m.oracle /= n;
  m.spaced /= n;
  return m;
}

}  // namespace kvtool::test
