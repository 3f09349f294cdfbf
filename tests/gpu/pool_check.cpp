// See pool_check.h. The brute-force scorer follows formats/kinds-v1.md (§2.2, §2.6, §3.5, §4.5, §5.5,
// §6.6) with plain loops: sums in index order from +0.0, ties by lower index. It reads the sections
// through ArtifactReader (the container layer) and nothing of kvtool::scoring or the kinds' selectors.
#include "pool_check.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

#ifdef KVTOOL_GPU_POOL_CUDA
#include <cuda_runtime.h>
#endif

#include "kvtool/artifact.h"
#include "kvtool/half.h"
#include "kvtool/pool.h"

namespace kvtool::gpucheck {

namespace {

struct Answer {
  std::vector<int64_t> ids;
  std::vector<float> scores;
  std::vector<int64_t> always;
};

// One artifact, decoded for the brute-force scorer.
struct Art {
  std::string kind, path;
  std::unique_ptr<ArtifactReader> r;
  int64_t E = 0, begin = 0, end = 0, d = 0, layer0 = 0, kv_heads = 0;
  std::vector<int32_t> q2kv;
  json params, kd;
  mutable std::map<std::tuple<std::string, int64_t, int64_t>, std::vector<uint8_t>> cache;  // decoded sections

  template <typename T>
  std::vector<T> sec(const std::string& name, int64_t layer, int64_t head) const {
    auto it = cache.find({name, layer, head});
    if (it == cache.end()) {
      const SectionEntry* e = r->find(name, layer, head);
      if (!e) throw std::runtime_error(path + ": no section " + name);
      std::vector<uint8_t> raw = r->read_section(*e);
      if (e->dtype == "f16" || e->dtype == "i8") {  // f16 or i8 centroids: held as f32, exactly (as the pool)
        std::vector<float> f;
        if (e->dtype == "f16") {
          f = widen_f16_bytes(raw);
        } else {
          const SectionEntry* x = r->find(i8_rows_exponent_section(name), layer, head);
          if (!x) throw std::runtime_error(path + ": no exponents for " + name);
          const std::vector<uint8_t> exps = r->read_section(*x);
          f = widen_i8_rows(raw.data(), exps.data(), exps.size(), exps.empty() ? 0 : raw.size() / exps.size());
        }
        raw.assign(reinterpret_cast<const uint8_t*>(f.data()), reinterpret_cast<const uint8_t*>(f.data() + f.size()));
      }
      it = cache.emplace(std::make_tuple(name, layer, head), std::move(raw)).first;
    }
    const std::vector<uint8_t>& b = it->second;
    std::vector<T> v(b.size() / sizeof(T));
    std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  }
  const json& part(int64_t layer, int64_t head) const {
    const int64_t p = (layer - layer0) * kv_heads + head;
    return kd["parts"].at(static_cast<size_t>(p - kd["part_range"][0].get<int64_t>()));
  }
  int64_t n() const { return end - begin; }
};

Art load_art(const std::string& path) {
  Art a;
  a.path = path;
  a.r = std::make_unique<ArtifactReader>(path);
  a.kind = a.r->kind();
  a.params = a.r->manifest()["params"];
  a.kd = a.r->manifest()["kind_data"];
  const SourceBinding& s = a.r->source();
  a.E = s.coverage_end;
  a.d = s.geo.head_dim;
  a.kv_heads = s.geo.kv_heads;
  a.q2kv = s.id.q_to_kv_head;
  a.layer0 = a.params["layers"][0].get<int64_t>();
  // §2.2: begin = min(sink, E), end = max(begin, E - local).
  a.begin = std::min(a.params["sink"].get<int64_t>(), a.E);
  a.end = std::max(a.begin, a.E - a.params["local"].get<int64_t>());
  return a;
}

// §2.6: a fraction f < 1 gives min(n, llround(f n)) rows, a count c gives min(c, n).
int64_t budget_rows(const std::string& text, int64_t n) {
  const double v = std::stod(text);
  return v < 1 ? std::min(n, static_cast<int64_t>(std::llround(v * static_cast<double>(n))))
               : std::min(static_cast<int64_t>(v), n);
}

void all_rows(const Art& a, Answer& out) {  // a dense part: every indexed row, score 0
  for (int64_t i = a.begin; i < a.end; ++i) {
    out.ids.push_back(i);
    out.scores.push_back(0.0f);
  }
}

// §3.5 PQ.
void brute_pq(const Art& a, int64_t layer, int64_t head, const float* q, const std::string& budget, Answer& out) {
  if (a.part(layer, head)["dense"].get<bool>()) return all_rows(a, out);
  const int64_t m = a.params["subspaces"].get<int64_t>(), k = int64_t{1} << a.params["bits"].get<int64_t>();
  const int64_t dsub = a.d / m, n = a.n();
  const auto cen = a.sec<float>("pq_centroids", layer, head);
  std::vector<uint32_t> codes(static_cast<size_t>(n * m));
  if (k <= 256) {
    const auto c8 = a.sec<uint8_t>("pq_codes", layer, head);
    std::copy(c8.begin(), c8.end(), codes.begin());
  } else {
    const auto c16 = a.sec<uint16_t>("pq_codes", layer, head);
    std::copy(c16.begin(), c16.end(), codes.begin());
  }
  std::vector<float> lut(static_cast<size_t>(m * k)), score(static_cast<size_t>(n));
  for (int64_t j = 0; j < m; ++j)
    for (int64_t c = 0; c < k; ++c) {
      float s = 0.0f;
      for (int64_t t = 0; t < dsub; ++t) s += q[j * dsub + t] * cen[(j * k + c) * dsub + t];
      lut[j * k + c] = s;
    }
  for (int64_t i = 0; i < n; ++i) {
    float s = 0.0f;
    for (int64_t j = 0; j < m; ++j) s += lut[j * k + codes[i * m + j]];
    score[i] = s;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](int64_t x, int64_t y) { return score[x] > score[y] || (score[x] == score[y] && x < y); });
  for (int64_t r = 0; r < budget_rows(budget, n); ++r) {
    out.ids.push_back(a.begin + order[r]);
    out.scores.push_back(score[order[r]]);
  }
}

// §4.5 ClusterKV.
void brute_clusterkv(const Art& a, int64_t layer, int64_t head, const float* q, const std::string& budget,
                     Answer& out) {
  if (a.part(layer, head)["dense"].get<bool>()) return all_rows(a, out);
  const auto cen = a.sec<float>("ckv_centroids", layer, head);
  const auto sizes = a.sec<uint32_t>("ckv_sizes", layer, head);
  const auto prefix = a.sec<uint32_t>("ckv_prefix_sums", layer, head);
  const auto members = a.sec<uint32_t>("ckv_members", layer, head);
  const int64_t C = static_cast<int64_t>(sizes.size()), B = budget_rows(budget, a.n());
  std::vector<float> s(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    float x = 0.0f;
    for (int64_t t = 0; t < a.d; ++t) x += q[t] * cen[c * a.d + t];
    s[c] = x;
  }
  std::vector<int64_t> order(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) order[c] = c;
  std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return s[x] > s[y] || (s[x] == s[y] && x < y); });
  int64_t taken = 0;
  for (int64_t c : order) {
    if (taken >= B) break;
    const int64_t take = std::min<int64_t>(sizes[c], B - taken);
    for (int64_t i = 0; i < take; ++i) {
      out.ids.push_back(members[prefix[c] - sizes[c] + i]);
      out.scores.push_back(s[c]);
    }
    taken += take;
  }
}

