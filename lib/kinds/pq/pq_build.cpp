// kind "pq", offline half: PQCache codebooks with FAISS k-means, the codes of the actual rows, and
// append (formats/kinds-v1.md, "pq").
#include "pq/pq_builder.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "kvtool/append.h"
#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "common/nearest_l2.h"
#include "common/param_json.h"
#include "pq/pq_aniso.h"
#include "pq/pq_internal.h"

namespace kvtool {

namespace {

using pq::code_dtype;
using pq::PqLayout;

// Nearest centroid of every row (L2), by FAISS' flat search: the codes of the actual rows.
void encode_subspace(const float* x, int64_t n, int64_t dsub, const float* centroids, int64_t k,
                     std::vector<int64_t>& labels) {
  TrainingIndexL2 index(static_cast<faiss::Index::idx_t>(dsub));
  index.add(k, centroids);
  std::vector<float> dist(static_cast<size_t>(n));
  labels.assign(static_cast<size_t>(n), 0);
  if (n > 0) index.search(n, x, 1, dist.data(), reinterpret_cast<faiss::Index::idx_t*>(labels.data()));
}

// Codes [n, m] in the section's dtype (u8 up to 8 bits, else u16 little-endian).
std::vector<uint8_t> store_codes(const std::vector<int32_t>& codes, int64_t m, int64_t bits) {
  const size_t n = codes.size() / static_cast<size_t>(m), w = bits <= 8 ? 1 : 2;
  std::vector<uint8_t> out(n * static_cast<size_t>(m) * w);
  for (size_t i = 0; i < codes.size(); ++i) {
    out[i * w] = static_cast<uint8_t>(codes[i] & 0xff);
    if (w == 2) out[i * w + 1] = static_cast<uint8_t>(codes[i] >> 8);
  }
  return out;
}

// The codes of rows [n, d] with the codebooks [m, k, dsub]: nearest centroid per subspace, then,
// for loss anisotropic, coordinate descent on the score-aware loss (as the build encodes).
std::vector<int32_t> encode_rows(const float* rows, int64_t n, int64_t d, const float* centroids, const PqLayout& lay,
                                 const std::string& loss, double eta) {
  std::vector<int32_t> codes(static_cast<size_t>(n * lay.m));
  std::vector<float> x(static_cast<size_t>(n * lay.dsub));
  std::vector<int64_t> labels;
  for (int64_t j = 0; j < lay.m; ++j) {
    for (int64_t i = 0; i < n; ++i) std::memcpy(x.data() + i * lay.dsub, rows + i * d + j * lay.dsub, lay.dsub * 4);
    encode_subspace(x.data(), n, lay.dsub, centroids + j * lay.k * lay.dsub, lay.k, labels);
    for (int64_t i = 0; i < n; ++i) codes[i * lay.m + j] = static_cast<int32_t>(labels[i]);
  }
  if (loss == "anisotropic") pq::aniso_encode({rows, n, d, lay.m, lay.k, eta}, centroids, pq::kEncodePasses, codes);
  return codes;
}

// eta of one part from the dump's queries (formats/kinds-v1.md, "pq"): the paper's
// h_par / h_perp with the queries' empirical distribution in place of its uniform one and the
// attention weight w(q, x) = softmax_x(q . x / sqrt(d)) in place of its score threshold:
//   eta = (d - 1) * sum w (q . u)^2 / sum w (|q|^2 - (q . u)^2),  u = x / |x|,
// over the indexed rows x and the queries of this kv head at positions before E - 1 (eval's
// queries start at E - 1), each over the rows it attends to (causal).
double calibrated_eta(const PartInput& in) {
  const DumpReader& dump = *in.dump;
  const auto& info = dump.info();
  const int64_t d = in.head_dim, rb = in.row_begin(), re = in.row_end(), E = in.coverage_end;
  KVT_CHECK(
      info.has_q, NO_QUERIES,
      "loss anisotropic derives anisotropic_eta from /kv/q queries (a dump written with queries) or takes a value");
  const std::vector<int64_t> qpos = dump.q_positions();
  std::vector<float> Q(static_cast<size_t>(info.geo.q_tokens * d)), u(in.keys + rb * d, in.keys + re * d);
  for (int64_t i = 0; i < re - rb; ++i) {
    double s = 0;
    for (int64_t t = 0; t < d; ++t) s += static_cast<double>(u[i * d + t]) * u[i * d + t];
    for (int64_t t = 0; t < d; ++t) u[i * d + t] = s > 0 ? static_cast<float>(u[i * d + t] / std::sqrt(s)) : 0.f;
  }
  double num = 0, den = 0;
  std::vector<double> logit;
  for (int64_t h = 0; h < info.geo.q_heads; ++h) {
    if (info.id.q_to_kv_head[static_cast<size_t>(h)] != in.kv_head) continue;
    dump.read_q(in.layer, h, Q.data());
    for (size_t j = 0; j < qpos.size(); ++j) {
      if (qpos[j] < rb || qpos[j] >= E - 1) continue;
      const float* q = Q.data() + static_cast<int64_t>(j) * d;
      const int64_t seen = qpos[j] + 1;  // rows [0, position]
      logit.assign(static_cast<size_t>(seen), 0.0);
      double top = -1e300, z = 0, q2 = 0;
      for (int64_t t = 0; t < d; ++t) q2 += static_cast<double>(q[t]) * q[t];
      for (int64_t i = 0; i < seen; ++i) {
        for (int64_t t = 0; t < d; ++t) logit[i] += static_cast<double>(q[t]) * in.keys[i * d + t];
        logit[i] /= std::sqrt(static_cast<double>(d));
        top = std::max(top, logit[i]);
      }
      for (int64_t i = 0; i < seen; ++i) z += std::exp(logit[i] - top);
      for (int64_t i = rb; i < std::min(seen, re); ++i) {
        double c = 0;
        for (int64_t t = 0; t < d; ++t) c += static_cast<double>(q[t]) * u[(i - rb) * d + t];
        const double w = std::exp(logit[i] - top) / z;
        num += w * c * c;
        den += w * (q2 - c * c);
      }
    }
  }
  KVT_CHECK(num > 0 && den > 0 && std::isfinite(num / den), NO_QUERIES,
            "no usable queries of part (" << in.layer << ", " << in.kv_head << ") before position " << E - 1
                                          << " to derive anisotropic_eta from; give a value");
  return static_cast<double>(d - 1) * num / den;
}

}  // namespace

json PqBuilder::params() const {
  json j = {{"metric", "l2-train-ip-score"}};
#define KVTOOL_PARAM KVTOOL_MANIFEST_PARAM
#include "kvtool/kinds/pq_params.def"
  if (p_.loss == "anisotropic") {  // absent: loss l2, so that l2 artifacts stay as they were
    j["metric"] = "anisotropic-train-ip-score";
    j["loss"] = p_.loss;
    j["anisotropic_eta"] = p_.anisotropic_eta;
  }
  if (p_.codebook_dtype != "f32") j["codebook_dtype"] = p_.codebook_dtype;  // absent: f32
  return j;
}

std::pair<int64_t, int64_t> pq_default_shape(int64_t m, int64_t b, int64_t d, int64_t n, int64_t e) {
  int64_t best_m = 0, best_b = 0;
  for (int64_t mm = m ? m : 1; mm <= (m ? m : std::min<int64_t>(32, d)); ++mm) {
    if (d % mm != 0) continue;
    for (int64_t bb = b ? b : 4; bb <= (b ? b : 8); ++bb) {
      const bool fits = (int64_t{1} << bb) < n && (int64_t{1} << bb) * d * e + mm * n <= (int64_t{1} << 8) * d + 2 * n;
      if (fits && (mm * bb > best_m * best_b || (mm * bb == best_m * best_b && bb > best_b))) best_m = mm, best_b = bb;
    }
  }
  if (best_m == 0) return {m ? m : 2, b ? b : 6};
  return {best_m, best_b};
}

std::unique_ptr<KindBuilder> PqBuilder::resolved(int64_t d, int64_t n) const {
  if (p_.subspaces > 0 && p_.bits > 0) return nullptr;
  PqParams p = p_;
  std::tie(p.subspaces, p.bits) = pq_default_shape(p_.subspaces, p_.bits, d, n, p_.codebook_dtype == "f16" ? 2 : 4);
  return std::make_unique<PqBuilder>(p);
}

void PqBuilder::check(int64_t d) const {
  // 0: chosen from the part size (resolved), checked again once chosen.
  KVT_CHECK(p_.bits >= 0 && p_.bits <= 16, USAGE, "bits must be in 1..16 (got " << p_.bits << ")");
  KVT_CHECK(p_.subspaces >= 0, USAGE, "subspaces must be positive");
  KVT_CHECK(
      p_.subspaces == 0 || d % p_.subspaces == 0, USAGE,
      "subspaces " << p_.subspaces << " does not divide the head dim " << d << " (choose a divisor of " << d << ")");
  KVT_CHECK(p_.iters >= 1 && p_.iters <= 10000, USAGE, "iters must be in 1..10000");
  KVT_CHECK(p_.max_points_per_centroid >= 1, USAGE, "max points per centroid must be positive");
  KVT_CHECK(p_.loss == "l2" || p_.loss == "anisotropic", USAGE,
            "loss must be l2 or anisotropic (got " << p_.loss << ")");
  KVT_CHECK(p_.codebook_dtype == "f32" || p_.codebook_dtype == "f16", USAGE,
            "codebook_dtype must be f32 or f16 (got " << p_.codebook_dtype << ")");
  KVT_CHECK(std::isfinite(p_.anisotropic_eta) && p_.anisotropic_eta >= 0, USAGE,
            "anisotropic_eta must be 0 (derived from the dump's queries) or a finite number > 0 (got "
                << p_.anisotropic_eta << ")");
}

PartOutput PqBuilder::build_part(const PartInput& in) const {
  const int64_t d = in.head_dim, m = p_.subspaces, dsub = d / m, k = int64_t{1} << p_.bits;
  const int64_t rb = in.row_begin(), n = in.row_end() - rb;
  PartOutput out;
  out.meta = {{"indexed_rows", n}, {"dense", n <= k}};
  if (n <= k) return out;  // attention stays dense for this part, as the reference does
  std::vector<float> centroids(static_cast<size_t>(m * k * dsub));
  std::vector<int32_t> codes(static_cast<size_t>(n * m));
  std::vector<float> x(static_cast<size_t>(n * dsub));
  std::vector<int64_t> labels;
  for (int64_t j = 0; j < m; ++j) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(x.data() + i * dsub, in.keys + (rb + i) * d + j * dsub, dsub * sizeof(float));
    faiss::ClusteringParameters cp;
    cp.niter = static_cast<int>(p_.iters);
    cp.seed = static_cast<int>((in.seed + static_cast<uint64_t>(j)) & 0x7fffffff);
    cp.max_points_per_centroid = static_cast<int>(p_.max_points_per_centroid);
    cp.verbose = false;
    cp.min_points_per_centroid = 1;  // small parts are expected (FAISS would print a warning per subspace)
    faiss::Clustering clus(static_cast<int>(dsub), static_cast<int>(k), cp);
    TrainingIndexL2 index(static_cast<faiss::Index::idx_t>(dsub));  // one per training (nearest_l2.h)
    clus.train(n, x.data(), index);
    std::memcpy(centroids.data() + j * k * dsub, clus.centroids.data(), k * dsub * sizeof(float));
    encode_subspace(x.data(), n, dsub, clus.centroids.data(), k, labels);  // codes of the actual rows
    for (int64_t i = 0; i < n; ++i) codes[i * m + j] = static_cast<int32_t>(labels[i]);
  }
  double eta = 1;
  if (p_.loss == "anisotropic") {  // from the L2 codebooks and codes: every round lowers the loss
    eta = p_.anisotropic_eta > 0 ? p_.anisotropic_eta : calibrated_eta(in);
    if (p_.anisotropic_eta == 0) out.meta["anisotropic_eta"] = eta;
    const pq::AnisoProblem ap{in.keys + rb * d, n, d, m, k, eta};
    pq::aniso_train(ap, p_.iters, centroids.data(), codes);
  }
  out.sections.push_back({"pq_centroids",
                          p_.codebook_dtype,
                          {m, k, dsub},
                          stored_float_bytes(centroids, p_.codebook_dtype, "a pq centroid")});
  if (p_.codebook_dtype != "f32") {  // the codes of the codebooks as stored (f16-rounded)
    const std::vector<float> stored = stored_float_values(centroids, p_.codebook_dtype);
    if (p_.loss == "anisotropic")  // descent from the trained codes: never a higher loss than restarting
      pq::aniso_encode({in.keys + rb * d, n, d, m, k, eta}, stored.data(), pq::kEncodePasses, codes);
    else
      codes =
          encode_rows(in.keys + rb * d, n, d, stored.data(), {m, p_.bits, k, d, dsub, p_.codebook_dtype}, p_.loss, eta);
  }
  out.sections.push_back({"pq_codes", code_dtype(p_.bits), {n, m}, store_codes(codes, m, p_.bits)});
  return out;
}

