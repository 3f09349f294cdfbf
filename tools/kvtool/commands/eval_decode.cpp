// kvtool eval-decode ART... --llama2c M.bin [--tokenizer T.bin] --source DUMP [--steps N] [--budget B ...]
// [--rerank F ...] [--min-collisions c ...] [--quantile q ...] [--baseline window|topk|heavy ...] [--share-kv-head]
// [--csv F] [--plot F.svg]
// [--json] [-q]
#include <cstdio>
#include <iostream>
#include <memory>

#include "commands.h"
#include "env.h"
#include "eval_options.h"
#include "eval_output.h"
#include "kvtool/blas.h"
#include "kvtool/dump.h"
#include "kvtool/eval_decode.h"
#include "kvtool/llama2c.h"

namespace kvtool::cmd {

namespace {

struct EvalDecodeArgs {
  std::vector<std::string> arts;
  std::string source, tokenizer, gguf, answer;
  EvalDecodeOptions opt;
  cli::SweepFlags sweep;  // --budget, --min-collisions, --quantile; --csv, --plot
};

// Where greedy decoding left dense, as text: the tokens both produced (their last 60 bytes), then
// dense's next token and sparse's.
void print_divergences(const json& results) {
  for (const auto& r : results) {
    if (!r.contains("diverge_text") || r["diverge_text"].is_null()) continue;
    const auto& t = r["diverge_text"];
    std::string common = t["common"].get<std::string>();
    if (common.size() > 60) common = "..." + common.substr(common.size() - 60);
    std::cout << cli::strprintf("%s %s %s at step %lld: \"%s\" then dense \"%s\", sparse \"%s\"\n",
                                r["artifact"].get<std::string>().c_str(), r["kind"].get<std::string>().c_str(),
                                r["setting"].get<std::string>().c_str(),
                                static_cast<long long>(r["diverge_step"].get<int64_t>()), common.c_str(),
                                t["dense"].get<std::string>().c_str(), t["sparse"].get<std::string>().c_str());
  }
}

void print_decode(const EvalDecodeReport& rep) {
  std::cout << cli::strprintf("%-28s %-9s %-15s %6s %6s %6s %9s %9s %6s %9s %9s %7s\n", "artifact", "kind", "setting",
                              "frac", "kv∪", "rec@k", "mean KL", "max KL", "top-1", "ppl", "ppl dense", "diverge");
  for (const auto& r : rep.results) {
    const std::string div = r.diverge_step < 0 ? "-" : std::to_string(r.diverge_step);
    std::cout << cli::strprintf("%-28s %-9s %-15s %6.3f %6.3f %6.3f %9.4g %9.4g %6.3f %9.4f %9.4f %7s\n",
                                r.artifact.substr(r.artifact.size() > 28 ? r.artifact.size() - 28 : 0).c_str(),
                                r.kind.c_str(), r.setting.c_str(), r.selected_fraction, r.selected_fraction_kv_union,
                                r.recall_at_k, r.mean_kl, r.max_kl, r.top1_agreement, r.ppl_sparse, r.ppl_dense,
                                div.c_str());
  }
  if (!rep.results.empty())
    std::cout << cli::strprintf(
        "%lld decode steps, teacher forced; diverge: first step where free-running greedy decoding differs\n",
        static_cast<long long>(rep.results.front().steps));
  for (const auto& r : rep.results)
    if (r.answer_tokens > 0)
      std::cout << cli::strprintf("answer (%lld tokens): %s %s %s predicts %lld, dense %lld\n",
                                  static_cast<long long>(r.answer_tokens), r.artifact.c_str(), r.kind.c_str(),
                                  r.setting.c_str(), static_cast<long long>(r.answer_correct),
                                  static_cast<long long>(r.answer_correct_dense));
}

// --answer START:END, two decimal token positions, START < END.
void parse_answer(const std::string& text, EvalDecodeOptions& o) {
  if (text.empty()) return;
  const size_t colon = text.find(':');
  auto number = [&](const std::string& s) {
    KVT_CHECK(!s.empty() && s.size() <= 12 && s.find_first_not_of("0123456789") == std::string::npos, USAGE,
              "--answer '" << printable(text) << "': give START:END, two token positions (e.g. 4000:4008)");
    return std::stoll(s);
  };
  KVT_CHECK(colon != std::string::npos, USAGE,
            "--answer '" << printable(text) << "': give START:END, two token positions (e.g. 4000:4008)");
  o.answer_begin = number(text.substr(0, colon));
  o.answer_end = number(text.substr(colon + 1));
  KVT_CHECK(o.answer_begin < o.answer_end, USAGE, "--answer " << printable(text) << ": START must be below END");
}

int run_eval_decode(EvalDecodeArgs& a, const Flags& flags) {
  KVT_CHECK(a.opt.model_path.empty() != a.gguf.empty(), USAGE,
            "give the model that produced --source: --llama2c M.bin or --gguf M.gguf");
  KVT_CHECK(a.gguf.empty() || a.tokenizer.empty(), USAGE,
            "--tokenizer is a llama2.c tokenizer; it goes with --llama2c");
  if (!a.gguf.empty()) a.opt.model_path = a.gguf;
  parse_answer(a.answer, a.opt);
  a.opt.threads = a.sweep.threads > 0 ? a.sweep.threads : cli::default_threads();
  set_blas_threads(a.opt.threads);
  std::vector<std::string> inputs = a.arts;
  inputs.push_back(a.source);
  inputs.push_back(a.opt.model_path);
  if (!a.tokenizer.empty()) inputs.push_back(a.tokenizer);
  a.opt.sweep = a.sweep.flag_values();
  for (auto& [name, values] : a.sweep.named_options())
    a.opt.sweep[name].insert(a.opt.sweep[name].end(), values.begin(), values.end());
  a.opt.quiet = flags.quiet || flags.json;
  const auto out = a.sweep.open_outputs(inputs);
  // The tokenizer is read (against the model's vocabulary) before the decoding, so a wrong one fails
  // at once rather than after the run.
  std::unique_ptr<Llama2cTokenizer> tok;
  if (!a.tokenizer.empty())
    tok = std::make_unique<Llama2cTokenizer>(a.tokenizer, Llama2cModel(a.opt.model_path).config().vocab_size);
  DumpReader dump(a.source);
  const EvalDecodeReport rep = eval_decode(a.arts, dump, a.opt);
  if (out.csv) cli::write_decode_csv(*out.csv, rep);
  if (out.plot) cli::write_decode_plot(*out.plot, rep);
  const json j = rep.to_json(tok.get());
  return emit({flags.json, false}, j, [&] {
    print_decode(rep);
    print_divergences(j["results"]);
  });
}

}  // namespace

cli::Command register_eval_decode(CLI::App& app, Flags& flags) {
  auto a = std::make_shared<EvalDecodeArgs>();
  auto* sub = app.add_subcommand(
      "eval-decode",
      "What sparse attention through the runtime pool does to a model's decoding (llama2.c or GGUF llama/qwen2): "
      "KL, top-1 agreement, perplexity and divergence against dense attention, per artifact and budget");
  sub->add_option("ART", a->arts, "artifacts (.kvi) built on --source")->required();
  auto* l2c = sub->add_option("--llama2c", a->opt.model_path, "the llama2.c checkpoint (.bin) that produced --source");
  sub->add_option("--gguf", a->gguf, "the GGUF model (llama, qwen2) that produced --source (kvtool dump --gguf)")
      ->excludes(l2c);
  sub->add_option("--tokenizer", a->tokenizer,
                  "the model's llama2.c tokenizer (.bin): also print where greedy decoding diverges as text "
                  "(JSON: diverge_text)");
  sub->add_option("--source", a->source, "dump with /kv/tokens: its prefix is prefilled, its next tokens decoded")
      ->required();
  sub->add_option("--steps", a->opt.steps, "decode steps after the prefix (default: up to 64 the dump holds)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 31));
  sub->add_option("--answer", a->answer,
                  "START:END, the dump's token positions [START, END) that answer a task prompt (a needle's "
                  "value): report how many of them dense and sparse decoding predict under teacher forcing "
                  "(they must fall within the decode steps)");
  sub->add_option("--budget", a->sweep.budgets,
                  "budgets of pq / clusterkv (default 0.1); squeeze ranks to a budget with -o rank_budget=B");
  sub->add_option("--rerank", a->sweep.reranks,
                  "pq, clusterkv rerank factors F: the index proposes F x budget rows, exact q.k over the prefix keys "
                  "keeps the budget (1: none, the default)")
      ->type_name("FLOAT");
  sub->add_option("--top-p", a->sweep.top_ps,
                  "pq, clusterkv adaptive budgets P: of each budget's rows, best first, the fewest whose softmax mass "
                  "as the index estimates it reaches P (0: a fixed budget, the default)")
      ->type_name("P");
  sub->add_flag("--estimated-zone", a->opt.estimated_zone,
                "clusterkv, squeeze: also decode each setting with every cluster's left-out rows attended as one "
                "estimated entry (centroid score weighted by their count, their mean value; RetroInfer), reported as "
                "the setting with ' +est'");
  sub->add_flag("--share-kv-head", a->opt.share_kv_head,
                "one selection per KV head per step, from the mean of its query heads' queries (the rows a "
                "grouped-query engine fetches once for the group); the topk and heavy baselines share theirs too");
  sub->add_option("--min-collisions", a->sweep.min_collisions, "lsh collision thresholds; default the artifact's");
  sub->add_option("-o,--option", a->sweep.options,
                  "a query option of a kind as NAME=VALUE (e.g. rank_budget=0.1 for squeeze); repeat to sweep");
  sub->add_option("--quantile", a->sweep.quantiles, "squeeze quantiles; default every calibrated one")
      ->type_name("FLOAT");
  sub->add_option("--baseline", a->opt.baselines,
                  "also decode with a selection of the same row count: window (sinks + most recent rows), topk "
                  "(exact top rows by q.k at each step), heavy (a static heavy-hitter set: the rows with the most "
                  "attention from the prefix's own queries, chosen once after the prefill)")
      ->check(CLI::IsMember({"window", "topk", "heavy"}));
  sub->add_option("--window-sinks", a->opt.window_sinks, "first rows the window baseline keeps")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 31));
  sub->add_option("--csv", a->sweep.csv, "write one row per (artifact, setting, baseline)");
  sub->add_option("--plot", a->sweep.plot, "write an SVG of KL and top-1 agreement vs selected fraction");
  sub->add_flag("--json", flags.json, "machine-readable output");
  sub->add_flag("-q,--quiet", flags.quiet, "no progress");
  return {sub, [a, &flags] { return run_eval_decode(*a, flags); }};
}

}  // namespace kvtool::cmd