// §5.5 lsh: the query hashed uncentered with the stored projections, rows colliding in >= c tables.
void brute_lsh(const Art& a, int64_t layer, int64_t head, const float* q, const std::string& min_c, Answer& out) {
  const int64_t n = a.n(), K = a.params["bits"].get<int64_t>(), T = a.params["tables"].get<int64_t>();
  const int64_t B = int64_t{1} << K, c = std::stoll(min_c);
  if (n == 0) return;
  // One id block of absolute ids (formats/kinds-v1.md §5.3): what every artifact of tests/gpu/data
  // holds. A part cut into several 65,536-row segments is refused rather than misread.
  if (a.params.contains("id_layout") && a.begin + n > 65536)
    throw std::runtime_error("pool check: lsh parts past 65,536 rows (several id segments) are not supported");
  const auto w = a.sec<float>("lsh_projections", layer, head);
  const auto off = a.sec<uint32_t>("lsh_offsets", layer, head);
  const SectionEntry* ie = a.r->find("lsh_ids", layer, head);
  std::vector<uint32_t> ids;
  if (ie->dtype == "u16") {
    const auto v = a.sec<uint16_t>("lsh_ids", layer, head);
    ids.assign(v.begin(), v.end());
  } else {
    ids = a.sec<uint32_t>("lsh_ids", layer, head);
  }
  std::vector<int64_t> count(static_cast<size_t>(n), 0);
  for (int64_t t = 0; t < T; ++t) {
    int64_t code = 0;
    for (int64_t b = 0; b < K; ++b) {
      float s = 0.0f;
      for (int64_t j = 0; j < a.d; ++j) s += q[j] * w[j * K * T + t * K + b];
      if (s > 0) code |= int64_t{1} << b;
    }
    for (uint32_t i = off[t * (B + 1) + code]; i < off[t * (B + 1) + code + 1]; ++i) ++count[ids[t * n + i] - a.begin];
  }
  for (int64_t i = 0; i < n; ++i)
    if (count[i] >= c) {
      out.ids.push_back(a.begin + i);
      out.scores.push_back(static_cast<float>(count[i]));
    }
}

