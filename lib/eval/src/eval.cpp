// `kvtool eval`: the settings swept, the loop over layers, heads and dumped queries, and the
// summaries. The dense reference, the metrics and the estimator are in eval_reference.cpp and
// eval_estimator.cpp; writing CSV/SVG is the tool's (tools/common/eval_output.cpp).
#include <algorithm>
#include <map>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <future>
#include <numeric>
#include <sstream>
#include <thread>

#include "kvtool/stats.h"
#include "impl/eval_parts.h"
#include "kvtool/ordered_pool.h"
#include "kvtool/builder.h"
#include "kvtool/error.h"
#include "kvtool/prng.h"
#include "kvtool/progress.h"
#include "kvtool/eval.h"
#include "kvtool/source_binding.h"

namespace kvtool {

using eval::eval_settings;
using eval::Setting;

// Every combination of the swept values of the kind's query options, first option outermost.
std::vector<Setting> eval::eval_settings(const ArtifactReader& art, const KindSpec& kind, const EvalOptions& opt,
                                         int64_t indexed_rows) {
  for (const auto& [name, values] : opt.sweep) check_query_settings(kind, {{name, values.empty() ? "" : values[0]}});
  std::vector<QuerySettings> combos{{}};
  for (const auto& o : kind.query_options) {
    std::vector<std::string> values;
    if (auto it = opt.sweep.find(o.name); it != opt.sweep.end() && !it->second.empty())
      values = it->second;
    else if (kind.default_sweep)
      values = kind.default_sweep(art, o.name);
    if (values.empty()) values = {o.default_value};
    std::vector<QuerySettings> next;
    for (const auto& c : combos)
      for (const auto& v : values) {
        QuerySettings s = c;
        if (!v.empty()) s[o.name] = v;
        next.push_back(std::move(s));
      }
    combos = std::move(next);
  }
  std::vector<Setting> out;
  for (const auto& c : combos) {
    Setting st{kind.parse_query(art, c), json::object(), ""};
    st.selector = st.params->setting();
    // Options a setting leaves unused (squeeze's quantile under a budget) would repeat it.
    if (std::any_of(out.begin(), out.end(), [&](const Setting& o) { return o.params->setting() == st.selector; }))
      continue;
    st.selector["kind"] = kind.name;
    st.selector["indexed_rows"] = indexed_rows;
    st.label = st.params->label();
    out.push_back(std::move(st));
  }
  return out;
}

namespace {

struct Acc {
  std::vector<double> retained, oracle, recall, err, rel_err, frac, rows;
  std::vector<double> est_err, est_rel_err, sampled_frac;  // sampling kinds only
  std::vector<double> scored;                              // centroid kinds: centroids scored per query
  std::vector<double> kv_union;                            // per query: its KV head's union fraction
  void add(double r, double o, double rc, double e, double re, double f, double n) {
    retained.push_back(r);
    oracle.push_back(o);
    recall.push_back(rc);
    err.push_back(e);
    rel_err.push_back(re);
    frac.push_back(f);
    rows.push_back(n);
  }
};

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size();
}
double p10(const std::vector<double>& v) { return nearest_rank(v, 0.1); }

EvalStats summary(const Acc& a, int64_t row_bytes) {
  EvalStats st;
  st.queries = static_cast<int64_t>(a.retained.size());
  st.retained_mass_mean = mean(a.retained);
  st.retained_mass_p10 = p10(a.retained);
  st.oracle_retained_mass_mean = mean(a.oracle);
  st.quality_ratio = st.oracle_retained_mass_mean > 0 ? st.retained_mass_mean / st.oracle_retained_mass_mean : 0;
  st.omitted_mass_mean = 1 - st.retained_mass_mean;
  st.recall_support_mean = mean(a.recall);
  st.output_error_mean = mean(a.err);
  st.output_error_p90 = nearest_rank(a.err, 0.9);
  st.relative_output_error_mean = mean(a.rel_err);
  st.selected_fraction_mean = mean(a.frac);
  st.selected_rows_mean = mean(a.rows);
  st.selected_fraction_kv_union_mean = mean(a.kv_union);
  st.selected_row_bytes_mean = st.selected_rows_mean * static_cast<double>(row_bytes);
  if (!a.scored.empty()) st.centroids_scored_mean = mean(a.scored);
  if (!a.est_err.empty()) {
    st.estimator_output_error_mean = mean(a.est_err);
    st.estimator_relative_output_error_mean = mean(a.est_rel_err);
    st.sampled_fraction_mean = mean(a.sampled_frac);
  }
  return st;
}

// The settings' accumulators: over all queries and per layer.
struct Totals {
  std::vector<Acc> overall;
  std::vector<std::vector<Acc>> per_layer;
  Totals(size_t settings, int64_t layers)
      : overall(settings), per_layer(settings, std::vector<Acc>(static_cast<size_t>(layers))) {}
};

// One evaluated (query, setting): its CSV record and what the summaries take besides.
struct Measured {
  EvalRecord rec;
  double output_norm = 0;
  // The union over the query heads of its KV head of their rows at the same position and setting,
  // as a fraction of the support: what a grouped-query engine fetches for this query.
  double kv_union = 0;
  int64_t centroids_scored = -1, candidates = 0;
};

// One query's metrics recorded under setting `bi` (layer offset `li`).
void record(Totals& t, size_t bi, size_t li, const Measured& m, bool sampling, int64_t indexed) {
  const EvalRecord& r = m.rec;
  for (Acc* a : {&t.overall[bi], &t.per_layer[bi][li]}) {
    a->add(r.retained_mass, r.oracle_retained_mass, r.recall_support, r.output_error, r.relative_output_error,
           r.selected_fraction, static_cast<double>(r.selected_rows));
    a->kv_union.push_back(m.kv_union);
    if (m.centroids_scored >= 0) a->scored.push_back(static_cast<double>(m.centroids_scored));
    if (!sampling) continue;
    a->est_err.push_back(r.estimator_output_error);
    a->est_rel_err.push_back(m.output_norm > 0 ? r.estimator_output_error / m.output_norm : 0);
    a->sampled_frac.push_back(indexed > 0 ? static_cast<double>(m.candidates) / indexed : 0);
  }
}

// The summary of every setting: overall, then per layer.
std::vector<EvalSetting> setting_summaries(const Totals& t, std::vector<Setting>& settings, int64_t lf, int64_t ll,
                                           int64_t row_bytes, uint64_t index_bytes, uint64_t metadata_bytes) {
  std::vector<EvalSetting> out;
  for (size_t bi = 0; bi < settings.size(); ++bi) {
    EvalSetting e;
    e.label = settings[bi].label;
    e.selector = std::move(settings[bi].selector);
    e.overall = summary(t.overall[bi], row_bytes);
    for (int64_t l = lf; l <= ll; ++l)
      e.per_layer.emplace_back(l, summary(t.per_layer[bi][static_cast<size_t>(l - lf)], row_bytes));
    e.index_bytes = index_bytes;
    e.metadata_bytes = metadata_bytes;
    out.push_back(std::move(e));
  }
  return out;
}

// The dumped queries evaluated: positions at or after the coverage end, inside the dump, then the
// sample the options ask for (every k-th, or n at random without replacement, in position order).
std::vector<size_t> eval_queries(const std::vector<int64_t>& qpos, int64_t E, int64_t T, const PositionSample& ps) {
  std::vector<size_t> sel;
  for (size_t j = 0; j < qpos.size(); ++j)
    if (qpos[j] >= E && qpos[j] < T) sel.push_back(j);
  KVT_CHECK(!sel.empty(), NO_QUERIES, "the dump has no queries at positions >= the coverage end " << E);
  KVT_CHECK(ps.rule == PositionSample::all || ps.value > 0, USAGE, "a position sample needs a count above 0");
  if (ps.rule == PositionSample::every) {
    std::vector<size_t> kept;
    for (size_t i = 0; i < sel.size(); i += static_cast<size_t>(ps.value)) kept.push_back(sel[i]);
    return kept;
  }
  if (ps.rule == PositionSample::random && static_cast<size_t>(ps.value) < sel.size()) {
    SplitMix64 rng(ps.seed);
    for (size_t i = 0; i < static_cast<size_t>(ps.value); ++i)  // partial Fisher-Yates
      std::swap(sel[i], sel[i + rng.below(sel.size() - i)]);
    sel.resize(static_cast<size_t>(ps.value));
    std::sort(sel.begin(), sel.end());
  }
  return sel;
}

// What every (layer, kv head) pass shares; read-only while the workers run.
struct EvalRun {
  const DumpReader& dump;
  SelectorSet& sel;  // preloaded: concurrent queries are safe
  const std::vector<Setting>& settings;
  const std::vector<int64_t>& qpos;
  const std::vector<size_t>& qsel;
  int64_t E, d, indexed;
  bool sampling, share_kv_head;
};

// One worker's buffers, reused from one kv head to the next (tens of MiB at 32K rows: allocated
// once per worker, not per head, so there are no page faults in the loop).
struct Worker {
  std::vector<float> K, V;
  std::vector<std::vector<float>> Q;  // per query head
  std::vector<float> Qgroup;          // with share_kv_head: the group's mean query per dumped query
  std::vector<double> Qd;
  eval::DenseSupport support;
  eval::DenseBlock block;
  eval::OracleIndex oracle;
  std::vector<eval::ReceiptMetrics> metrics;  // per query of the block
  eval::KeptOutputs kept;
  // Rows kept per (dumped query, setting) over the KV head's query heads: key j * settings + bi.
  std::map<size_t, std::vector<int64_t>> group_rows;
  std::vector<char> seen;  // per row of the support: set_kv_unions' marks, all zero between uses
};

using Item = std::pair<int64_t, size_t>;  // (query head, index into the dumped queries)

// The block's queries under setting `bi`: receipts and metrics per query, then the output errors
// of the whole block at once. out[k * settings + bi] is item k's result.
void eval_setting(const EvalRun& run, Worker& w, int64_t l, int64_t kvh, const std::vector<Item>& items, size_t b0,
                  size_t bi, std::vector<Measured>& out) {
  const KeyRows keys{w.K.data(), run.E, run.d};
  const Setting& st = run.settings[bi];
  const int64_t n = w.block.n;
  for (int64_t i = 0; i < n; ++i) {
    const auto [h, j] = items[b0 + static_cast<size_t>(i)];
    const float* q =
        (run.share_kv_head ? w.Qgroup.data() : w.Q[static_cast<size_t>(h)].data()) + static_cast<int64_t>(j) * run.d;
    // The keys for lsh's inclusion probabilities and for a budget kind's rerank.
    const CandidateReceipt rc = run.sel.query(l, h, q, std::max<int64_t>(run.qpos[j], run.E - 1), *st.params, &keys);
    eval::ReceiptMetrics& m = w.metrics[static_cast<size_t>(i)];
    const eval::DenseReference ref = w.block.row(i);
    m.measure(ref, rc, w.oracle, i, run.E);
    auto& group = w.group_rows[j * run.settings.size() + bi];
    group.insert(group.end(), m.ids.begin(), m.ids.end());
    const double est = run.sampling ? eval::sampled_output_error(ref, m.kept, rc, w.V.data(), run.E, run.d) : 0;
    Measured& r = out[(b0 + static_cast<size_t>(i)) * run.settings.size() + bi];
    r.rec = {st.label, l, h, kvh, run.qpos[j], m.rows, m.fraction, m.retained, m.oracle, m.recall, 0, 0, est};
    r.centroids_scored = rc.centroids_scored;
    r.candidates = static_cast<int64_t>(rc.candidates.size());
  }
  w.kept.compute(w.block, w.metrics, w.support);
  for (int64_t i = 0; i < n; ++i) {
    eval::ReceiptMetrics& m = w.metrics[static_cast<size_t>(i)];
    m.output(w.block.row(i), w.kept.out.data() + i * run.d, run.d);
    Measured& r = out[(b0 + static_cast<size_t>(i)) * run.settings.size() + bi];
    r.rec.output_error = m.error;
    r.rec.relative_output_error = m.relative_error;
    r.output_norm = m.output_norm;
  }
}

// Each query's KV-head union (Measured::kv_union) from the rows its group kept; clears them.
void set_kv_unions(Worker& w, const std::vector<Item>& items, size_t settings, int64_t E, std::vector<Measured>& out) {
  std::map<size_t, double> fraction;
  // Distinct rows counted by marking them in a flag per row (then unmarking the same rows):
  // linear in the rows kept, where sorting them took 4 % of eval's CPU at 32K rows.
  w.seen.assign(static_cast<size_t>(E), 0);
  for (auto& [key, rows] : w.group_rows) {
    int64_t n = 0;
    for (int64_t r : rows) {
      n += !w.seen[static_cast<size_t>(r)];
      w.seen[static_cast<size_t>(r)] = 1;
    }
    for (int64_t r : rows) w.seen[static_cast<size_t>(r)] = 0;
    fraction[key] = static_cast<double>(n) / static_cast<double>(E);
  }
  for (size_t k = 0; k < items.size(); ++k)
    for (size_t bi = 0; bi < settings; ++bi)
      out[k * settings + bi].kv_union = fraction[items[k].second * settings + bi];
  w.group_rows.clear();
}

// The KV head's mean query per dumped query (its query heads' vectors are in w.Q).
void group_queries(const EvalRun& run, Worker& w, int64_t kvh) {
  const auto& info = run.dump.info();
  const int64_t d = run.d, group = info.geo.q_heads / info.geo.kv_heads;
  std::vector<float> heads(static_cast<size_t>(group * d));
  w.Qgroup.resize(static_cast<size_t>(info.geo.q_tokens * d));
  for (size_t j : run.qsel) {
    int64_t g = 0;
    for (int64_t h = 0; h < info.geo.q_heads; ++h)
      if (info.id.q_to_kv_head[static_cast<size_t>(h)] == kvh)
        std::copy_n(w.Q[static_cast<size_t>(h)].data() + static_cast<int64_t>(j) * d, d, heads.data() + g++ * d);
    group_mean_query(heads.data(), g, d, w.Qgroup.data() + static_cast<int64_t>(j) * d);
  }
}

// Every query of one (layer, kv head), in record order: query heads ascending, positions
// ascending, settings in order; the dense references computed a block of queries at a time.
std::vector<Measured> eval_kv_head(const EvalRun& run, Worker& w, int64_t l, int64_t kvh) {
  const auto& info = run.dump.info();
  const int64_t E = run.E, d = run.d;
  for (auto* m : {&w.K, &w.V}) {
    eval::reserve_huge(*m, static_cast<size_t>(E * d));
    m->resize(static_cast<size_t>(E * d));
  }
  run.dump.read_k(l, kvh, 0, E, w.K.data());
  run.dump.read_v(l, kvh, 0, E, w.V.data());
  w.support.load(w.K.data(), w.V.data(), E, d);
  std::vector<Item> items;
  w.Q.resize(static_cast<size_t>(info.geo.q_heads));
  for (int64_t h = 0; h < info.geo.q_heads; ++h) {
    if (info.id.q_to_kv_head[static_cast<size_t>(h)] != kvh) continue;
    w.Q[static_cast<size_t>(h)].resize(static_cast<size_t>(info.geo.q_tokens * d));
    run.dump.read_q(l, h, w.Q[static_cast<size_t>(h)].data());
    for (size_t j : run.qsel) items.emplace_back(h, j);
  }
  if (run.share_kv_head) group_queries(run, w, kvh);
  std::vector<Measured> out(items.size() * run.settings.size());
  const auto nb = static_cast<size_t>(eval::DenseBlock::block_rows(E));
  for (size_t b0 = 0; b0 < items.size(); b0 += nb) {
    const size_t b1 = std::min(items.size(), b0 + nb);
    w.Qd.clear();
    for (size_t i = b0; i < b1; ++i) {
      const float* q = w.Q[static_cast<size_t>(items[i].first)].data() + static_cast<int64_t>(items[i].second) * d;
      w.Qd.insert(w.Qd.end(), q, q + d);
    }
    w.block.compute(w.Qd.data(), static_cast<int64_t>(b1 - b0), w.support, &w.oracle);
    if (w.metrics.size() < b1 - b0) w.metrics.resize(b1 - b0);
    for (size_t bi = 0; bi < run.settings.size(); ++bi) eval_setting(run, w, l, kvh, items, b0, bi, out);
  }
  set_kv_unions(w, items, run.settings.size(), E, out);
  return out;
}

// The (layer, kv head) passes on `threads` workers, each with single-threaded BLAS, recorded in
// (layer, kv head) order on this thread: the same report and records for any thread count.
// The second half of check_source (every covered K/V byte through SHA-256, about `kvtool verify`'s
// time) on its own thread beside the passes, which it stops at their next part when the rows
// differ. finish() rethrows its error; evaluate() reports that error before any of its own, the
// order in which they came when the check ran first.
class RowsCheck {
 public:
  RowsCheck(const SourceBinding& b, const DumpReader& dump)
      : done_(std::async(std::launch::async, [this, &b, &dump] {
          try {
            check_source_rows(b, dump);
          } catch (...) {
            failed_ = true;
            throw;
          }
        })) {}
  ~RowsCheck() {
    if (done_.valid()) done_.wait();
  }
  bool failed() const { return failed_.load(); }
  void finish() {
    if (done_.valid()) done_.get();
  }

