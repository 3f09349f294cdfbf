// kvtool eval ART --source DUMP [--budget B ...] [--min-collisions c ...] [--quantile q ...]
// [--csv F] [--plot F.svg] [--json] [-q]
#include "commands.h"
#include "env.h"
#include "eval_output.h"
#include "kvtool/admission.h"
#include "kvtool/eval.h"

namespace kvtool::cmd {

namespace {

struct Args {
  std::string art, source, csv, plot;
  std::vector<std::string> budgets;
  std::vector<int64_t> min_collisions;
  std::vector<double> quantiles;
  std::vector<std::string> options;  // --option NAME=VALUE: one more swept value of that option
  std::string positions = "all";
  uint64_t positions_seed = 0;
  int threads = cli::default_threads();
};

// The swept values given on the command line, for the options the artifact's kind takes (the
// others apply to other kinds and are ignored).
// An unknown kind gets them all (evaluate() reports the kind).
std::map<std::string, std::vector<std::string>> sweep(const Args& a, const KindSpec* kind) {
  std::map<std::string, std::vector<std::string>> all;
  for (const auto& b : a.budgets) {
    Budget::parse(b);  // USAGE for a bad --budget whatever the kind, as before
    all["budget"].push_back(b);
  }
  for (int64_t c : a.min_collisions) all["min_collisions"].push_back(std::to_string(c));
  for (double q : a.quantiles) all["quantile"].push_back(json(q).dump());
  std::map<std::string, std::vector<std::string>> out;
  if (!kind) out = all;
  for (const auto& o : kind ? kind->query_options : std::vector<QueryOption>{})
    if (auto it = all.find(o.name); it != all.end()) out[o.name] = it->second;
  for (const auto& text : a.options)  // named explicitly: a name the kind does not take is USAGE
    for (const auto& [name, value] : parse_query_settings(text)) out[name].push_back(value);
  return out;
}

int run(const Args& a, const Flags& flags) {
  ArtifactReader r(a.art);
  admit_artifact(r, {});  // what verify checks: a file verify rejects is never queried
  DumpReader d(a.source);
  EvalOptions eo;
  eo.sweep = sweep(a, find_kind(r.kind()));
  eo.positions = PositionSample::parse(a.positions, a.positions_seed);
  eo.quiet = flags.quiet || flags.json;
  eo.threads = a.threads;
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
  sub->add_option("--budget", a->budgets, "budget(s); several give a curve (default 0.1)");
  sub->add_option("--min-collisions", a->min_collisions, "lsh: collision threshold(s) c (default 2)");
  sub->add_option(
      "-o,--option", a->options,
      "a query option of the artifact's kind as NAME=VALUE (any kind's own option; see its man page); repeat to sweep");
  sub->add_option("--quantile", a->quantiles,
                  "squeeze: quantile(s) to evaluate, hierarchical and flat (default: all calibrated)");
  sub->add_option("--positions", a->positions,
                  "query positions to evaluate: all, every:K (every K-th) or random:N (N drawn with "
                  "--positions-seed); the JSON's position_sample lists them")
      ->capture_default_str();
  sub->add_option("--positions-seed", a->positions_seed, "seed of --positions random:N")->capture_default_str();
  sub->add_option("--threads", a->threads,
                  "worker threads over (layer, kv head) parts (default: the CPUs this process may use); the "
                  "report is the same for any count")
      ->check(CLI::NonNegativeNumber)
      ->envname("KVTOOL_THREADS");
  sub->add_option("--csv", a->csv, "write one row per (budget, layer, query head, position)");
  sub->add_option("--plot", a->plot, "write an SVG of retained mass vs selected fraction");
  sub->add_flag("--json", flags.json, "machine-readable output");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] { return run(*a, flags); }};
}

}  // namespace kvtool::cmd