double z_of(const float* q, const float* x, int64_t d) {  // §6.6 z(x), f64
  double s = 0;
  for (int64_t t = 0; t < d; ++t) s += static_cast<double>(q[t]) * static_cast<double>(x[t]);
  return s * (1.0 / std::sqrt(static_cast<double>(d)));
}

// §6.6 rule "bound" of the hierarchical pass, in the formats' order of arithmetic: group bounds
// from the stored centroids, groups visited by up_g descending until one cannot reach tau against
// the denominator's lower bound, visited children scored against the final lower bound.
void squeeze_bound(const Art& a, const std::vector<float>& fine, const std::vector<float>& coarse,
                   const std::vector<uint32_t>& sizes, const std::vector<uint32_t>& parent, const float* q, double tau,
                   std::vector<double>& score) {
  const int64_t C = static_cast<int64_t>(sizes.size()), G = static_cast<int64_t>(coarse.size()) / a.d;
  const double inv = 1.0 / std::sqrt(static_cast<double>(a.d)), slack = 1e-9;
  std::vector<double> up(static_cast<size_t>(G)), lo(static_cast<size_t>(G)), zf(static_cast<size_t>(C));
  std::vector<uint64_t> S(static_cast<size_t>(G), 0);
  for (int64_t c = 0; c < C; ++c) S[parent[c]] += sizes[c];
  double qn = 0, m = -INFINITY;
  for (int64_t t = 0; t < a.d; ++t) qn += static_cast<double>(q[t]) * q[t];
  qn = std::sqrt(qn);
  std::vector<int64_t> order;
  for (int64_t g = 0; g < G; ++g) {
    if (S[g] == 0) continue;
    const float* cg = &coarse[g * a.d];
    double r = 0, norm = 0, off = 0;
    std::vector<double> mean(static_cast<size_t>(a.d), 0.0);
    for (int64_t c = 0; c < C; ++c) {  // children in ascending order, as the selector lists them
      if (parent[c] != g) continue;
      double dist = 0;
      for (int64_t t = 0; t < a.d; ++t) {
        const double e = static_cast<double>(fine[c * a.d + t]) - cg[t];
        dist += e * e;
        mean[t] += static_cast<double>(sizes[c]) * fine[c * a.d + t];
      }
      if (sizes[c] > 0) r = std::max(r, std::sqrt(dist));
    }
    for (int64_t t = 0; t < a.d; ++t) {
      norm += static_cast<double>(cg[t]) * cg[t];
      off += (mean[t] / static_cast<double>(S[g]) - cg[t]) * (mean[t] / static_cast<double>(S[g]) - cg[t]);
    }
    const double zg = z_of(q, cg, a.d);
    up[g] = zg + inv * qn * (r + slack * (std::sqrt(norm) + r));
    lo[g] = zg - inv * qn * (std::sqrt(off) + slack * (std::sqrt(norm) + std::sqrt(off)));
    m = std::max(m, up[g]);
    order.push_back(g);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return up[x] > up[y]; });
  const size_t K = order.size();
  std::vector<double> rest(K + 1, 0.0);
  for (size_t k = K; k-- > 0;) rest[k] = rest[k + 1] + static_cast<double>(S[order[k]]) * std::exp(lo[order[k]] - m);
  std::vector<char> visited(static_cast<size_t>(G), 0);
  double known = 0;
  for (size_t k = 0; k < K; ++k) {
    const int64_t g = order[k];
    const double bar = tau * (known + rest[k]) * (1 - slack);
    if (bar >= DBL_MIN && std::exp(up[g] - m) < bar) break;
    for (int64_t c = 0; c < C; ++c)
      if (parent[c] == g) known += sizes[c] * std::exp((zf[c] = z_of(q, &fine[c * a.d], a.d)) - m);
    visited[g] = 1;
  }
  double m2 = -INFINITY, D = 0;
  for (int64_t g = 0; g < G; ++g)
    for (int64_t c = 0; c < C; ++c)
      if (parent[c] == g && (visited[g] || S[g] > 0)) m2 = std::max(m2, visited[g] ? zf[c] : lo[g]);
  for (int64_t g = 0; g < G; ++g) {  // every term added in order (g, then its children)
    if (!visited[g] && S[g] > 0) D += static_cast<double>(S[g]) * std::exp(lo[g] - m2);
    for (int64_t c = 0; c < C; ++c)
      if (visited[g] && parent[c] == g) D += sizes[c] * std::exp(zf[c] - m2);
  }
  D *= 1 - slack;
  for (int64_t c = 0; c < C; ++c)
    if (visited[parent[c]]) score[c] = std::exp(zf[c] - m2) / D;
}