 private:
  std::atomic<bool> failed_{false};
  std::future<void> done_;
};

void run_passes(const EvalRun& run, int threads, int64_t lf, int64_t ll, int64_t kv_heads, Totals& totals,
                std::vector<EvalRecord>* records, Progress& progress, const RowsCheck& rows_check) {
  const int64_t parts = (ll - lf + 1) * kv_heads;
  std::vector<Worker> workers(static_cast<size_t>(threads));
  auto produce = [&](int64_t i, int worker) {
    KVT_CHECK(!rows_check.failed(), INTERNAL, "eval stopped: the dump's rows differ from the artifact's source");
    pin_blas_single_thread();
    return eval_kv_head(run, workers[static_cast<size_t>(worker)], lf + i / kv_heads, i % kv_heads);
  };
  auto consume = [&](int64_t i, std::vector<Measured>&& out) {
    const auto li = static_cast<size_t>(i / kv_heads);
    for (size_t k = 0; k < out.size(); ++k) {
      record(totals, k % run.settings.size(), li, out[k], run.sampling, run.indexed);
      if (records) records->push_back(std::move(out[k].rec));
    }
    progress.advance();
  };
  run_ordered(parts, OrderedPoolOptions{threads, 2 * static_cast<int64_t>(threads)}, produce, consume);
}

// evaluate() once the dump's fields match the artifact's binding, its rows being checked beside.
EvalReport evaluate_bound(const ArtifactReader& art, const DumpReader& dump, const EvalOptions& opt,
                          std::vector<EvalRecord>* records, const RowsCheck& rows_check) {
  // OpenBLAS splits a dgemm differently for different thread counts, which changes the last bits:
  // one BLAS thread per worker keeps the report the same bytes whatever the machine and the number
  // of workers (as builds do, builder.h).
  const auto& info = dump.info();
  const auto& g = info.geo;
  KVT_CHECK(info.has_q, NO_QUERIES, "the dump has no /kv/q queries to evaluate with (a dump written with its queries)");
  SelectorSet sel(art);
  const IndexedRows rows = IndexedRows::of(art);
  const int64_t E = rows.coverage_end, d = g.head_dim;
  KVT_CHECK(E > 0, USAGE, "the artifact covers no rows");
  const json& params = art.manifest()["params"];
  const int64_t lf = params["layers"][0], ll = params["layers"][1];
  const std::vector<int64_t> qpos = dump.q_positions();
  const std::vector<size_t> qsel = eval_queries(qpos, E, g.tokens, opt.positions);
  const KindSpec& kind = sel.kind();
  std::vector<Setting> settings = eval_settings(art, kind, opt, rows.count());
  Totals totals(settings.size(), ll - lf + 1);
  Progress progress("kvtool eval", (ll - lf + 1) * g.kv_heads, opt.quiet);
  const bool sampling = kind.mode == SelectionMode::collision_sampling;
  sel.preload();
  const EvalRun run{dump, sel, settings, qpos, qsel, E, d, rows.count(), sampling, opt.share_kv_head};
  const int64_t parts = (ll - lf + 1) * g.kv_heads;
  const int threads = static_cast<int>(std::min<int64_t>(
      parts, opt.threads > 0 ? opt.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))));
  run_passes(run, threads, lf, ll, g.kv_heads, totals, records, progress, rows_check);
  progress.finish();
  const IndexBytes index = kvtool::index_bytes(art);
  const int64_t row_bytes = 2 * d * static_cast<int64_t>(dtype_size(g.dtype));
  EvalReport rep;
  rep.kind = art.kind();
  rep.artifact = art.path();
  rep.source = dump.path();
  rep.mode = kind.mode;
  rep.coverage_end = E;
  rep.indexed_rows = rows.count();
  rep.always_included_rows = E - rows.count();
  rep.query_positions = qsel.size();
  for (size_t j : qsel) rep.positions_evaluated.push_back(qpos[j]);
  rep.positions = opt.positions;
  rep.share_kv_head = opt.share_kv_head;
  rep.layer_first = lf;
  rep.layer_last = ll;
  rep.selected_row_bytes_per_row = row_bytes;
  rep.settings = setting_summaries(totals, settings, lf, ll, row_bytes, index.stored, art.file_size() - index.stored);
  rep.index = index;
  return rep;
}

}  // namespace

