// Checks the squeeze hierarchical rule "bound" (formats/kinds-v1.md §6.6) on every query of a dump:
// for every layer, query head, dumped query at a position >= the coverage end - 1 and calibrated
// quantile, the rows it keeps contain every row flat lookup keeps. Prints one JSON object with the
// centroids scored and rows kept per query (flat, bound, factor) and the queries on which the factor
// rule dropped rows flat keeps. Exit 0 when the property holds, 1 when a query breaks it, 2 on
// usage or input errors.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "kvtool/artifact.h"
#include "kvtool/dump.h"
#include "kvtool/json.h"
#include "kvtool/query.h"

using namespace kvtool;

namespace {

struct Tally {
  double queries = 0, scored_flat = 0, scored_bound = 0, scored_factor = 0, rows_flat = 0, rows_bound = 0,
         rows_factor = 0;
  int64_t violations = 0, factor_losses = 0;
  json first_violation;
};

bool contains_all(const std::vector<int64_t>& big, const std::vector<int64_t>& small) {
  return std::includes(big.begin(), big.end(), small.begin(), small.end());  // both ascending
}

void check_query(SelectorSet& sel, int64_t layer, int64_t qh, const float* q, int64_t pos, const std::string& quantile,
                 Tally& t) {
  const CandidateReceipt flat = sel.query(layer, qh, q, pos, *sel.params({{"quantile", quantile}, {"flat", "true"}}));
  const CandidateReceipt bound = sel.query(layer, qh, q, pos, *sel.params({{"quantile", quantile}}));
  const CandidateReceipt factor =
      sel.query(layer, qh, q, pos, *sel.params({{"quantile", quantile}, {"coarse_rule", "factor"}}));
  t.queries += 1;
  t.scored_flat += static_cast<double>(flat.centroids_scored);
  t.scored_bound += static_cast<double>(bound.centroids_scored);
  t.scored_factor += static_cast<double>(factor.centroids_scored);
  t.rows_flat += static_cast<double>(flat.candidates.size());
  t.rows_bound += static_cast<double>(bound.candidates.size());
  t.rows_factor += static_cast<double>(factor.candidates.size());
  if (!contains_all(factor.candidates, flat.candidates)) ++t.factor_losses;
  if (contains_all(bound.candidates, flat.candidates)) return;
  if (t.violations++ == 0)
    t.first_violation = {{"layer", layer}, {"q_head", qh}, {"position", pos}, {"quantile", quantile}};
}

json summary(const Tally& t) {
  const double n = std::max(1.0, t.queries);
  return {{"queries", static_cast<int64_t>(t.queries)},
          {"violations", t.violations},
          {"first_violation", t.first_violation},
          {"factor_rule_queries_losing_flat_rows", t.factor_losses},
          {"centroids_scored_mean",
           {{"flat", t.scored_flat / n}, {"bound", t.scored_bound / n}, {"factor", t.scored_factor / n}}},
          {"rows_kept_mean", {{"flat", t.rows_flat / n}, {"bound", t.rows_bound / n}, {"factor", t.rows_factor / n}}}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: kvtool_squeeze_superset ART.kvi DUMP.h5\n");
    return 2;
  }
  try {
    ArtifactReader art(argv[1]);
    DumpReader dump(argv[2]);
    const DumpGeometry& g = dump.info().geo;
    const int64_t d = g.head_dim, end = art.source().coverage_end;
    const std::vector<int64_t> qpos = dump.q_positions();
    SelectorSet sel(art);
    Tally t;
    std::map<std::string, Tally> per_quantile;
    std::vector<float> Q(static_cast<size_t>(g.q_tokens * d));
    for (int64_t layer = 0; layer < g.layers; ++layer)
      for (int64_t qh = 0; qh < g.q_heads; ++qh) {
        dump.read_q(layer, qh, Q.data());
        for (size_t j = 0; j < qpos.size(); ++j) {
          if (qpos[j] < end - 1) continue;
          for (const auto& [key, tau] : art.manifest()["kind_data"]["thresholds"].items())
            for (Tally* each : {&t, &per_quantile[key]})
              check_query(sel, layer, qh, Q.data() + static_cast<int64_t>(j) * d, qpos[j], key, *each);
        }
      }
    json out = summary(t);
    for (const auto& [key, each] : per_quantile) out["per_quantile"][key] = summary(each);
    std::cout << out.dump(2) << "\n";
    return t.violations == 0 && t.queries > 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvtool_squeeze_superset: %s\n", e.what());
    return 2;
  }
}
