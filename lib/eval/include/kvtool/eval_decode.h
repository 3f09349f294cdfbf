// Decode-level evaluation (docs/quality.md, "Decode"): what an index's sparse attention does to a
// model's output. A llama2.c model prefills the artifact's prefix densely, then decodes the dump's
// next tokens (teacher forced, so dense and sparse see the same tokens) while each query head of
// the artifact's layers attends only to the prefix rows that a runtime pool selects for it
// (published and leased as a decode engine does), plus the always-included rows and the decode
// rows. The sparse run keeps its own K/V for the decode rows.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kvtool/json.h"

namespace kvtool {

class DumpReader;
class Llama2cTokenizer;

struct EvalDecodeOptions {
  // The model the dump was produced with (its SHA-256 must match): a llama2.c checkpoint or a GGUF
  // file (kvtool/decoding_model.h).
  std::string model_path;
  int threads = 1;  // a GGUF model's batched prefill
  // Decode steps after the prefix; 0: min(64, the dump's tokens after the prefix - 1).
  int64_t steps = 0;
  // The answer of a task prompt (a needle's value): the dump's tokens at positions [answer_begin,
  // answer_end), each predicted under teacher forcing within the decode steps. Each result then
  // reports how many of them dense and sparse decoding predict (argmax), and whether all. -1: none.
  int64_t answer_begin = -1, answer_end = -1;
  // Swept values per query option of each artifact's kind, as EvalOptions::sweep (an option the
  // kind does not take is ignored; none named: the kind's default sweep).
  std::map<std::string, std::vector<std::string>> sweep;
  // Selections of the same row count as each artifact's, for scale: "window" (the first
  // window_sinks rows and the most recent prefix rows), "topk" (the exact top rows by q·k at each
  // step) and "heavy" (a static heavy-hitter set: the rows with the most attention summed over the
  // prefix's own queries, chosen once after the prefill, as H2O accumulates it).
  std::vector<std::string> baselines;
  int64_t window_sinks = 4;
  // One selection per KV head and step, from the mean of its query heads' queries
  // (group_mean_query): the rows a grouped-query engine fetches once for the group. The topk and
  // heavy baselines then choose per KV head too (summed scores).
  bool share_kv_head = false;
  // RetroInfer's estimated zone (cluster kinds: clusterkv, squeeze): each setting is also decoded
  // with every cluster's left-out rows attended as one estimated entry (the centroid's score
  // weighted by their count, their mean value), reported as the setting with " +est" appended.
  bool estimated_zone = false;
  bool quiet = true;
};

// One artifact (or baseline) at one setting.
struct DecodeResult {
  std::string artifact, kind, setting;  // kind "window" / "topk" for a baseline matched to `artifact`
  json budget;                          // the setting's options (e.g. {"budget": 0.1})
  bool estimated_zone = false;          // EvalDecodeOptions::estimated_zone's second run
  int64_t steps = 0;
  // Prefix rows attended per query as a fraction of the prefix, and per KV head the union over
  // its query heads (the rows a GQA engine must fetch), over the artifact's layers.
  double selected_fraction = 0, selected_fraction_kv_union = 0;
  // The share of the exact top-k prefix rows by q·k (k = the rows selected, per query head and
  // step) that the selection holds, averaged over the artifact's layers, heads and steps.
  double recall_at_k = 0;
  double mean_kl = 0, max_kl = 0;  // KL(dense || sparse) of the next-token distribution, nats
  // EvalDecodeOptions::answer_*: the answer's tokens (0: no answer asked for) and how many of them
  // sparse and dense decoding predict (argmax under teacher forcing).
  int64_t answer_tokens = 0, answer_correct = 0, answer_correct_dense = 0;
  double top1_agreement = 0;             // steps whose argmax tokens agree
  double ppl_dense = 0, ppl_sparse = 0;  // perplexity of the dump's continuation
  // First step at which free-running sparse greedy decoding leaves dense greedy decoding; -1: none
  // within the steps.
  int64_t diverge_step = -1;
  // The greedy tokens both runs produced (after the prefix, up to the divergence or the last step),
  // then at the divergence dense's next token and sparse's (-1 without one).
  std::vector<int32_t> greedy_common;
  int32_t diverge_dense_token = -1, diverge_sparse_token = -1;
  // With a tokenizer, "diverge_text": {"common", "dense", "sparse"} (the decoded tokens; null
  // without a divergence) beside "diverge_tokens": {"dense", "sparse"} (ids; null without one).
  json to_json(const Llama2cTokenizer* tokenizer = nullptr) const;
};

struct EvalDecodeReport {
  std::string source, model_sha256;
  bool share_kv_head = false;
  std::vector<DecodeResult> results;
  // {"schema_version", "source", "model_sha256", "share_kv_head", "results": [...]}; each result
  // with its divergence's text when a tokenizer of the model is given.
  json to_json(const Llama2cTokenizer* tokenizer = nullptr) const;
};

// USAGE for bad options; MODEL_MISMATCH when the model is not the dump's; the binding checks of
// eval (STALE_SOURCE, PREFIX_MISMATCH, ...) for an artifact that is not the dump's.
EvalDecodeReport eval_decode(const std::vector<std::string>& artifacts, const DumpReader& dump,
                             const EvalDecodeOptions& opt);

}  // namespace kvtool