void check_eval_settings(const ArtifactReader& art, const EvalOptions& opt) {
  const KindSpec* kind = find_kind(art.kind());
  KVT_CHECK(kind, UNKNOWN_KIND, "artifact kind '" << art.kind() << "' is not known to this kvtool");
  eval_settings(art, *kind, opt, IndexedRows::of(art).count());
}

EvalReport evaluate(const ArtifactReader& art, const DumpReader& dump, const EvalOptions& opt,
                    std::vector<EvalRecord>* records) {
  check_source_fields(art.source(), dump);
  RowsCheck rows_check(art.source(), dump);
  EvalReport rep;
  try {
    rep = evaluate_bound(art, dump, opt, records, rows_check);
  } catch (...) {
    rows_check.finish();
    throw;
  }
  rows_check.finish();
  return rep;
}

PositionSample PositionSample::parse(const std::string& text, uint64_t seed) {
  PositionSample ps;
  ps.seed = seed;
  if (text == "all") return ps;
  const auto colon = text.find(':');
  const std::string rule = text.substr(0, colon);
  KVT_CHECK(colon != std::string::npos && (rule == "every" || rule == "random"), USAGE,
            "positions: all, every:K or random:N, not '" << text << "'");
  ps.rule = rule == "every" ? every : random;
  const std::string count = text.substr(colon + 1);
  size_t used = 0;
  try {
    ps.value = std::stoll(count, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  KVT_CHECK(used == count.size() && !count.empty() && ps.value > 0, USAGE,
            "positions " << rule << ": needs a whole number above 0, not '" << count << "'");
  return ps;
}

json PositionSample::to_json(const std::vector<int64_t>& evaluated) const {
  static const char* names[] = {"all", "every", "random"};
  json j = {{"rule", names[rule]}, {"positions", evaluated}};
  if (rule != all) j["value"] = value;
  if (rule == random) j["seed"] = seed;
  return j;
}

json EvalStats::to_json() const {
  json j = {{"queries", queries},
            {"retained_mass_mean", retained_mass_mean},
            {"retained_mass_p10", retained_mass_p10},
            {"oracle_retained_mass_mean", oracle_retained_mass_mean},
            {"quality_ratio", quality_ratio},
            {"omitted_mass_mean", omitted_mass_mean},
            {"recall_support_mean", recall_support_mean},
            {"output_error_mean", output_error_mean},
            {"output_error_p90", output_error_p90},
            {"relative_output_error_mean", relative_output_error_mean},
            {"selected_fraction_mean", selected_fraction_mean},
            {"selected_fraction_kv_union_mean", selected_fraction_kv_union_mean},
            {"selected_rows_mean", selected_rows_mean},
            {"selected_row_bytes_mean", selected_row_bytes_mean}};
  if (centroids_scored_mean) j["centroids_scored_mean"] = *centroids_scored_mean;
  if (estimator_output_error_mean) j["estimator_output_error_mean"] = *estimator_output_error_mean;
  if (estimator_relative_output_error_mean)
    j["estimator_relative_output_error_mean"] = *estimator_relative_output_error_mean;
  if (sampled_fraction_mean) j["sampled_fraction_mean"] = *sampled_fraction_mean;
  return j;
}

json EvalSetting::to_json() const {
  json j = overall.to_json();
  j["selector"] = selector;
  j["index_bytes"] = index_bytes;
  j["metadata_bytes"] = metadata_bytes;
  json layers = json::array();
  for (const auto& [layer, st] : per_layer) {
    json lj = st.to_json();
    lj["layer"] = layer;
    layers.push_back(lj);
  }
  j["per_layer"] = layers;
  return j;
}

json EvalReport::to_json() const {
  json budgets = json::array();
  for (const auto& s : settings) budgets.push_back(s.to_json());
  return {{"schema_version", kJsonSchemaVersion},
          {"kind", kind},
          {"artifact", artifact},
          {"source", source},
          {"coverage", {0, coverage_end}},
          {"indexed_rows", indexed_rows},
          {"always_included_rows", always_included_rows},
          {"query_positions", query_positions},
          {"position_sample", positions.to_json(positions_evaluated)},
          {"share_kv_head", share_kv_head},
          {"layers", {layer_first, layer_last}},
          {"selected_row_bytes_per_row", selected_row_bytes_per_row},
          {"index_bytes", index.to_json()},
          {"budgets", budgets}};
}

}  // namespace kvtool