// §6.6 squeeze, flat or hierarchical; members of clusters with score >= tau, ascending ids.
void brute_squeeze(const Art& a, int64_t layer, int64_t head, const float* q, const std::string& quantile, bool flat,
                   Answer& out) {
  if (a.n() == 0) return;
  const double tau = a.kd["thresholds"].at(quantile).get<double>();
  const auto fine = a.sec<float>("sq_fine_centroids", layer, head);
  const auto coarse = a.sec<float>("sq_coarse_centroids", layer, head);
  const auto sizes = a.sec<uint32_t>("sq_fine_sizes", layer, head);
  const auto prefix = a.sec<uint32_t>("sq_fine_prefix_sums", layer, head);
  const auto members = a.sec<uint32_t>("sq_fine_members", layer, head);
  const auto parent = a.sec<uint32_t>("sq_parent", layer, head);
  const int64_t C = static_cast<int64_t>(sizes.size());
  std::vector<double> score(static_cast<size_t>(C), -1.0), zf(static_cast<size_t>(C));
  if (flat) {
    double m = -INFINITY, D = 0;
    for (int64_t c = 0; c < C; ++c) m = std::max(m, zf[c] = z_of(q, &fine[c * a.d], a.d));
    for (int64_t c = 0; c < C; ++c) D += sizes[c] * std::exp(zf[c] - m);
    for (int64_t c = 0; c < C; ++c) score[c] = std::exp(zf[c] - m) / D;
  } else {
    squeeze_bound(a, fine, coarse, sizes, parent, q, tau, score);
  }
  std::vector<std::pair<int64_t, float>> rows;
  for (int64_t c = 0; c < C; ++c)
    if (score[c] >= tau)
      for (uint32_t i = prefix[c] - sizes[c]; i < prefix[c]; ++i)
        rows.emplace_back(members[i], static_cast<float>(score[c]));
  std::sort(rows.begin(), rows.end());
  for (auto& [id, s] : rows) {
    out.ids.push_back(id);
    out.scores.push_back(s);
  }
}

// One query setting of a kind: the pool's option name and value.
struct Setting {
  std::string option, value, label;
  bool flat = false;
};

std::vector<Setting> settings_of(const Art& a) {
  std::vector<Setting> s;
  if (a.kind == "pq" || a.kind == "clusterkv")
    for (const char* b : {"0.05", "0.25", "0.9", "7", "100000"}) s.push_back({"budget", b, std::string("budget=") + b});
  if (a.kind == "lsh")
    for (const char* c : {"1", "2", "3", "5"}) s.push_back({"min_collisions", c, std::string("min_collisions=") + c});
  if (a.kind == "squeeze")
    for (const auto& [key, tau] : a.kd["thresholds"].items())
      for (bool flat : {false, true})
        s.push_back({"quantile", key, "quantile=" + key + (flat ? " flat" : " hierarchical"), flat});
  return s;
}

Answer brute(const Art& a, int64_t layer, int64_t head, const float* q, int64_t position, const Setting& s) {
  Answer out;
  if (a.kind == "pq") brute_pq(a, layer, head, q, s.value, out);
  if (a.kind == "clusterkv") brute_clusterkv(a, layer, head, q, s.value, out);
  if (a.kind == "lsh") brute_lsh(a, layer, head, q, s.value, out);
  if (a.kind == "squeeze") brute_squeeze(a, layer, head, q, s.value, s.flat, out);
  for (int64_t i = 0; i < a.begin; ++i) out.always.push_back(i);  // §2.2 always-included rows
  for (int64_t i = a.end; i <= position; ++i) out.always.push_back(i);
  return out;
}

float bits_up(float x) { return std::nextafter(x, INFINITY); }

