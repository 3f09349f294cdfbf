#include "kvtool/query.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvtool/atomic_file.h"
#include "kvtool/error.h"

namespace kvtool {

json CandidateReceipt::to_json() const {
  json sc = json::array();
  for (float s : scores) sc.push_back(s);
  json j = {{"schema_version", kJsonSchemaVersion},
            {"kind", kind},
            {"index_generation", index_generation},
            {"content_digest", content_digest},
            {"semantics", "candidate_ids_only"},
            {"layer", layer},
            {"q_head", q_head},
            {"kv_head", kv_head},
            {"position", position},
            {"budget_rows", budget_rows},
            {"indexed_rows", indexed_rows},
            {"candidates", candidates},
            {"scores", sc},
            {"inclusion_probabilities", inclusion},
            {"selector", selector},
            {"centroids_scored", centroids_scored},
            {"always_included", always_included},
            {"part", part}};
  if (pool_generation > 0) j["pool"] = {{"generation", pool_generation}, {"tier", tier}};
  return j;
}

SelectorSet::SelectorSet(const ArtifactReader& r) : r_(r), kind_(find_kind(r.kind())), rows_() {
  KVT_CHECK(kind_, UNKNOWN_KIND, "artifact kind '" << r.kind() << "' is not known to this kvtool");
  KVT_CHECK(kind_->load, USAGE, "artifacts of kind '" << r.kind() << "' cannot be queried");
  rows_ = IndexedRows::of(r);
}

const PartSelector& SelectorSet::part(int64_t layer, int64_t kv_head) {
  auto key = std::make_pair(layer, kv_head);
  auto it = cache_.find(key);
  if (it == cache_.end()) {
    KVT_CHECK(!frozen_, USAGE, "part (layer " << layer << ", kv head " << kv_head << ") is not in this artifact");
    it = cache_.emplace(key, kind_->load(r_, layer, kv_head)).first;
  }
  return *it->second;
}

void SelectorSet::preload() {
  for (const auto& pm : r_.manifest()["kind_data"]["parts"])
    part(pm["layer"].get<int64_t>(), pm["kv_head"].get<int64_t>());
  frozen_ = true;
}

int64_t SelectorSet::resident_bytes() const {
  int64_t b = 0;
  for (const auto& [k, sel] : cache_) b += sel->resident_bytes() + 256;  // + the part's object and map node
  return b;
}

std::vector<std::pair<int64_t, int64_t>> SelectorSet::parts() const {
  std::vector<std::pair<int64_t, int64_t>> v;
  for (const auto& [k, sel] : cache_) v.push_back(k);
  return v;
}

std::unique_ptr<QueryParams> SelectorSet::params(const QuerySettings& settings) const {
  return kind_->parse_query(r_, settings);
}

CandidateReceipt SelectorSet::query(int64_t layer, int64_t q_head, const float* q, int64_t position,
                                    const QueryParams& params, const KeyRows* keys, const SelectHook& hook) {
  const auto& src = r_.source();
  KVT_CHECK(layer >= 0 && layer < src.geo.layers, USAGE, "--layer " << layer << " is outside 0-" << src.geo.layers - 1);
  KVT_CHECK(q_head >= 0 && q_head < src.geo.q_heads, USAGE,
            "--q-head " << q_head << " is outside 0-" << src.geo.q_heads - 1);
  KVT_CHECK(position >= rows_.coverage_end - 1, USAGE,
            "position " << position << " lies inside the covered rows [0, " << rows_.coverage_end
                        << "); index queries are for positions >= " << rows_.coverage_end - 1);
  CandidateReceipt rc;
  rc.kind = r_.kind();
  rc.content_digest = src.content_digest;
  rc.index_generation = r_.manifest()["index_generation"];
  rc.layer = layer;
  rc.q_head = q_head;
  rc.kv_head = src.id.q_to_kv_head[static_cast<size_t>(q_head)];
  rc.position = position;
  const PartSelector& sel = part(layer, rc.kv_head);
  rc.indexed_rows = sel.indexed_rows();
  SelectRequest req;
  req.q = q;
  req.params = &params;
  req.keys = keys;
  Selection out;
  if (!hook || !hook(layer, rc.kv_head, sel, req, out)) sel.select(req, out);
  rc.budget_rows = out.budget_rows;
  rc.candidates = std::move(out.ids);
  rc.scores = std::move(out.scores);
  rc.inclusion = std::move(out.inclusion);
  rc.centroids_scored = out.centroids_scored;
  rc.part = sel.describe();
  rc.selector = params.receipt(rc.indexed_rows);
  for (int64_t i = 0; i < rows_.begin(); ++i) rc.always_included.push_back(i);
  for (int64_t i = rows_.end(); i <= position; ++i) rc.always_included.push_back(i);
  return rc;
}

}  // namespace kvtool