namespace {

// Append for pq: rows that entered the index since the old coverage end are encoded with the
// existing codebooks; the codebooks themselves never change.
class PqAppender : public KindAppender {
 public:
  std::string kind() const override { return "pq"; }

  AppendPlan plan(const ArtifactReader& old, int64_t prefix) override {
    E0_ = old.source().coverage_end;
    E_ = prefix;
    KVT_CHECK(E_ >= E0_, USAGE, "prefix " << E_ << " is below the artifact's coverage end " << E0_);
    lay_ = PqLayout::of(old);
    read_loss(old.manifest()["params"]);
    before_ = after_ = IndexedRows::of(old);
    after_.coverage_end = E_;
    // The new rows are [old end, new end) of the indexed range, the old local window included.
    return {E_, before_.end(), after_.end(), after_.count()};
  }

  void append_part(const AppendPartInput& in, PartOutput& out) override {
    const SectionEntry* ce = in.old.find("pq_centroids", in.layer, in.kv_head);
    auto cb = in.old.read_section(*ce);
    const std::vector<float> codebook = widen_float_section(cb, lay_.codebook_dtype);
    auto codes = in.old.read_section(*in.old.find("pq_codes", in.layer, in.kv_head));
    const size_t cw = lay_.bits <= 8 ? 1 : 2;
    codes.resize(static_cast<size_t>(after_.count() * lay_.m) * cw);
    const int64_t n_new = in.rows_end - in.rows_begin;
    if (n_new > 0) {
      const std::vector<int32_t> c = encode_rows(in.rows, n_new, in.head_dim, codebook.data(), lay_, loss_,
                                                 part_eta(in.old, in.layer, in.kv_head));
      const std::vector<uint8_t> fresh = store_codes(c, lay_.m, lay_.bits);
      std::memcpy(codes.data() + before_.count() * lay_.m * cw, fresh.data(), fresh.size());
      encoded_ += n_new;
    }
    out.sections.push_back({"pq_centroids", lay_.codebook_dtype, ce->shape, std::move(cb)});
    out.sections.push_back({"pq_codes", code_dtype(lay_.bits), {after_.count(), lay_.m}, std::move(codes)});
  }