// A DeviceBackend that forwards to another and, when told, spoils one number of each answer by the
// smallest amount the receipts can show.
class FaultyDevice : public DeviceBackend {
 public:
  FaultyDevice(std::shared_ptr<DeviceBackend> in, Fault f, bool in_batches_only)
      : in_(std::move(in)), f_(f), singles_(!in_batches_only) {}
  std::string name() const override { return in_->name(); }
  void* host_alloc(size_t b) override { return in_->host_alloc(b); }
  void host_free(void* p) override { in_->host_free(p); }
  void* device_alloc(size_t b) override { return in_->device_alloc(b); }
  void device_free(void* p) override { in_->device_free(p); }
  std::unique_ptr<Transfer> copy_to_device(void* dst, const void* src, size_t b) override {
    return in_->copy_to_device(dst, src, b);
  }
  void copy_to_host(void* dst, const void* src, size_t b) override { in_->copy_to_host(dst, src, b); }
  void product_code_top_k(const ProductCodes& p, const float* q, int64_t k, std::vector<int64_t>& ids,
                          std::vector<float>& scores) override {
    in_->product_code_top_k(p, q, k, ids, scores);
    if (singles_ && f_ == Fault::pq && !scores.empty())
      scores.back() = bits_up(scores.back());  // 1 ulp at the boundary
  }
  void dot_scores(const float* c, int64_t count, int64_t d, const float* q, float* out) override {
    in_->dot_scores(c, count, d, q, out);
    if (singles_ && f_ == Fault::clusterkv && count > 0) out[count - 1] = bits_up(out[count - 1]);  // last cluster
  }
  void dot_scores_f64(const float* c, const int64_t* rows, int64_t count, int64_t d, double scale, const float* q,
                      double* out) override {
    in_->dot_scores_f64(c, rows, count, d, scale, q, out);
    if (singles_ && f_ == Fault::squeeze && count > 0) out[0] = nudge(out[0]);
  }
  void simhash_collisions(const float* w, const uint32_t* off, const void* ids, int id_bytes, int64_t d, int64_t bits,
                          int64_t tables, int64_t n, int64_t base, const float* q, uint32_t* codes,
                          uint16_t* count) override {
    in_->simhash_collisions(w, off, ids, id_bytes, d, bits, tables, n, base, q, codes, count);
    if (singles_ && f_ == Fault::lsh && n > 0) ++count[n / 2];  // one extra collision for one row
  }
  // The batched paths, with the same error in every query of a batch.
  void prepare_stream(void* stream) override { in_->prepare_stream(stream); }
  std::unique_ptr<DeviceStep> make_pq_step(const std::vector<PqStepGroup>& groups, int64_t top,
                                           int64_t stride) override {
    return in_->make_pq_step(groups, top, stride);
  }
  int64_t batch_buffer_bytes() override { return in_->batch_buffer_bytes(); }
  void reserve_pq_batches(const PqBatchLimits& l) override { in_->reserve_pq_batches(l); }
  int64_t pq_batch_capacity(const ProductCodes& p, int64_t top) override { return in_->pq_batch_capacity(p, top); }
  bool product_code_top_k_batch(const ProductCodes& p, const float* q, int64_t count, int64_t top, void* stream,
                                int64_t* ids, float* scores) override {
    if (!in_->product_code_top_k_batch(p, q, count, top, stream, ids, scores)) return false;
    const int64_t per = std::min(top, p.n);
    for (int64_t i = 0; f_ == Fault::pq && per > 0 && i < count; ++i)
      scores[(i + 1) * per - 1] = bits_up(scores[(i + 1) * per - 1]);
    return true;
  }
  void reserve_score_batches(const ScoreBatchLimits& l) override { in_->reserve_score_batches(l); }
  int64_t score_batch_capacity(const ScoreBatchLimits& one) override { return in_->score_batch_capacity(one); }
  bool dot_scores_batch(const float* c, int64_t rows, int64_t d, const float* q, int64_t count, void* stream,
                        float* out) override {
    if (!in_->dot_scores_batch(c, rows, d, q, count, stream, out)) return false;
    for (int64_t i = 0; f_ == Fault::clusterkv && rows > 0 && i < count; ++i)
      out[(i + 1) * rows - 1] = bits_up(out[(i + 1) * rows - 1]);
    return true;
  }
  bool dot_scores_f64_batch(const float* c, int64_t rows, int64_t d, double scale, const float* q, int64_t count,
                            void* stream, double* out) override {
    if (!in_->dot_scores_f64_batch(c, rows, d, scale, q, count, stream, out)) return false;
    for (int64_t i = 0; f_ == Fault::squeeze && rows > 0 && i < count; ++i) out[i * rows] = nudge(out[i * rows]);
    return true;
  }
  bool simhash_collisions_batch(const float* w, const uint32_t* off, const void* ids, int id_bytes, int64_t d,
                                int64_t bits, int64_t tables, int64_t n, int64_t base, const float* q, int64_t count,
                                void* stream, uint16_t* counts, int64_t stride) override {
    if (!in_->simhash_collisions_batch(w, off, ids, id_bytes, d, bits, tables, n, base, q, count, stream, counts,
                                       stride))
      return false;
    for (int64_t i = 0; f_ == Fault::lsh && n > 0 && i < count; ++i) ++counts[i * stride + n / 2];
    return true;
  }

 private:
  static double nudge(double x) { return x + 1e-6 * std::fabs(x) + 1e-12; }  // about 8 f32 ulps
  std::shared_ptr<DeviceBackend> in_;
  Fault f_;
  bool singles_;
};

// How two answers relate: identical; equal but for ids tied at the selection boundary (same score,
// position by position; only where the score equals the last, i.e. boundary, score); or different.
enum class Match { identical, boundary_ties, different };

