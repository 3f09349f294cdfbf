#include "eval_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kvtool/atomic_file.h"

namespace kvtool::cli {

namespace {

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}

// An SVG coordinate: 0.1 px, so that last-bit differences of the numbers never change the bytes.
std::string px(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", std::round(x * 10) / 10 + 0.0);  // + 0.0: no "-0.0"
  return b;
}

std::string xml(const std::string& t) {
  std::string o;
  for (char c : t) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '\'')
      o += "&apos;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string basename(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

void write_text(AtomicOutput& out, const std::string& text) {
  write_all(out.fd(), text.data(), text.size(), out.final_path());
  out.commit();
}

// One curve: (selected fraction, value) points, drawn in fraction order; or, `points_only`, a
// marker per point (the oracle's points come from several artifacts' row counts: no curve).
struct Series {
  std::string label, color;
  std::vector<std::pair<double, double>> pts;
  bool points_only = false;
};

// A plot area at (x0, y0) of w x h with x in [0, xmax], y in [ymin, ymax], grid, ticks and curves.
struct Panel {
  double x0, y0, w, h, xmax, ymin, ymax;
  double X(double f) const { return x0 + w * f / xmax; }
  double Y(double m) const { return y0 + h * (1 - (std::clamp(m, ymin, ymax) - ymin) / (ymax - ymin)); }
};

void draw_panel(std::ostringstream& s, const Panel& p, const std::string& ylabel, const std::vector<Series>& series) {
  for (int i = 0; i <= 10; ++i) {
    const double m = p.ymin + (p.ymax - p.ymin) * i / 10.0, f = p.xmax * i / 10.0;
    s << "<line x1='" << px(p.x0) << "' x2='" << px(p.x0 + p.w) << "' y1='" << px(p.Y(m)) << "' y2='" << px(p.Y(m))
      << "' stroke='#eee'/>\n";
    s << "<text x='" << px(p.x0 - 35) << "' y='" << px(p.Y(m) + 4) << "'>" << fmt(std::round(m * 1e4) / 1e4)
      << "</text>\n";
    s << "<line y1='" << px(p.y0) << "' y2='" << px(p.y0 + p.h) << "' x1='" << px(p.X(f)) << "' x2='" << px(p.X(f))
      << "' stroke='#eee'/>\n";
    s << "<text x='" << px(p.X(f) - 12) << "' y='" << px(p.y0 + p.h + 18) << "'>" << fmt(std::round(f * 1e4) / 1e4)
      << "</text>\n";
  }
  s << "<rect x='" << px(p.x0) << "' y='" << px(p.y0) << "' width='" << px(p.w) << "' height='" << px(p.h)
    << "' fill='none' stroke='black'/>\n";
  s << "<text transform='translate(" << px(p.x0 - 50) << "," << px(p.y0 + p.h / 2 + 70) << ") rotate(-90)'>"
    << xml(ylabel) << "</text>\n";
  for (const auto& c : series) {
    auto pts = c.pts;
    std::stable_sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (!c.points_only) {
      s << "<polyline fill='none' stroke='" << c.color << "' stroke-width='2' points='";
      for (const auto& [f, m] : pts) s << px(p.X(f)) << "," << px(p.Y(m)) << " ";
      s << "'/>\n";
    }
    for (const auto& [f, m] : pts)
      s << "<circle cx='" << px(p.X(f)) << "' cy='" << px(p.Y(m)) << "' r='" << (c.points_only ? 3 : 4) << "' fill='"
        << (c.points_only ? "none" : c.color) << "' stroke='" << c.color << "'/>\n";
  }
}

// The legend: one line per series from (x, y) down.
void draw_legend(std::ostringstream& s, double x, double y, const std::vector<Series>& series) {
  for (const auto& c : series) {
    if (c.points_only)
      s << "<circle cx='" << px(x + 12.5) << "' cy='" << px(y) << "' r='3' fill='none' stroke='" << c.color << "'/>";
    else
      s << "<line x1='" << px(x) << "' x2='" << px(x + 25) << "' y1='" << px(y) << "' y2='" << px(y) << "' stroke='"
        << c.color << "' stroke-width='2'/>";
    s << "<text x='" << px(x + 30) << "' y='" << px(y + 4) << "'>" << xml(c.label) << "</text>\n";
    y += 20;
  }
}

// The x range: the largest selected fraction with a margin, in steps of 0.05.
double x_range(const std::vector<Series>& series) {
  double xmax = 0;
  for (const auto& c : series)
    for (const auto& pt : c.pts) xmax = std::max(xmax, pt.first);
  return std::min(1.0, std::max(0.05, std::ceil(xmax * 1.15 * 20) / 20));
}

std::string svg_open(double W, double H, const std::string& title) {
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n";
  s << "<rect width='100%' height='100%' fill='white'/>\n";
  s << "<text x='70' y='25' font-size='15'>" << xml(title) << "</text>\n";
  return s.str();
}

std::string csv_field(const std::string& t) {
  if (t.find_first_of(",\"\n") == std::string::npos) return t;
  std::string o = "\"";
  for (char c : t) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace

void write_eval_csv(AtomicOutput& out, const std::vector<EvalRecord>& records) {
  std::string text =
      "selector,layer,q_head,kv_head,position,selected_rows,selected_fraction,retained_mass,oracle_retained_mass,"
      "recall_support,output_error,relative_output_error,estimator_output_error\n";
  for (const auto& r : records)
    text += r.selector + "," + std::to_string(r.layer) + "," + std::to_string(r.q_head) + "," +
            std::to_string(r.kv_head) + "," + std::to_string(r.position) + "," + std::to_string(r.selected_rows) + "," +
            fmt(r.selected_fraction) + "," + fmt(r.retained_mass) + "," + fmt(r.oracle_retained_mass) + "," +
            fmt(r.recall_support) + "," + fmt(r.output_error) + "," + fmt(r.relative_output_error) + "," +
            fmt(r.estimator_output_error) + "\n";
  write_text(out, text);
}

void write_eval_plot(AtomicOutput& out, const EvalReport& report) {
  std::vector<Series> series = {
      {"dense top-k oracle", "#888888", {}}, {"index (mean)", "#1f77b4", {}}, {"index (10th pct)", "#ff7f0e", {}}};
  for (const auto& st : report.settings) {
    const EvalStats& o = st.overall;
    series[0].pts.emplace_back(o.selected_fraction_mean, o.oracle_retained_mass_mean);
    series[1].pts.emplace_back(o.selected_fraction_mean, o.retained_mass_mean);
    series[2].pts.emplace_back(o.selected_fraction_mean, o.retained_mass_p10);
  }
  const double W = 720, H = 480;
  const Panel p{70, 50, W - 70 - 180, H - 50 - 60, x_range(series), 0.0, 1.0};
  std::ostringstream s;
  s << svg_open(W, H, "kvtool eval: " + report.kind + " on " + std::to_string(report.coverage_end) + " covered rows");
  draw_panel(s, p, "retained attention mass", series);
  s << "<text x='" << px(p.x0 + p.w / 2 - 80) << "' y='" << px(H - 15)
    << "'>selected fraction of covered rows</text>\n";
  draw_legend(s, W - 180 + 15, p.y0 + 20, series);
  s << "</svg>\n";
  write_text(out, s.str());
}

void write_compare_csv(AtomicOutput& out, const CompareReport& report) {
  std::string text =
      "artifact,kind,setting,queries,selected_fraction,retained_mass,retained_mass_p10,oracle_retained_mass,"
      "quality_ratio,recall_support,output_error,relative_output_error,index_bytes\n";
  for (const auto& a : report.artifacts)
    for (const auto& st : a.report.settings) {
      const EvalStats& o = st.overall;
      text += csv_field(a.report.artifact) + "," + a.report.kind + "," + csv_field(st.label) + "," +
              std::to_string(o.queries) + "," + fmt(o.selected_fraction_mean) + "," + fmt(o.retained_mass_mean) + "," +
              fmt(o.retained_mass_p10) + "," + fmt(o.oracle_retained_mass_mean) + "," + fmt(o.quality_ratio) + "," +
              fmt(o.recall_support_mean) + "," + fmt(o.output_error_mean) + "," + fmt(o.relative_output_error_mean) +
              "," + std::to_string(st.index_bytes) + "\n";
    }
  write_text(out, text);
}

namespace {

// One series per (artifact, variant): the variant is the label's text after '/' (QueryParams::label).
void compare_series(const CompareReport& report, std::vector<Series>& mass, std::vector<Series>& err) {
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  Series oracle{"dense top-k oracle (each setting)", "#444444", {}, true};
  for (const auto& o : report.oracle) oracle.pts.emplace_back(o.selected_fraction, o.retained_mass);
  mass.push_back(oracle);
  size_t color = 0;
  // Artifacts are named by file name, or by the path as given where two share a file name.
  auto name_of = [&](const std::string& path) {
    size_t same = 0;
    for (const auto& b : report.artifacts) same += basename(b.report.artifact) == basename(path);
    return same > 1 ? path : basename(path);
  };
  for (const auto& a : report.artifacts) {
    const size_t base = err.size();  // this artifact's first series in err (mass: one later, the oracle first)
    std::vector<std::string> variants;
    for (const auto& st : a.report.settings) {
      const auto slash = st.label.find('/');
      const std::string v = slash == std::string::npos ? "" : st.label.substr(slash + 1);
      auto it = std::find(variants.begin(), variants.end(), v);
      if (it == variants.end()) {
        variants.push_back(v);
        const std::string label = name_of(a.report.artifact) + " (" + a.report.kind + (v.empty() ? "" : " " + v) + ")";
        const char* c = colors[color++ % (sizeof colors / sizeof colors[0])];
        mass.push_back({label, c, {}});
        err.push_back({label, c, {}});
        it = variants.end() - 1;
      }
      const size_t k = base + static_cast<size_t>(it - variants.begin());
      mass[k + 1].pts.emplace_back(st.overall.selected_fraction_mean, st.overall.retained_mass_mean);
      err[k].pts.emplace_back(st.overall.selected_fraction_mean, st.overall.relative_output_error_mean);
    }
  }
}

// One panel of a two-panel figure: its y label, its curves and its y range.
struct PanelSpec {
  std::string label;
  const std::vector<Series>* series;
  double ymin, ymax;
};

// Two stacked panels over one x axis (the top panel's x range), the top's legend on the right.
void write_two_panels(AtomicOutput& out, const std::string& title, const PanelSpec& a, const PanelSpec& b,
                      const std::string& xlabel) {
  const double W = 840, L = 80, R = 280, T = 50, PH = 300, GAP = 60;
  const double xmax = x_range(*a.series), H = T + 2 * PH + GAP + 60;
  const Panel top{L, T, W - L - R, PH, xmax, a.ymin, a.ymax},
      bottom{L, T + PH + GAP, W - L - R, PH, xmax, b.ymin, b.ymax};
  std::ostringstream s;
  s << svg_open(W, H, title);
  draw_panel(s, top, a.label, *a.series);
  draw_panel(s, bottom, b.label, *b.series);
  s << "<text x='" << px(L + (W - L - R) / 2 - 80) << "' y='" << px(H - 15) << "'>" << xlabel << "</text>\n";
  draw_legend(s, W - R + 15, T + 20, *a.series);
  s << "</svg>\n";
  write_text(out, s.str());
}

}  // namespace

void write_compare_plot(AtomicOutput& out, const CompareReport& report) {
  std::vector<Series> mass, err;
  compare_series(report, mass, err);
  double emax = 0, mmin = 1;
  for (const auto& c : err)
    for (const auto& pt : c.pts) emax = std::max(emax, pt.second);
  for (const auto& c : mass)
    for (const auto& pt : c.pts) mmin = std::min(mmin, pt.second);
  emax = std::max(0.05, std::ceil(emax * 1.1 * 20) / 20);  // steps of 0.05
  mmin = std::min(0.9, std::floor(mmin * 10) / 10);        // steps of 0.1: the curves fill the panel
  write_two_panels(out, "kvtool compare on " + basename(report.source),
                   {"retained attention mass", &mass, std::max(0.0, mmin), 1.0},
                   {"relative output error", &err, 0.0, emax}, "selected fraction of covered rows");
}

void write_decode_csv(AtomicOutput& out, const EvalDecodeReport& report) {
  std::string text =
      "artifact,kind,setting,steps,selected_fraction,selected_fraction_kv_union,mean_kl,max_kl,top1_agreement,"
      "ppl_dense,ppl_sparse,diverge_step\n";
  for (const auto& r : report.results)
    text += csv_field(r.artifact) + "," + r.kind + "," + csv_field(r.setting) + "," + std::to_string(r.steps) + "," +
            fmt(r.selected_fraction) + "," + fmt(r.selected_fraction_kv_union) + "," + fmt(r.mean_kl) + "," +
            fmt(r.max_kl) + "," + fmt(r.top1_agreement) + "," + fmt(r.ppl_dense) + "," + fmt(r.ppl_sparse) + "," +
            (r.diverge_step < 0 ? std::string() : std::to_string(r.diverge_step)) + "\n";
  write_text(out, text);
}

void write_decode_plot(AtomicOutput& out, const EvalDecodeReport& report) {
  static const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                 "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"};
  std::vector<Series> kl, top1;
  std::vector<std::string> names;
  for (const auto& r : report.results) {
    const std::string name = basename(r.artifact) + " (" + r.kind + ")";
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) {
      const char* c = colors[names.size() % (sizeof colors / sizeof colors[0])];
      names.push_back(name);
      kl.push_back({name, c, {}});
      top1.push_back({name, c, {}});
      it = names.end() - 1;
    }
    const auto k = static_cast<size_t>(it - names.begin());
    kl[k].pts.emplace_back(r.selected_fraction, r.mean_kl);
    top1[k].pts.emplace_back(r.selected_fraction, r.top1_agreement);
  }
  double kmax = 0;
  for (const auto& c : kl)
    for (const auto& pt : c.pts) kmax = std::max(kmax, pt.second);
  kmax = std::max(0.01, kmax * 1.1);
  write_two_panels(out, "kvtool eval-decode on " + basename(report.source),
                   {"mean KL(dense || sparse), nats", &kl, 0.0, kmax}, {"top-1 agreement", &top1, 0.0, 1.0},
                   "selected fraction of the prefix");
}

}  // namespace kvtool::cli
