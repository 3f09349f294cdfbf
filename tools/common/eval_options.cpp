#include "eval_options.h"

#include <filesystem>

#include "env.h"
#include "kvtool/builder.h"
#include "kvtool/error.h"
#include "kvtool/kinds.h"

namespace kvtool::cli {

void SweepFlags::add(CLI::App* sub, const Defaults& d) {
  threads = default_threads();
  sub->add_option("--budget", budgets,
                  "pq, clusterkv: budget(s); several give a curve (default " + d.budget +
                      "); squeeze ranks to a budget with -o rank_budget=B");
  sub->add_option("--min-collisions", min_collisions,
                  "lsh: collision threshold(s) c (default " + d.min_collisions + ")");
  sub->add_option("--quantile", quantiles,
                  "squeeze: quantile(s) to evaluate, hierarchical and flat (default " + d.quantile + ")")
      ->type_name("FLOAT");
  sub->add_option("--rerank", reranks,
                  "pq, clusterkv: rerank factor(s) F: the index proposes F x budget rows, exact q.k over the dump's "
                  "keys keeps the budget; 1 is no rerank (default 1)")
      ->type_name("FLOAT");
  sub->add_option("--top-p", top_ps,
                  "pq, clusterkv: adaptive budget(s) P: of the budget's rows, best first, the fewest whose softmax "
                  "mass as the index estimates it reaches P (0: a fixed budget, the default)")
      ->type_name("P");
  sub->add_flag("--share-kv-head", share_kv_head,
                "one selection per KV head: the rows chosen for the mean of its query heads' queries (what a "
                "grouped-query engine fetches once for the group), each query head measured against its own dense "
                "attention");
  sub->add_option("-o,--option", options,
                  "a query option of a kind as NAME=VALUE (any kind's own option; see its man page); repeat to "
                  "sweep");
  sub->add_option("--positions", positions,
                  "query positions to evaluate: all, every:K (every K-th) or random:N (N drawn with "
                  "--positions-seed); the JSON's position_sample lists them")
      ->capture_default_str();
  sub->add_option("--positions-seed", positions_seed, "seed of --positions random:N")->capture_default_str();
  sub->add_option("--threads", threads,
                  "worker threads over (layer, kv head) parts (default: the CPUs this process may use); the "
                  "report is the same for any count; at most 1024")
      ->check(CLI::Range(0, kMaxThreads))
      ->envname("KVTOOL_THREADS");
}

std::map<std::string, std::vector<std::string>> SweepFlags::flag_values() const {
  std::map<std::string, std::vector<std::string>> all;
  for (const auto& b : budgets) {
    Budget::parse(b);  // USAGE for a bad --budget whatever the kind
    all["budget"].push_back(b);
  }
  for (int64_t c : min_collisions) all["min_collisions"].push_back(std::to_string(c));
  for (const auto& q : quantiles) all["quantile"].push_back(q);
  for (const auto& f : reranks) all["rerank"].push_back(f);
  for (const auto& p : top_ps) all["top_p"].push_back(p);
  return all;
}

void SweepFlags::fill(EvalOptions& eo, bool quiet) const {
  eo.positions = PositionSample::parse(positions, positions_seed);
  eo.quiet = quiet;
  eo.threads = threads;
  eo.share_kv_head = share_kv_head;
}

namespace {

// Whether two paths name one file: the same text, or (both existing) the same inode.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return a == b || std::filesystem::equivalent(a, b, ec);
}

}  // namespace

SweepFlags::Outputs SweepFlags::open_outputs(const std::vector<std::string>& inputs) const {
  for (const std::string* out : {&csv, &plot}) {
    if (out->empty()) continue;
    for (const auto& in : inputs)
      KVT_CHECK(!same_file(*out, in), USAGE,
                "output '" << *out << "' is an input of this command; choose another path");
  }
  KVT_CHECK(csv.empty() || plot.empty() || !same_file(csv, plot), USAGE,
            "--csv and --plot name the same file '" << csv << "'");
  Outputs o;
  if (!csv.empty()) o.csv = std::make_unique<AtomicOutput>(csv, true);
  if (!plot.empty()) o.plot = std::make_unique<AtomicOutput>(plot, true);
  return o;
}

std::map<std::string, std::vector<std::string>> SweepFlags::named_options() const {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& text : options)
    for (const auto& [name, value] : parse_query_settings(text)) out[name].push_back(value);
  return out;
}

}  // namespace kvtool::cli