Match compare(const Answer& x, const CandidateReceipt& y) {
  if (x.always != y.always_included || x.ids.size() != y.candidates.size() || x.scores.size() != y.scores.size())
    return Match::different;
  bool same = true;
  for (size_t i = 0; i < x.ids.size(); ++i) {
    if (std::memcmp(&x.scores[i], &y.scores[i], sizeof(float)) != 0) return Match::different;  // bit for bit
    same = same && x.ids[i] == y.candidates[i];
  }
  if (same) return Match::identical;
  // The ids must agree except where the score is the boundary (last) score, and none may repeat.
  for (size_t i = 0; i < x.ids.size(); ++i)
    if (x.scores[i] != x.scores.back() && x.ids[i] != y.candidates[i]) return Match::different;
  std::vector<int64_t> b = y.candidates;
  std::sort(b.begin(), b.end());
  return std::adjacent_find(b.begin(), b.end()) == b.end() ? Match::boundary_ties : Match::different;
}

Answer as_answer(const CandidateReceipt& r) { return {r.candidates, r.scores, r.always_included}; }

// The query vectors of (layer, q head): the committed real ones, seeded random ones of the same
// scale, ones rounded to coarse steps (ties) and the zero vector (every score equal).
struct Queries {
  int64_t first = 0, layers = 0, heads = 0, count = 0, d = 0;
  std::vector<float> v;
  std::vector<float> of(int64_t layer, int64_t head, int64_t d_art) const;
};

Queries load_queries(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char magic[4];
  int32_t h[5];
  if (!f.read(magic, 4) || std::memcmp(magic, "KVQ1", 4) != 0 || !f.read(reinterpret_cast<char*>(h), sizeof h))
    throw std::runtime_error(path + ": not a KVQ1 query file");
  Queries q{h[0], h[1], h[2], h[3], h[4], {}};
  q.v.resize(static_cast<size_t>(q.layers * q.heads * q.count * q.d));
  if (!f.read(reinterpret_cast<char*>(q.v.data()), static_cast<std::streamsize>(q.v.size() * 4)))
    throw std::runtime_error(path + ": short");
  return q;
}

std::vector<float> Queries::of(int64_t layer, int64_t head, int64_t d_art) const {
  if (d_art != d || layer < first || layer >= first + layers || head >= heads)
    throw std::runtime_error("queries.bin does not cover this artifact's geometry");
  const float* base = v.data() + ((layer - first) * heads + head) * count * d;
  std::vector<float> out(base, base + count * d);
  double norm = 0;
  for (int64_t i = 0; i < count * d; ++i) norm += static_cast<double>(base[i]) * base[i];
  const double scale = std::sqrt(norm / static_cast<double>(count * d));
  uint64_t st = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(layer * 131 + head + 1);
  auto next = [&st] {  // SplitMix64, uniform in [-1, 1)
    uint64_t z = (st += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) / 4503599627370496.0 - 1.0;
  };
  for (int64_t i = 0; i < 8 * d; ++i) out.push_back(static_cast<float>(2.0 * scale * next()));
  for (int64_t i = 0; i < 4 * d; ++i) out.push_back(std::round(static_cast<float>(scale * next()) * 2.0f) / 2.0f);
  out.insert(out.end(), static_cast<size_t>(d), 0.0f);
  return out;
}

struct Tally {
  int64_t batched = 0, batch_different = 0;  // queries of device batches; those unequal to single queries
  int64_t queries = 0, dev_host_identical = 0, dev_host_ties = 0, dev_brute_identical = 0, dev_brute_ties = 0;
  int64_t host_brute_identical = 0, host_brute_ties = 0, wrong_tier = 0, different = 0;
  std::string first_problem;
};

void count(Match m, int64_t& identical, int64_t& ties, Tally& t, const std::string& what) {
  if (m == Match::identical) ++identical;
  if (m == Match::boundary_ties) ++ties;
  if (m == Match::different && t.different++ == 0) t.first_problem = what;
}

