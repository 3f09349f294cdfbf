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

struct EvalArgs {
  std::string art, source;
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

int run_eval(const EvalArgs& a, const Flags& flags) {
  ArtifactReader r(a.art);
  admit_artifact(r, {});  // what verify checks: a file verify rejects is never queried
  DumpReader d(a.source);
  EvalOptions eo;
  eo.sweep = sweep(a.sweep, find_kind(r.kind()));
  a.sweep.fill(eo, flags.quiet || flags.json);
  const auto out = a.sweep.open_outputs({a.art, a.source});
  std::vector<EvalRecord> records;
  const EvalReport rep = evaluate(r, d, eo, out.csv ? &records : nullptr);
  if (out.csv) cli::write_eval_csv(*out.csv, records);
  if (out.plot) cli::write_eval_plot(*out.plot, rep);
  return emit({flags.json, false}, rep.to_json(), [&] { cli::print_eval(rep); });  // -q only silences progress
}

}  // namespace

cli::Command register_eval(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<EvalArgs>();
  auto* sub =
      app.add_subcommand("eval", "Retained attention mass, recall, output error and bytes against dense attention");
  sub->add_option("ART", a->art, "artifact (.kvi)")->required();
  sub->add_option("--source", a->source, "dump with /kv/q queries at positions >= the coverage end")->required();
  a->sweep.add(sub, {"0.1", "2", "all calibrated"});
  sub->add_option("--csv", a->sweep.csv, "write one row per (budget, layer, query head, position)");
  sub->add_option("--plot", a->sweep.plot, "write an SVG of retained mass vs selected fraction");
  sub->add_flag("--json", flags.json, "machine-readable output");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] { return run_eval(*a, flags); }};
}

}  // namespace kvtool::cmd
