// kind "pq", offline half: PQCache codebooks with FAISS k-means, the codes of the actual rows, and
// append (formats/kinds-v1.md, "pq").
#include "pq/pq.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cstring>

#include "kvtool/append.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "pq/pq_internal.h"

namespace kvtool {

namespace {

using pq::code_dtype;
using pq::PqLayout;

// Nearest centroid of every row (L2), by FAISS' flat index: the codes of the actual rows.
void encode_subspace(const float* x, int64_t n, int64_t dsub, const float* centroids, int64_t k,
                     std::vector<int64_t>& labels) {
  faiss::IndexFlatL2 index(static_cast<faiss::Index::idx_t>(dsub));
  index.add(k, centroids);
  std::vector<float> dist(static_cast<size_t>(n));
  labels.assign(static_cast<size_t>(n), 0);
  if (n > 0) index.search(n, x, 1, dist.data(), reinterpret_cast<faiss::Index::idx_t*>(labels.data()));
}

void store_codes(const std::vector<int64_t>& labels, int64_t j, int64_t m, int64_t bits, std::vector<uint8_t>& out) {
  const size_t n = labels.size();
  if (bits <= 8) {
    for (size_t i = 0; i < n; ++i) out[i * m + j] = static_cast<uint8_t>(labels[i]);
  } else {
    uint16_t* p = reinterpret_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < n; ++i) p[i * m + j] = static_cast<uint16_t>(labels[i]);
  }
}

}  // namespace

json PqBuilder::params() const {
  return {{"subspaces", p_.subspaces},
          {"bits", p_.bits},
          {"iters", p_.iters},
          {"max_points_per_centroid", p_.max_points_per_centroid},
          {"metric", "l2-train-ip-score"}};
}

void PqBuilder::check(int64_t d) const {
  KVT_CHECK(p_.bits >= 1 && p_.bits <= 16, USAGE, "--bits must be in 1..16 (got " << p_.bits << ")");
  KVT_CHECK(p_.subspaces >= 1, USAGE, "--subspaces must be positive");
  KVT_CHECK(
      d % p_.subspaces == 0, USAGE,
      "--subspaces " << p_.subspaces << " does not divide the head dim " << d << " (choose a divisor of " << d << ")");
  KVT_CHECK(p_.iters >= 1 && p_.iters <= 10000, USAGE, "--iters must be in 1..10000");
  KVT_CHECK(p_.max_points_per_centroid >= 1, USAGE, "max points per centroid must be positive");
}

PartOutput PqBuilder::build_part(const PartInput& in) const {
  const int64_t d = in.head_dim, m = p_.subspaces, dsub = d / m, k = int64_t{1} << p_.bits;
  const int64_t rb = in.row_begin(), n = in.row_end() - rb;
  PartOutput out;
  out.meta = {{"indexed_rows", n}, {"dense", n <= k}};
  if (n <= k) return out;  // attention stays dense for this part, as the reference does
  std::vector<float> centroids(static_cast<size_t>(m * k * dsub));
  std::vector<uint8_t> codes(static_cast<size_t>(n * m) * (p_.bits <= 8 ? 1 : 2));
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
    faiss::IndexFlatL2 index(static_cast<faiss::Index::idx_t>(dsub));
    clus.train(n, x.data(), index);
    std::memcpy(centroids.data() + j * k * dsub, clus.centroids.data(), k * dsub * sizeof(float));
    encode_subspace(x.data(), n, dsub, clus.centroids.data(), k, labels);  // codes of the actual rows
    store_codes(labels, j, m, p_.bits, codes);
  }
  PartSection cs{"pq_centroids", "f32", {m, k, dsub}, {}};
  cs.bytes.resize(centroids.size() * 4);
  std::memcpy(cs.bytes.data(), centroids.data(), cs.bytes.size());
  out.sections.push_back(std::move(cs));
  out.sections.push_back({"pq_codes", code_dtype(p_.bits), {n, m}, std::move(codes)});
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
    KVT_CHECK(E_ >= E0_, USAGE, "--prefix " << E_ << " is below the artifact's coverage end " << E0_);
    lay_ = PqLayout::of(old);
    before_ = after_ = IndexedRows::of(old);
    after_.coverage_end = E_;
    // The new rows are [old end, new end) of the indexed range, the old local window included.
    return {E_, before_.end(), after_.end(), after_.count()};
  }

  void append_part(const AppendPartInput& in, PartOutput& out) override {
    const SectionEntry* ce = in.old.find("pq_centroids", in.layer, in.kv_head);
    auto cb = in.old.read_section(*ce);
    auto codes = in.old.read_section(*in.old.find("pq_codes", in.layer, in.kv_head));
    const size_t cw = lay_.bits <= 8 ? 1 : 2;
    codes.resize(static_cast<size_t>(after_.count() * lay_.m) * cw);
    const int64_t n_new = in.rows_end - in.rows_begin;
    if (n_new > 0) {
      std::vector<uint8_t> fresh(static_cast<size_t>(n_new * lay_.m) * cw);
      std::vector<float> x(static_cast<size_t>(n_new * lay_.dsub));
      std::vector<int64_t> labels;
      for (int64_t j = 0; j < lay_.m; ++j) {
        for (int64_t i = 0; i < n_new; ++i)
          std::memcpy(x.data() + i * lay_.dsub, in.rows + i * in.head_dim + j * lay_.dsub, lay_.dsub * sizeof(float));
        encode_subspace(x.data(), n_new, lay_.dsub, reinterpret_cast<const float*>(cb.data()) + j * lay_.k * lay_.dsub,
                        lay_.k, labels);
        store_codes(labels, j, lay_.m, lay_.bits, fresh);
      }
      std::memcpy(codes.data() + before_.count() * lay_.m * cw, fresh.data(), fresh.size());
      encoded_ += n_new;
    }
    out.sections.push_back({"pq_centroids", "f32", ce->shape, std::move(cb)});
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
};

}  // namespace

PqAppendSummary pq_append(const std::string& artifact, const std::string& dump_path, const std::string& output,
                          int64_t prefix, const std::string& sign_key, bool quiet) {
  PqAppender appender;
  return appender.summary(append_generation(artifact, dump_path, output, prefix, sign_key, quiet, appender));
}

json PqAppendSummary::to_json() const {
  json j = append.to_json();
  j["previous_coverage_end"] = previous_coverage_end;
  j["rows_encoded_per_part"] = rows_encoded_per_part;
  return j;
}

}  // namespace kvtool
