// RetroInfer's "estimated zone" for eval-decode (EvalDecodeOptions::estimated_zone): beside the
// rows a cluster kind's selection fetches, each cluster's rows it leaves out are attended as one
// estimated entry — the cluster centroid's score, weighted by how many of its rows were left out,
// with their mean value — so attention keeps an estimate of the mass it did not fetch.
#pragma once
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "kvtool/dump.h"
#include "kvtool/kinds.h"
#include "kvtool/llama2c.h"
#include "kvtool/query.h"

namespace kvtool::impl {

// One part's clusters with what the estimate needs of the prefix's values: the sum of V over each
// cluster's members, each prefix row's cluster and V rows (to take the fetched rows out of a sum).
struct ZonePart {
  ClusterView view;
  bool clustered = false;
  std::vector<double> v_sum;     // [clusters, d]
  std::vector<int32_t> cluster;  // [E]: the row's cluster, -1 for rows no cluster holds
  std::vector<float> v;          // [E, d]
};

// The parts of one artifact, loaded on first use.
class EstimatedZone {
 public:
  EstimatedZone(SelectorSet& parts, const DumpReader& dump, int64_t E, int64_t group)
      : parts_(parts), dump_(dump), E_(E), group_(group) {}
  // Whether the artifact's kind selects whole clusters (any part has a cluster view).
  bool applies();
  // `base`, with each query's left-out clusters added to its rows as estimated entries.
  AttentionSelect wrap(AttentionSelect base);

 private:
  const ZonePart& part(int64_t layer, int64_t kv_head);
  void add_estimates(const ZonePart& p, const float* q, AttentionRows& out) const;
  SelectorSet& parts_;
  const DumpReader& dump_;
  int64_t E_ = 0, group_ = 1;
  std::map<std::pair<int64_t, int64_t>, ZonePart> cache_;
};

}  // namespace kvtool::impl
