// kvtool compare --source DUMP ART... [--budget B ...] [--min-collisions c ...] [--quantile q ...]
// [-o NAME=VALUE ...] [--csv F] [--plot F.svg] [--json] [-q]
#include <filesystem>

#include "commands.h"
#include "eval_options.h"
#include "eval_output.h"
#include "kvtool/admission.h"
#include "kvtool/compare.h"
#include "kvtool/error.h"

namespace kvtool::cmd {

namespace {

struct CompareArgs {
  std::string source;
  std::vector<std::string> arts;
  cli::SweepFlags sweep;
};

// What eval admits (the checks verify runs), the error naming the artifact among several.
std::unique_ptr<ArtifactReader> open_admitted(const std::string& path) {
  try {
    auto r = std::make_unique<ArtifactReader>(path);
    admit_artifact(*r, {});
    return r;
  } catch (const Error& e) {
    const std::string what = e.what();
    throw Error(e.reason(), what.find(path) == std::string::npos ? "artifact " + path + ": " + what : what);
  }
}

int run_compare(const CompareArgs& a, const Flags& flags) {
  std::vector<std::unique_ptr<ArtifactReader>> readers;
  std::vector<const ArtifactReader*> arts;
  for (size_t i = 0; i < a.arts.size(); ++i) {
    const std::string& p = a.arts[i];
    for (size_t j = 0; j < i; ++j) {
      std::error_code ec;
      KVT_CHECK(p != a.arts[j] && !std::filesystem::equivalent(p, a.arts[j], ec), USAGE,
                "artifact '" << p << "' is given twice");
    }
    readers.push_back(open_admitted(p));
    arts.push_back(readers.back().get());
  }
  DumpReader d(a.source);
  CompareOptions co;
  co.sweep = a.sweep.flag_values();
  for (const auto& [name, values] : a.sweep.named_options())
    for (const auto& v : values) co.sweep[name].push_back(v);
  a.sweep.fill(co, flags.quiet || flags.json);
  std::vector<std::string> inputs = a.arts;
  inputs.push_back(a.source);
  const auto out = a.sweep.open_outputs(inputs);
  const CompareReport rep = compare(arts, d, co);
  if (out.csv) cli::write_compare_csv(*out.csv, rep);
  if (out.plot) cli::write_compare_plot(*out.plot, rep);
  return emit({flags.json, false}, rep.to_json(), [&] { cli::print_compare(rep); });  // -q only silences progress
}

}  // namespace

cli::Command register_compare(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<CompareArgs>();
  auto* sub = app.add_subcommand(
      "compare",
      "Several artifacts of one dump side by side: retained mass, dense oracle and output error against the "
      "selected fraction, each kind over its curve");
  sub->footer(
      "Each artifact is evaluated as `kvtool eval` does, over its kind's curve unless a knob is named:\n"
      "pq and clusterkv budgets 0.02 0.05 0.1 0.2 0.3, squeeze every calibrated quantile (hierarchical\n"
      "and flat), lsh collision thresholds 1 2 3 4 8 16 (those <= its tables). --budget, --quantile,\n"
      "--min-collisions and -o NAME=VALUE replace a curve for the artifacts whose kind takes them; one\n"
      "no artifact takes is a usage error. Every artifact must be bound to DUMP (checked before any work).\n"
      "The oracle is dense top-k with each setting's row counts (one point per setting).");
  sub->add_option("ART", a->arts, "artifacts (.kvi), one or more, all built from DUMP")->required();
  sub->add_option("--source", a->source, "dump with /kv/q queries at positions >= the coverage ends")->required();
  std::string budgets;
  for (const auto& b : budget_curve()) budgets += (budgets.empty() ? "" : ",") + b;
  a->sweep.add(sub, {budgets, "1,2,3,4,8,16 up to the tables", "all calibrated"});
  sub->add_option("--csv", a->sweep.csv, "write the table: one row per (artifact, setting)");
  sub->add_option("--plot", a->sweep.plot,
                  "write an SVG of retained mass (with the oracle) and relative output error vs selected fraction");
  sub->add_flag("--json", flags.json, "machine-readable output");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] { return run_compare(*a, flags); }};
}

}  // namespace kvtool::cmd
