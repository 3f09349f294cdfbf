// kind "pq", offline half: PQCache codebooks with FAISS k-means, the codes of the actual rows, and
// append (formats/kinds-v1.md, "pq").
#include "pq/pq.h"

#include <faiss/Clustering.h>
#include <faiss/IndexFlat.h>

#include <algorithm>
#include <cstring>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"
#include "kvtool/progress.h"
#include "kvtool/source_binding.h"
#include "pq/pq_internal.h"

namespace kvtool {

namespace {

using pq::code_dtype;
using pq::PqLayout;

// Nearest centroid of every row (L2), by FAISS' flat index: the codes of the actual rows.
void encode_subspace(const float* x, int64_t n, int64_t dsub, const float* centroids, int64_t k, std::vector<int64_t>& labels) {
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
  return {{"subspaces", p_.subspaces}, {"bits", p_.bits}, {"iters", p_.iters},
          {"max_points_per_centroid", p_.max_points_per_centroid}, {"metric", "l2-train-ip-score"}};
}

void PqBuilder::check(int64_t d) const {
  KVT_CHECK(p_.bits >= 1 && p_.bits <= 16, USAGE, "--bits must be in 1..16 (got " << p_.bits << ")");
  KVT_CHECK(p_.subspaces >= 1, USAGE, "--subspaces must be positive");
  KVT_CHECK(d % p_.subspaces == 0, USAGE,
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

json pq_append(const std::string& artifact, const std::string& dump_path, const std::string& output, int64_t prefix,
               const std::string& sign_key, bool quiet) {
  ArtifactReader old(artifact);
  old.verify_sections();
  KVT_CHECK(old.kind() == "pq", USAGE, "'" << artifact << "' is a " << old.kind() << " artifact, not pq");
  find_kind("pq")->validate(old);
  DumpReader dump(dump_path);
  check_source(old.source(), dump, false);  // the old covered range must be the same content
  const int64_t E = prefix < 0 ? dump.info().committed_frontier : prefix;
  const int64_t E0 = old.source().coverage_end;
  KVT_CHECK(E >= E0, USAGE, "--prefix " << E << " is below the artifact's coverage end " << E0);
  KVT_CHECK(E <= dump.info().committed_frontier, USAGE,
            "--prefix " << E << " is beyond the dump's committed frontier " << dump.info().committed_frontier);
  SourceBinding binding = bind_source(dump, E);
  PqLayout lay = PqLayout::of(old);
  IndexedRows before = IndexedRows::of(old), after = before;
  after.coverage_end = E;
  const int64_t d = lay.d;
  std::unique_ptr<SigningKey> key;
  if (!sign_key.empty()) key = std::make_unique<SigningKey>(SigningKey::load(sign_key));
  int zstd_level = old.manifest()["params"].value("zstd_level", 3);
  ArtifactWriter w(output, zstd_level);
  json parts = json::array();
  const json& old_parts = old.manifest()["kind_data"]["parts"];
  Progress progress("kvtool-pq append", static_cast<int64_t>(old_parts.size()), quiet);
  int64_t encoded = 0;
  for (const auto& pm : old_parts) {
    int64_t layer = pm["layer"], head = pm["kv_head"];
    json npm = pm;
    npm["indexed_rows"] = after.count();
    if (!pm["dense"].get<bool>()) {
      // Rows that entered the index: [old end, new end) of the indexed range (the old local
      // window included), encoded with the existing codebooks.
      int64_t r0 = before.end(), r1 = after.end(), n_new = r1 - r0;
      auto cb = old.read_section(*old.find("pq_centroids", layer, head));
      auto codes = old.read_section(*old.find("pq_codes", layer, head));
      size_t cw = lay.bits <= 8 ? 1 : 2;
      codes.resize(static_cast<size_t>(after.count() * lay.m) * cw);
      std::vector<float> keys(static_cast<size_t>(std::max<int64_t>(n_new, 0) * d)), x(static_cast<size_t>(std::max<int64_t>(n_new, 0) * lay.dsub));
      if (n_new > 0) {
        dump.read_k(layer, head, r0, r1, keys.data());
        std::vector<uint8_t> fresh(static_cast<size_t>(n_new * lay.m) * cw);
        std::vector<int64_t> labels;
        for (int64_t j = 0; j < lay.m; ++j) {
          for (int64_t i = 0; i < n_new; ++i)
            std::memcpy(x.data() + i * lay.dsub, keys.data() + i * d + j * lay.dsub, lay.dsub * sizeof(float));
          encode_subspace(x.data(), n_new, lay.dsub, reinterpret_cast<const float*>(cb.data()) + j * lay.k * lay.dsub, lay.k, labels);
          store_codes(labels, j, lay.m, lay.bits, fresh);
        }
        std::memcpy(codes.data() + before.count() * lay.m * cw, fresh.data(), fresh.size());
        encoded += n_new;
      }
      const SectionEntry* ce = old.find("pq_centroids", layer, head);
      w.add_section("pq_centroids", "f32", ce->shape, cb.data(), cb.size(), layer, head);
      w.add_section("pq_codes", code_dtype(lay.bits), {after.count(), lay.m}, codes.data(), codes.size(), layer, head);
    }
    parts.push_back(npm);
    progress.advance();
  }
  progress.finish();
  ManifestCore core;
  core.kind = "pq";
  core.params = old.manifest()["params"];
  core.source = binding;
  core.index_generation = old.manifest()["index_generation"].get<int64_t>() + 1;
  core.selector_generation = old.manifest()["selector_generation"];
  core.kind_data = old.manifest()["kind_data"];
  core.kind_data["parts"] = parts;
  json gens = core.kind_data.value("generations", json::array({{{"index_generation", 1}, {"coverage_end", E0}}}));
  gens.push_back({{"index_generation", core.index_generation}, {"coverage_end", E}});
  core.kind_data["generations"] = gens;
  Digest md = w.finish(core, key.get());
  return {{"schema_version", kJsonSchemaVersion}, {"ok", true}, {"output", output}, {"index_generation", core.index_generation},
          {"coverage", {0, E}}, {"previous_coverage_end", E0}, {"rows_encoded_per_part", encoded / std::max<int64_t>(1, static_cast<int64_t>(old_parts.size()))},
          {"manifest_sha256", to_hex(md)}};
}

}  // namespace kvtool
