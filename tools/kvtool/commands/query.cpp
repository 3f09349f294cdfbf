// kvtool query ART --source DUMP --layer l --q-head h (--position t | --vector FILE) [--budget B]
// [--rerank F] [--min-collisions c] [--quantile q] [--order best|rows] [--flat] [--json]
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "kvtool/admission.h"
#include "kvtool/dump.h"
#include "kvtool/query.h"
#include "kvtool/source_binding.h"
#include "query_input.h"

namespace kvtool::cmd {

namespace {

struct QueryArgs {
  std::string art, source, vector, budget = "0.1";
  int64_t layer = 0, q_head = 0, position = -1, min_collisions = 2;
  std::string quantile, rerank, top_p;  // as given: the kind parses them (USAGE naming the option)
  std::string order = "best";
  bool flat = false;
  std::vector<std::string> options;  // --option NAME=VALUE, passed to the kind as given
  CLI::Option *position_opt = nullptr, *budget_opt = nullptr, *min_collisions_opt = nullptr, *quantile_opt = nullptr,
              *rerank_opt = nullptr, *top_p_opt = nullptr;
};

// The query vector: --vector's file, or the dumped query at --position. Sets `position`.
std::vector<float> query_vector(const QueryArgs& a, const ArtifactReader& r, DumpReader& d, int64_t& position) {
  const int64_t dim = r.source().geo.head_dim;
  position = a.position;
  if (!a.vector.empty()) {
    if (position < 0) position = r.source().coverage_end - 1;
    return cli::read_query_vector(a.vector, dim);
  }
  KVT_CHECK(a.position_opt->count() > 0, USAGE, "give --position (a dumped query) or --vector FILE");
  KVT_CHECK(d.info().has_q, NO_QUERIES, "the dump has no /kv/q; use --vector or dump with --queries");
  auto qpos = d.q_positions();
  auto it = std::find(qpos.begin(), qpos.end(), position);
  KVT_CHECK(it != qpos.end(), NO_QUERIES, "the dump has no query at position " << position);
  KVT_CHECK(a.q_head >= 0 && a.q_head < d.info().geo.q_heads && a.layer >= 0 && a.layer < d.info().geo.layers, USAGE,
            "--layer/--q-head out of range");
  std::vector<float> all(static_cast<size_t>(d.info().geo.q_tokens * dim));
  d.read_q(a.layer, a.q_head, all.data());
  return {all.begin() + (it - qpos.begin()) * dim, all.begin() + (it - qpos.begin() + 1) * dim};
}

// The selector options given on the command line, as the artifact's kind takes them (the others
// apply to other kinds and are ignored).
QuerySettings query_settings(const QueryArgs& a, const KindSpec& kind) {
  Budget::parse(a.budget);  // USAGE for a bad --budget whatever the kind, as before
  QuerySettings s;
  if (a.budget_opt->count() > 0) s["budget"] = a.budget;
  if (a.min_collisions_opt->count() > 0) s["min_collisions"] = std::to_string(a.min_collisions);
  if (a.quantile_opt->count() > 0) s["quantile"] = a.quantile;
  if (a.flat) s["flat"] = "true";
  s = settings_for(kind, s);
  if (a.rerank_opt->count() > 0) s["rerank"] = a.rerank;  // a kind without it: USAGE
  if (a.top_p_opt->count() > 0) s["top_p"] = a.top_p;
  s["order"] = a.order;            // every kind takes it (QueryParams::row_order)
  for (const auto& o : a.options)  // named explicitly: a name the kind does not take is USAGE
    for (const auto& [name, value] : parse_query_settings(o)) s[name] = value;
  return s;
}

void print_receipt(const CandidateReceipt& rc) {
  std::cout << "kind " << rc.kind << ", index generation " << rc.index_generation << ", content digest "
            << rc.content_digest.substr(0, 16) << "…\n";
  std::cout << "layer " << rc.layer << ", query head " << rc.q_head << " (kv head " << rc.kv_head << "), position "
            << rc.position << ": " << rc.candidates.size() << " candidates of " << rc.indexed_rows << " indexed rows, "
            << rc.always_included.size() << " always included\n";
  if (rc.centroids_scored >= 0) std::cout << "centroids scored: " << rc.centroids_scored << "\n";
  if (!rc.inclusion.empty()) {
    std::cout << "inclusion probabilities:";
    for (double u : rc.inclusion) std::cout << cli::strprintf(" %.4g", u);
    std::cout << "\n";
  }
  std::cout << "candidates:";
  for (size_t i = 0; i < rc.candidates.size(); ++i) std::cout << " " << rc.candidates[i];
  std::cout << "\nalways included:";
  for (int64_t id : rc.always_included) std::cout << " " << id;
  std::cout << "\n";
}

int run_query(const QueryArgs& a, const Flags& flags) {
  ArtifactReader r(a.art);
  admit_artifact(r, {});  // what verify checks: a file verify rejects is never queried
  DumpReader d(a.source);
  check_source(r.source(), d, false);
  int64_t position = -1;
  const std::vector<float> q = query_vector(a, r, d, position);
  SelectorSet sel(r);
  KVT_CHECK(a.q_head >= 0 && a.q_head < r.source().geo.q_heads, USAGE,
            "--q-head " << a.q_head << " is outside 0-" << r.source().geo.q_heads - 1);
  KVT_CHECK(a.layer >= 0 && a.layer < r.source().geo.layers, USAGE,
            "--layer " << a.layer << " is outside 0-" << r.source().geo.layers - 1);
  const auto params = sel.params(query_settings(a, sel.kind()));
  // lsh receipts carry inclusion probabilities computed from the full keys; a rerank scores its
  // proposal exactly over them.
  const bool with_keys = sel.kind().needs_keys || reranking(*params);
  std::vector<float> krows;
  KeyRows keys;
  if (with_keys) {
    const int64_t E = r.source().coverage_end, dim = r.source().geo.head_dim;
    krows.resize(static_cast<size_t>(E * dim));
    d.read_k(a.layer, r.source().id.q_to_kv_head[static_cast<size_t>(a.q_head)], 0, E, krows.data());
    keys = KeyRows{krows.data(), E, dim};
  }
  CandidateReceipt rc = sel.query(a.layer, a.q_head, q.data(), position, *params, with_keys ? &keys : nullptr);
  return emit(flags, rc.to_json(), [&] { print_receipt(rc); });
}

}  // namespace

cli::Command register_query(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<QueryArgs>();
  auto* sub = app.add_subcommand(
      "query", "Candidate rows of one (layer, query head) for a dumped query position or a given vector");
  sub->add_option("ART", a->art, "artifact (.kvi)")->required();
  sub->add_option("--source", a->source, "dump the artifact was built from (checked by content digest)")->required();
  sub->add_option("--layer", a->layer, "layer")->required();
  sub->add_option("--q-head", a->q_head, "query head (its kv head comes from q_to_kv_head)")->required();
  a->position_opt =
      sub->add_option("--position", a->position, "use the dumped query at this position (>= coverage end - 1)");
  auto* qv = sub->add_option("--vector", a->vector,
                             "query vector file: a 1-D .npy, d numbers as text, or raw float32 (.f32/.bin)");
  a->position_opt->excludes(qv);
  a->budget_opt = sub->add_option("--budget", a->budget,
                                  "index-chosen rows: a fraction of the indexed rows (0.1, 10%) or a count (64)")
                      ->capture_default_str();
  a->rerank_opt = sub->add_option("--rerank", a->rerank,
                                  "pq, clusterkv: the index proposes F x budget rows, exact q.k over the dump's keys "
                                  "keeps the budget (as an engine holding full K in host memory)")
                      ->type_name("FLOAT");
  a->top_p_opt =
      sub->add_option("--top-p", a->top_p,
                      "pq, clusterkv: an adaptive budget: of the budget's rows, best first, the fewest whose "
                      "softmax mass as the index estimates it reaches P (the budget is the cap)")
          ->type_name("P");
  a->min_collisions_opt =
      sub->add_option("--min-collisions", a->min_collisions, "lsh: emit rows colliding in at least c tables")
          ->capture_default_str();
  a->quantile_opt =
      sub->add_option("--quantile", a->quantile,
                      "squeeze: calibrated quantile whose threshold to apply (default: the first calibrated)")
          ->type_name("FLOAT");
  sub->add_option(
      "-o,--option", a->options,
      "a query option of the artifact's kind as NAME=VALUE (any kind's own option; see its man page); may be repeated");
  sub->add_option("--order", a->order,
                  "best: candidates best first; rows: the same candidates and scores in increasing row order (the "
                  "order an engine gathers rows in; pq lists them without sorting)")
      ->check(CLI::IsMember({"best", "rows"}))
      ->capture_default_str();
  sub->add_flag("--flat", a->flat,
                "squeeze: score every fine centroid (the reference's lookup) instead of the two-level pass");
  sub->add_flag("--json", flags.json, "machine-readable receipt");
  return {sub, [a, &flags] { return run_query(*a, flags); }};
}

}  // namespace kvtool::cmd
