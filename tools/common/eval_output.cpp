#include "eval_output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "kvtool/atomic_file.h"

namespace kvtool::cli {

namespace {

void write_text(AtomicOutput& out, const std::string& text);

std::string fmt(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", x);
  return b;
}

void write_plot(AtomicOutput& out, const std::vector<EvalSetting>& settings, const std::string& title) {
  const double W = 720, H = 480, L = 70, R = 180, T = 50, B = 60;
  double xmax = 0;
  for (const auto& st : settings) xmax = std::max(xmax, st.overall.selected_fraction_mean);
  xmax = std::min(1.0, std::max(0.05, std::ceil(xmax * 1.15 * 20) / 20));
  auto X = [&](double f) { return L + (W - L - R) * f / xmax; };
  auto Y = [&](double m) { return T + (H - T - B) * (1 - m); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << W << "' height='" << H
    << "' font-family='sans-serif' font-size='12'>\n";
  s << "<rect width='100%' height='100%' fill='white'/>\n";
  s << "<text x='" << W / 2 - 60 << "' y='25' font-size='15'>" << title << "</text>\n";
  for (int i = 0; i <= 10; ++i) {
    double m = i / 10.0, f = xmax * i / 10.0;
    s << "<line x1='" << L << "' x2='" << W - R << "' y1='" << Y(m) << "' y2='" << Y(m) << "' stroke='#eee'/>\n";
    s << "<text x='" << L - 35 << "' y='" << Y(m) + 4 << "'>" << fmt(m) << "</text>\n";
    s << "<line y1='" << T << "' y2='" << H - B << "' x1='" << X(f) << "' x2='" << X(f) << "' stroke='#eee'/>\n";
    s << "<text x='" << X(f) - 12 << "' y='" << H - B + 18 << "'>" << fmt(f) << "</text>\n";
  }
  s << "<rect x='" << L << "' y='" << T << "' width='" << W - L - R << "' height='" << H - T - B
    << "' fill='none' stroke='black'/>\n";
  s << "<text x='" << (L + W - R) / 2 - 80 << "' y='" << H - 15 << "'>selected fraction of covered rows</text>\n";
  s << "<text transform='translate(20," << (T + H - B) / 2 + 60 << ") rotate(-90)'>retained attention mass</text>\n";
  auto series = [&](double EvalStats::*key, const char* color, const char* label, double ly) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& st : settings) pts.emplace_back(st.overall.selected_fraction_mean, st.overall.*key);
    std::sort(pts.begin(), pts.end());
    s << "<polyline fill='none' stroke='" << color << "' stroke-width='2' points='";
    for (auto& [f, m] : pts) s << X(f) << "," << Y(m) << " ";
    s << "'/>\n";
    for (auto& [f, m] : pts) s << "<circle cx='" << X(f) << "' cy='" << Y(m) << "' r='4' fill='" << color << "'/>\n";
    s << "<line x1='" << W - R + 15 << "' x2='" << W - R + 40 << "' y1='" << ly << "' y2='" << ly << "' stroke='"
      << color << "' stroke-width='2'/><text x='" << W - R + 45 << "' y='" << ly + 4 << "'>" << label << "</text>\n";
  };
  series(&EvalStats::oracle_retained_mass_mean, "#888888", "dense top-k oracle", T + 20);
  series(&EvalStats::retained_mass_mean, "#1f77b4", "index (mean)", T + 40);
  series(&EvalStats::retained_mass_p10, "#ff7f0e", "index (10th pct)", T + 60);
  s << "</svg>\n";
  write_text(out, s.str());
}

void write_text(AtomicOutput& out, const std::string& text) {
  write_all(out.fd(), text.data(), text.size(), out.final_path());
  out.commit();
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
  write_plot(out, report.settings,
             "kvtool eval: " + report.kind + " on " + std::to_string(report.coverage_end) + " covered rows");
}

}  // namespace kvtool::cli
