#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "impl/stats.h"
#include "kvtool/atomic_file.h"
#include "lsh/lsh.h"
#include "kvtool/error.h"
#include "kvtool/progress.h"
#include "kvtool/eval.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

struct Acc {
  std::vector<double> retained, oracle, recall, err, rel_err, frac, rows;
  std::vector<double> est_err, est_rel_err, sampled_frac;  // sampling kinds only
  std::vector<double> scored;                              // centroid kinds: centroids scored per query
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

double mean(const std::vector<double>& v) { return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / v.size(); }
double p10(const std::vector<double>& v) { return nearest_rank(v, 0.1); }

json summary(const Acc& a, int64_t row_bytes) {
  double rm = mean(a.retained), om = mean(a.oracle);
  json extra = json::object();
  if (!a.scored.empty()) extra["centroids_scored_mean"] = mean(a.scored);
  if (!a.est_err.empty()) {
    extra["estimator_output_error_mean"] = mean(a.est_err);
    extra["estimator_relative_output_error_mean"] = mean(a.est_rel_err);
    extra["sampled_fraction_mean"] = mean(a.sampled_frac);
  }
  json base = {{"queries", a.retained.size()},
          {"retained_mass_mean", rm},
          {"retained_mass_p10", p10(a.retained)},
          {"oracle_retained_mass_mean", om},
          {"quality_ratio", om > 0 ? rm / om : 0},
          {"omitted_mass_mean", 1 - rm},
          {"recall_support_mean", mean(a.recall)},
          {"output_error_mean", mean(a.err)},
          {"output_error_p90", a.err.empty() ? 0 : [&] { auto v = a.err; std::sort(v.begin(), v.end());
             return v[std::min(v.size() - 1, static_cast<size_t>(std::ceil(0.9 * v.size())) - 1)]; }()},
          {"relative_output_error_mean", mean(a.rel_err)},
          {"selected_fraction_mean", mean(a.frac)},
          {"selected_rows_mean", mean(a.rows)},
          {"selected_row_bytes_mean", mean(a.rows) * static_cast<double>(row_bytes)}};
  base.update(extra);
  return base;
}

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}

void write_plot(const std::string& path, const json& budgets, const std::string& title) {
  const double W = 720, H = 480, L = 70, R = 180, T = 50, B = 60;
  double xmax = 0;
  for (const auto& b : budgets) xmax = std::max(xmax, b["selected_fraction_mean"].get<double>());
  xmax = std::min(1.0, std::max(0.05, std::ceil(xmax * 1.15 * 20) / 20));
  auto X = [&](double f) { return L + (W - L - R) * f / xmax; };
  auto Y = [&](double m) { return T + (H - T - B) * (1 - m); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H << "' font-family='sans-serif' font-size='12'>\n";
  s << "<rect width='100%' height='100%' fill='white'/>\n";
  s << "<text x='" << W / 2 - 60 << "' y='25' font-size='15'>" << title << "</text>\n";
  for (int i = 0; i <= 10; ++i) {
    double m = i / 10.0, f = xmax * i / 10.0;
    s << "<line x1='" << L << "' x2='" << W - R << "' y1='" << Y(m) << "' y2='" << Y(m) << "' stroke='#eee'/>\n";
    s << "<text x='" << L - 35 << "' y='" << Y(m) + 4 << "'>" << fmt(m) << "</text>\n";
    s << "<line y1='" << T << "' y2='" << H - B << "' x1='" << X(f) << "' x2='" << X(f) << "' stroke='#eee'/>\n";
    s << "<text x='" << X(f) - 12 << "' y='" << H - B + 18 << "'>" << fmt(f) << "</text>\n";
  }
  s << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B << "' fill='none' stroke='black'/>\n";
  s << "<text x='" << (L + W - R) / 2 - 80 << "' y='" << H - 15 << "'>selected fraction of covered rows</text>\n";
  s << "<text transform='translate(20," << (T + H - B) / 2 + 60 << ") rotate(-90)'>retained attention mass</text>\n";
  auto series = [&](const char* key, const char* color, const char* label, double ly) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& b : budgets) pts.emplace_back(b["selected_fraction_mean"].get<double>(), b[key].get<double>());
    std::sort(pts.begin(), pts.end());
    s << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (auto& [f, m] : pts) s << X(f) << "," << Y(m) << " ";
    s << "'/>\n";
    for (auto& [f, m] : pts) s << "<circle cx='" << X(f) << "' cy='" << Y(m) << "' r='4' fill='" << color << "'/>\n";
    s << "<line x1='" << W - R + 15 << "' x2='" << W - R + 40 << "' y1='" << ly << "' y2='" << ly << "' stroke='" << color
      << "' stroke-width='2'/><text x='" << W - R + 45 << "' y='" << ly + 4 << "'>" << label << "</text>\n";
  };
  series("oracle_retained_mass_mean", "#888888", "dense top-k oracle", T + 20);
  series("retained_mass_mean", "#1f77b4", "index (mean)", T + 40);
  series("retained_mass_p10", "#ff7f0e", "index (10th pct)", T + 60);
  s << "</svg>\n";
  std::string text = s.str();
  AtomicOutput out(path, true);
  write_all(out.fd(), text.data(), text.size(), path);
  out.commit();
}

}  // namespace

