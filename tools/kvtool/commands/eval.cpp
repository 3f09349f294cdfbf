// kvtool eval ART --source DUMP [--budget B ...] [--min-collisions c ...] [--quantile q ...]
// [--csv F] [--plot F.svg] [--json] [-q]
#include "commands.h"
#include "env.h"
#include "eval_options.h"
#include "eval_output.h"
#include "kvtool/admission.h"
#include "kvtool/eval.h"

namespace kvtool::cmd {

namespace {

struct Args {
  std::string art, source, csv, plot;
  cli::SweepFlags sweep;
};

// The swept values given on the command line, for the options the artifact's kind takes (the
// others apply to other kinds and are ignored).
// An unknown kind gets them all (evaluate() reports the kind).
std::map<std::string, std::vector<std::string>> sweep(const cli::SweepFlags& f, const KindSpec* kind) {
  const auto all = f.flag_values();
  std::map<std::string, std::vector<std::string>> out;
  if (!kind) out = all;
  for (const auto& o : kind ? kind->query_options : std::vector<QueryOption>{})
    if (auto it = all.find(o.name); it != all.end()) out[o.name] = it->second;
  for (const auto& [name, values] : f.named_options())  // named explicitly: a name the kind does not take is USAGE
    for (const auto& v : values) out[name].push_back(v);
  return out;
}

int run(const Args& a, const Flags& flags) {
  ArtifactReader r(a.art);
  admit_artifact(r, {});  // what verify checks: a file verify rejects is never queried
  DumpReader d(a.source);
  EvalOptions eo;
  eo.sweep = sweep(a.sweep, find_kind(r.kind()));
  eo.positions = a.sweep.sample();
  eo.quiet = flags.quiet || flags.json;
  eo.threads = a.sweep.threads;
  // The output files are opened first: a path that cannot be written fails before the work.
  std::unique_ptr<AtomicOutput> csv, plot;
  if (!a.csv.empty()) csv = std::make_unique<AtomicOutput>(a.csv, true);
  if (!a.plot.empty()) plot = std::make_unique<AtomicOutput>(a.plot, true);
  std::vector<EvalRecord> records;
  const EvalReport rep = evaluate(r, d, eo, csv ? &records : nullptr);
  if (csv) cli::write_eval_csv(*csv, records);
  if (plot) cli::write_eval_plot(*plot, rep);
  return emit({flags.json, false}, rep.to_json(), [&] { cli::print_eval(rep); });  // -q only silences progress
}

}  // namespace

cli::Command register_eval(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<Args>();
  auto* sub =
      app.add_subcommand("eval", "Retained attention mass, recall, output error and bytes against dense attention");
  sub->add_option("ART", a->art, "artifact (.kvi)")->required();
  sub->add_option("--source", a->source, "dump with /kv/q queries at positions >= the coverage end")->required();
  a->sweep.add(sub, {"0.1", "2", "all calibrated"});
  sub->add_option("--csv", a->csv, "write one row per (budget, layer, query head, position)");
  sub->add_option("--plot", a->plot, "write an SVG of retained mass vs selected fraction");
  sub->add_flag("--json", flags.json, "machine-readable output");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] { return run(*a, flags); }};
}

}  // namespace kvtool::cmd