// A decode step's batch per layer on the device tier (Lease::query_batch: every query head at four
// positions, grouped per kv head into the CUDA backend's batches), on a caller's stream; each
// answer must equal that query's single device query (ids and scores).
// A pq layer's queries as a device step (Lease::plan_device_step): queries copied to device memory,
// the plan enqueued on `stream`, its answers read back; each must equal that query's single query.
void check_device_step(const Lease& lease, DeviceBackend& backend, const QueryParams& params, int64_t layer,
                       const std::vector<int64_t>& hs, const std::vector<float>& q, const std::vector<int64_t>& pos,
                       int64_t d, void* stream, Tally& t) {
  const int64_t n = static_cast<int64_t>(hs.size());
  DeviceStepPlan plan = lease.plan_device_step(layer, hs.data(), n, params);
  const int64_t per = plan.rows_per_query();
  void* dq = backend.device_alloc(q.size() * sizeof(float));
  void* dids = backend.device_alloc(static_cast<size_t>(n * per) * sizeof(int64_t));
  void* dscores = backend.device_alloc(static_cast<size_t>(n * per) * sizeof(float));
  std::vector<int64_t> ids(static_cast<size_t>(n * per));
  std::vector<float> scores(ids.size());
  if (dq && dids && dscores) {
    backend.copy_to_device(dq, q.data(), q.size() * sizeof(float))->wait();
    plan.enqueue(static_cast<const float*>(dq), static_cast<int64_t*>(dids), static_cast<float*>(dscores), stream);
#ifdef KVTOOL_GPU_POOL_CUDA
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
#endif
    backend.copy_to_host(ids.data(), dids, ids.size() * sizeof(int64_t));
    backend.copy_to_host(scores.data(), dscores, scores.size() * sizeof(float));
  }
  for (void* p : {dq, dids, dscores}) backend.device_free(p);
  for (int64_t i = 0; i < n; ++i) {
    const CandidateReceipt one = lease.query(layer, hs[i], q.data() + i * d, pos[i], params);
    const bool same = static_cast<int64_t>(one.candidates.size()) == per &&
                      std::equal(one.candidates.begin(), one.candidates.end(), ids.begin() + i * per) &&
                      std::equal(one.scores.begin(), one.scores.end(), scores.begin() + i * per);
    ++t.batched;
    if (!same && t.batch_different++ == 0 && t.first_problem.empty())
      t.first_problem = "device step vs single, layer " + std::to_string(layer) + " query " + std::to_string(i);
  }
}

void check_batches(const Art& a, const Queries& qs, Pool& dev, DeviceBackend& backend, const QuerySettings& settings,
                   Tally& t) {
  const Lease lease = dev.acquire(a.kind);
  const auto params = lease.params(settings);
  if (dev.stats().device_batch_bytes <= 0 && t.batch_different++ == 0 && t.first_problem.empty())
    t.first_problem = "the device has no batch buffers: batches would go query by query";
  void* stream = nullptr;  // the emulated device's batches take the default
#ifdef KVTOOL_GPU_POOL_CUDA
  cudaStream_t cs = nullptr;
  if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) == cudaSuccess) stream = cs;
#endif
  const int64_t layer1 = a.params["layers"][1].get<int64_t>(), heads = static_cast<int64_t>(a.q2kv.size());
  for (int64_t layer = a.layer0; layer <= layer1; ++layer) {
    std::vector<int64_t> hs, pos;
    std::vector<float> q;
    for (int64_t h = 0; h < heads; ++h) {
      const std::vector<float> qv = qs.of(layer, h, a.d);
      for (int64_t i = 0; i < 4 && (i + 1) * a.d <= static_cast<int64_t>(qv.size()); ++i) {
        hs.push_back(h);
        pos.push_back(a.E - 1 + i * 3);
        q.insert(q.end(), qv.begin() + i * a.d, qv.begin() + (i + 1) * a.d);
      }
    }
    const int64_t n = static_cast<int64_t>(hs.size()), cap = a.E;
    std::vector<int64_t> ids(static_cast<size_t>(n * cap)), counts(static_cast<size_t>(n));
    std::vector<float> scores(ids.size());
    lease.query_batch({layer, n, hs.data(), q.data(), pos.data(), nullptr, stream}, *params,
                      {cap, ids.data(), counts.data(), scores.data(), nullptr}, 2);
    for (int64_t i = 0; i < n; ++i) {
      const CandidateReceipt one = lease.query(layer, hs[i], q.data() + i * a.d, pos[i], *params);
      const bool same = counts[i] == static_cast<int64_t>(one.candidates.size()) &&
                        std::equal(one.candidates.begin(), one.candidates.end(), ids.begin() + i * cap) &&
                        std::equal(one.scores.begin(), one.scores.end(), scores.begin() + i * cap);
      ++t.batched;
      if (!same && t.batch_different++ == 0 && t.first_problem.empty())
        t.first_problem = "batch vs single, layer " + std::to_string(layer) + " query " + std::to_string(i);
    }
    if (a.kind == "pq") {  // the queries in reverse: every kv head's members out of order
      std::reverse(hs.begin(), hs.end());
      std::reverse(pos.begin(), pos.end());
      std::vector<float> rq;
      for (int64_t i = n; i-- > 0;) rq.insert(rq.end(), q.begin() + i * a.d, q.begin() + (i + 1) * a.d);
      check_device_step(lease, backend, *params, layer, hs, rq, pos, a.d, stream, t);
    }
  }
#ifdef KVTOOL_GPU_POOL_CUDA
  if (stream) cudaStreamDestroy(static_cast<cudaStream_t>(stream));
#endif
}