  json first_generation() const override { return {{"index_generation", 1}, {"coverage_end", E0_}}; }
  json generation(int64_t gen) const override { return {{"index_generation", gen}, {"coverage_end", E_}}; }

  // The kind's fields of the summary, after every part was appended.
  PqAppendSummary summary(AppendSummary s) const {
    const int64_t per_part = encoded_ / std::max<int64_t>(1, s.parts);
    return {std::move(s), E0_, per_part};
  }

 private:
  int64_t E0_ = 0, E_ = 0, encoded_ = 0;
  PqLayout lay_{};
  IndexedRows before_, after_;
  std::string loss_ = "l2";
  double eta_ = 1;

  // The build's loss, so that new rows are encoded as the build encoded its rows (absent: l2).
  void read_loss(const json& p) {
    if (!p.contains("loss")) return;
    KVT_CHECK(p["loss"].is_string() && (p["loss"] == "l2" || p["loss"] == "anisotropic"), BAD_MANIFEST,
              "pq param loss must be \"l2\" or \"anisotropic\"");
    loss_ = p["loss"].get<std::string>();
    if (loss_ != "anisotropic") return;
    KVT_CHECK(p.contains("anisotropic_eta") && p["anisotropic_eta"].is_number() &&
                  std::isfinite(p["anisotropic_eta"].get<double>()) && p["anisotropic_eta"].get<double>() >= 0,
              BAD_MANIFEST, "pq loss anisotropic needs a finite anisotropic_eta >= 0");
    eta_ = p["anisotropic_eta"].get<double>();
  }

  // eta 0: the part's derived value, recorded in its metadata by the build.
  double part_eta(const ArtifactReader& old, int64_t layer, int64_t head) const {
    if (loss_ != "anisotropic" || eta_ > 0) return eta_;
    const json& pm = part_meta(old, layer, head);
    KVT_CHECK(
        pm.contains("anisotropic_eta") && pm["anisotropic_eta"].is_number() && pm["anisotropic_eta"].get<double>() > 0,
        BAD_MANIFEST, "pq part (" << layer << ", " << head << ") lacks its derived anisotropic_eta");
    return pm["anisotropic_eta"].get<double>();
  }
};

}  // namespace

PqAppendSummary pq_append(const AppendOptions& o) {
  PqAppender appender;
  return appender.summary(append_generation(o, appender));
}

json PqAppendSummary::to_json() const {
  json j = append.to_json();
  j["previous_coverage_end"] = previous_coverage_end;
  j["rows_encoded_per_part"] = rows_encoded_per_part;
  return j;
}

}  // namespace kvtool