json evaluate(const ArtifactReader& art, const DumpReader& dump, const EvalOptions& opt) {
  check_source(art.source(), dump, false);
  const auto& info = dump.info();
  const auto& g = info.geo;
  KVT_CHECK(info.has_q, NO_QUERIES, "the dump has no /kv/q queries to evaluate with (dump it with --queries)");
  SelectorSet sel(art);
  const IndexedRows rows = IndexedRows::of(art);
  const int64_t E = rows.coverage_end, d = g.head_dim;
  KVT_CHECK(E > 0, USAGE, "the artifact covers no rows");
  const json& params = art.manifest()["params"];
  int64_t lf = params["layers"][0], ll = params["layers"][1];
  std::vector<int64_t> qpos = dump.q_positions();
  std::vector<size_t> qsel;
  for (size_t j = 0; j < qpos.size(); ++j)
    if (qpos[j] >= E && qpos[j] < g.tokens) qsel.push_back(j);
  KVT_CHECK(!qsel.empty(), NO_QUERIES, "the dump has no queries at positions >= the coverage end " << E);
  const int64_t row_bytes = 2 * d * static_cast<int64_t>(dtype_size(g.dtype));
  uint64_t index_bytes = 0;
  for (const auto& s : art.sections()) index_bytes += s.stored_size;
  const uint64_t metadata_bytes = art.file_size() - index_bytes;

  // Selector settings: budgets for ranking kinds, collision thresholds for sampling kinds (lsh).
  const bool sampling = sel.needs_keys();
  struct Setting {
    Budget budget;
    int64_t min_collisions = 2;
    json selector;
    std::string label;
    double quantile = -1;
    bool flat = false;
  };
  std::vector<Setting> settings;
  const bool thresholded = art.kind() == "squeeze";
  if (thresholded) {
    std::vector<double> qs = opt.quantiles;
    if (qs.empty())
      for (const auto& q : params["quantiles"]) qs.push_back(q.get<double>());
    for (double q : qs)
      for (bool flat : {false, true})
        settings.push_back({Budget{}, 2,
                            {{"kind", art.kind()}, {"quantile", q}, {"mode", flat ? "flat" : "hierarchical"},
                             {"indexed_rows", rows.count()}},
                            "q=" + json(q).dump() + (flat ? "/flat" : "/hier"), q, flat});
  } else if (sampling) {
    for (int64_t c : opt.min_collisions)
      settings.push_back({Budget{}, c,
                          {{"kind", art.kind()}, {"bits", params["bits"]}, {"tables", params["tables"]}, {"min_collisions", c},
                           {"indexed_rows", rows.count()}},
                          "c=" + std::to_string(c)});
  } else {
    for (const auto& b : opt.budgets)
      settings.push_back({b, 2,
                          {{"kind", art.kind()}, {"budget", b.str()}, {"budget_is_fraction", b.fraction}, {"indexed_rows", rows.count()}},
                          b.str()});
  }
  std::vector<Acc> overall(settings.size());
  std::vector<std::vector<Acc>> per_layer(settings.size(), std::vector<Acc>(static_cast<size_t>(ll - lf + 1)));
  std::unique_ptr<AtomicOutput> csv;
  std::string csv_text;
  if (!opt.csv_path.empty()) {
    csv = std::make_unique<AtomicOutput>(opt.csv_path, true);
    csv_text = "selector,layer,q_head,kv_head,position,selected_rows,selected_fraction,retained_mass,oracle_retained_mass,"
               "recall_support,output_error,relative_output_error,estimator_output_error\n";
  }
  Progress progress("kvtool eval", (ll - lf + 1) * g.kv_heads, opt.quiet);
  std::vector<float> K(static_cast<size_t>(E * d)), V(K.size()), Q(static_cast<size_t>(g.q_tokens * d));
  std::vector<double> p(static_cast<size_t>(E));
  std::vector<char> in_r(static_cast<size_t>(E));
  std::vector<int64_t> order(static_cast<size_t>(E));
  for (int64_t l = lf; l <= ll; ++l)
    for (int64_t kvh = 0; kvh < g.kv_heads; ++kvh) {
      dump.read_k(l, kvh, 0, E, K.data());
      dump.read_v(l, kvh, 0, E, V.data());
      for (int64_t h = 0; h < g.q_heads; ++h) {
        if (info.id.q_to_kv_head[static_cast<size_t>(h)] != kvh) continue;
        dump.read_q(l, h, Q.data());
        for (size_t j : qsel) {
          const float* q = Q.data() + static_cast<int64_t>(j) * d;
          // Dense reference over the covered support [0, E), with max-subtraction.
          double mx = -INFINITY;
          for (int64_t i = 0; i < E; ++i) {
            double z = 0;
            for (int64_t t = 0; t < d; ++t) z += static_cast<double>(q[t]) * K[i * d + t];
            p[i] = z / std::sqrt(static_cast<double>(d));
            mx = std::max(mx, p[i]);
          }
          double sum = 0;
          for (auto& x : p) sum += (x = std::exp(x - mx));
          for (auto& x : p) x /= sum;
          // log p_i + log-sum-exp restores the logit z_i = q·k_i/sqrt(d) up to a shared constant.
          const double mx_of_query = mx + std::log(sum);
          std::vector<double> o(static_cast<size_t>(d), 0.0);
          for (int64_t i = 0; i < E; ++i)
            for (int64_t t = 0; t < d; ++t) o[t] += p[i] * V[i * d + t];
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return p[a] > p[b]; });
          KeyRows keys{K.data(), E, d};
          for (size_t bi = 0; bi < settings.size(); ++bi) {
            CandidateReceipt rc = sel.query(l, h, q, std::max<int64_t>(qpos[j], E - 1), settings[bi].budget,
                                            settings[bi].min_collisions, sampling ? &keys : nullptr, settings[bi].quantile,
                                            settings[bi].flat);
            if (rc.centroids_scored >= 0) {
              overall[bi].scored.push_back(static_cast<double>(rc.centroids_scored));
              per_layer[bi][static_cast<size_t>(l - lf)].scored.push_back(static_cast<double>(rc.centroids_scored));
            }
            std::fill(in_r.begin(), in_r.end(), 0);
            for (int64_t id : rc.candidates)
              if (id < E) in_r[id] = 1;
            for (int64_t id : rc.always_included)
              if (id < E) in_r[id] = 1;
            int64_t n = 0;
            double rho = 0;
            std::vector<double> orr(static_cast<size_t>(d), 0.0);
            for (int64_t i = 0; i < E; ++i)
              if (in_r[i]) {
                ++n;
                rho += p[i];
                for (int64_t t = 0; t < d; ++t) orr[t] += p[i] * V[i * d + t];
              }
            double oracle = 0, hit = 0;
            for (int64_t i = 0; i < n; ++i) {
              oracle += p[order[i]];
              hit += in_r[order[i]];
            }
            double err = 0, on = 0;
            for (int64_t t = 0; t < d; ++t) {
              double diff = (rho > 0 ? orr[t] / rho : 0) - o[t];
              err += diff * diff;
              on += o[t] * o[t];
            }
            err = std::sqrt(err);
            double rel = on > 0 ? err / std::sqrt(on) : 0;
            double frac = static_cast<double>(n) / static_cast<double>(E);
            double recall = n > 0 ? hit / static_cast<double>(n) : 1;
            overall[bi].add(rho, oracle, recall, err, rel, frac, static_cast<double>(n));
            Acc& pl = per_layer[bi][static_cast<size_t>(l - lf)];
            pl.add(rho, oracle, recall, err, rel, frac, static_cast<double>(n));
            double est = 0;
            if (sampling) {
              // Self-normalized importance sampling: sampled rows with logits z - ln u, merged with
              // the exact sink/local part through (max, sum-exp) states.
              SoftmaxState exact(static_cast<size_t>(d)), sampled(static_cast<size_t>(d));
              std::vector<char> is_sampled(static_cast<size_t>(E), 0);
              for (size_t ci = 0; ci < rc.candidates.size(); ++ci) {
                int64_t id = rc.candidates[ci];
                if (id >= E || rc.inclusion[ci] <= 0) continue;
                is_sampled[id] = 1;
                double z = std::log(p[id]) + mx_of_query - std::log(rc.inclusion[ci]);
                sampled.add(z, V.data() + id * d);
              }
              for (int64_t i = 0; i < E; ++i)
                if (in_r[i] && !is_sampled[i]) exact.add(std::log(p[i]) + mx_of_query, V.data() + i * d);
              exact.merge(sampled);
              auto oe = exact.output();
              double en = 0;
              for (int64_t t = 0; t < d; ++t) en += (oe[t] - o[t]) * (oe[t] - o[t]);
              est = std::sqrt(en);
              double sf = rows.count() > 0 ? static_cast<double>(rc.candidates.size()) / rows.count() : 0;
              for (Acc* a : {&overall[bi], &pl}) {
                a->est_err.push_back(est);
                a->est_rel_err.push_back(on > 0 ? est / std::sqrt(on) : 0);
                a->sampled_frac.push_back(sf);
              }
            }
            if (csv)
              csv_text += settings[bi].label + "," + std::to_string(l) + "," + std::to_string(h) + "," + std::to_string(kvh) +
                          "," + std::to_string(qpos[j]) + "," + std::to_string(n) + "," + fmt(frac) + "," + fmt(rho) + "," +
                          fmt(oracle) + "," + fmt(recall) + "," + fmt(err) + "," + fmt(rel) + "," + fmt(est) + "\n";
          }
        }
      }
      progress.advance();
    }
  progress.finish();
  json budgets = json::array();
  for (size_t bi = 0; bi < settings.size(); ++bi) {
    json b = summary(overall[bi], row_bytes);
    b["selector"] = settings[bi].selector;
    b["index_bytes"] = index_bytes;
    b["metadata_bytes"] = metadata_bytes;
    json layers = json::array();
    for (int64_t l = lf; l <= ll; ++l) {
      json lj = summary(per_layer[bi][static_cast<size_t>(l - lf)], row_bytes);
      lj["layer"] = l;
      layers.push_back(lj);
    }
    b["per_layer"] = layers;
    budgets.push_back(b);
  }
  if (csv) {
    write_all(csv->fd(), csv_text.data(), csv_text.size(), opt.csv_path);
    csv->commit();
  }
  if (!opt.plot_path.empty()) write_plot(opt.plot_path, budgets, "kvtool eval: " + art.kind() + " on " + std::to_string(E) + " covered rows");
  return {{"schema_version", kJsonSchemaVersion},
          {"kind", art.kind()},
          {"artifact", art.path()},
          {"source", dump.path()},
          {"coverage", {0, E}},
          {"indexed_rows", rows.count()},
          {"always_included_rows", E - rows.count()},
          {"query_positions", qsel.size()},
          {"layers", {lf, ll}},
          {"selected_row_bytes_per_row", row_bytes},
          {"budgets", budgets}};
}

}  // namespace kvtool