// One (artifact, setting): every (layer, q head) and query vector through both pools and the brute force.
Tally check_setting(const Art& a, const Queries& qs, Pool& host, Pool& dev, DeviceBackend& backend, const Setting& s) {
  Tally t;
  QuerySettings settings{{s.option, s.value}};
  if (a.kind == "squeeze") settings["flat"] = s.flat ? "true" : "false";
  const int64_t layer1 = a.params["layers"][1].get<int64_t>();
  for (int64_t layer = a.layer0; layer <= layer1; ++layer)
    for (int64_t h = 0; h < static_cast<int64_t>(a.q2kv.size()); ++h) {
      const std::vector<float> qv = qs.of(layer, h, a.d);
      for (size_t i = 0; i * a.d < qv.size(); ++i) {
        const float* q = qv.data() + i * a.d;
        const int64_t position = a.E - 1 + static_cast<int64_t>(i % 4) * 3;  // some with an uncovered tail
        CandidateReceipt rh = host.query(a.kind, layer, h, q, position, settings);
        CandidateReceipt rd = dev.query(a.kind, layer, h, q, position, settings);
        Answer bf = brute(a, layer, a.q2kv[static_cast<size_t>(h)], q, position, s);
        std::ostringstream where;
        where << "layer " << layer << " q_head " << h << " query " << i;
        ++t.queries;
        if (rh.tier != "host" || rd.tier != "device") ++t.wrong_tier;
        count(compare(as_answer(rh), rd), t.dev_host_identical, t.dev_host_ties, t, "device vs host, " + where.str());
        count(compare(bf, rd), t.dev_brute_identical, t.dev_brute_ties, t, "device vs brute force, " + where.str());
        count(compare(bf, rh), t.host_brute_identical, t.host_brute_ties, t, "host vs brute force, " + where.str());
      }
    }
  check_batches(a, qs, dev, backend, settings, t);
  return t;
}

const char* kKinds[] = {"pq", "clusterkv", "lsh", "squeeze"};

}  // namespace

int run_pool_checks(std::shared_ptr<DeviceBackend> device, const std::string& data_dir, std::ostream& report,
                    Fault fault, const std::string& only_kind, bool in_batches_only) {
  if (fault != Fault::none) device = std::make_shared<FaultyDevice>(device, fault, in_batches_only);
  const Queries qs = load_queries(data_dir + "/queries.bin");
  Pool host(PoolOptions{int64_t{256} << 20, 0, nullptr});
  Pool dev(PoolOptions{int64_t{256} << 20, int64_t{256} << 20, device});
  int failures = 0;
  for (const char* kind : kKinds) {
    if (!only_kind.empty() && only_kind != kind) continue;
    const std::string path = data_dir + "/" + kind + ".kvi";
    const Art a = load_art(path);
    PublishRequest req;
    req.key = kind;
    req.artifact = path;
    host.publish(req);
    req.device = true;
    const PublishReceipt rc = dev.publish(req);
    const bool on_device = dev.acquire(kind).on_device() && rc.device_bytes > 0;
    for (const Setting& s : settings_of(a)) {
      const Tally t = check_setting(a, qs, host, dev, *device, s);
      const bool ok = on_device && t.different == 0 && t.wrong_tier == 0 && t.queries > 0 && t.batched > 0 &&
                      t.batch_different == 0;
      failures += !ok;
      report << (ok ? "ok   " : "FAIL ") << "pool " << kind << " " << s.label << ": " << t.queries
             << " queries; device=host identical " << t.dev_host_identical << ", boundary ties " << t.dev_host_ties
             << "; device=brute force identical " << t.dev_brute_identical << ", boundary ties " << t.dev_brute_ties
             << "; host=brute force identical " << t.host_brute_identical << ", boundary ties " << t.host_brute_ties;
      report << "; device batches (pq: and device steps): " << t.batched << " queries, " << t.batch_different
             << " unequal to single queries";
      if (t.wrong_tier) report << "; " << t.wrong_tier << " receipts from the wrong tier";
      if (!on_device) report << "; the generation is not device resident";
      if (t.different) report << "; " << t.different << " differ (first: " << t.first_problem << ")";
      report << "\n";
    }
  }
  return failures;
}

int run_fault_self_test(std::shared_ptr<DeviceBackend> device, const std::string& data_dir, std::ostream& report) {
  int missed = 0;
  for (bool in_batches_only : {false, true})
    for (Fault f : {Fault::pq, Fault::clusterkv, Fault::lsh, Fault::squeeze}) {
      const char* kind = kKinds[static_cast<int>(f) - 1];
      std::ostringstream detail;
      const int caught = run_pool_checks(device, data_dir, detail, f, kind, in_batches_only);
      const int settings = static_cast<int>(settings_of(load_art(data_dir + "/" + kind + ".kvi")).size());
      missed += caught == 0;
      report << (caught ? "ok   " : "FAIL ") << "self-test: an error injected into the device's " << kind
             << (in_batches_only ? " batched answers" : " answers") << " is caught by " << caught << " of " << settings
             << " checks\n";
    }
  return missed;
}

}  // namespace kvtool::gpucheck
