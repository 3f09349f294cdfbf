// `kvtool eval-decode` (kvtool/eval_decode.h): dense and sparse decode runs of a llama2.c model over
// a dump's tokens, the sparse rows chosen through a runtime pool.
#include "kvtool/eval_decode.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>
#include <utility>

#include "impl/estimated_zone.h"
#include "impl/eval_parts.h"
#include "kvtool/admission.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/decoding_model.h"
#include "kvtool/llama2c.h"
#include "kvtool/pool.h"
#include "kvtool/progress.h"
#include "kvtool/query.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

std::vector<double> log_softmax(const std::vector<float>& logits) {
  const double mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float x : logits) sum += std::exp(x - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lse;
  return out;
}

template <typename T>
int32_t argmax(const std::vector<T>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// KL(p || q) of two log-probability vectors, in nats.
double kl_divergence(const std::vector<double>& lp, const std::vector<double>& lq) {
  double kl = 0;
  for (size_t i = 0; i < lp.size(); ++i) kl += std::exp(lp[i]) * (lp[i] - lq[i]);
  return std::max(0.0, kl);
}

// The model and what every run replays: the dump's tokens.
struct Decoder {
  std::unique_ptr<DecodingModel> model;
  std::vector<int32_t> tokens;
  int64_t layers = 0, kv_heads = 0, q_heads = 0, head_dim = 0, group = 1;
  Decoder(const std::string& path, int threads)
      : model(open_decoding_model(path, GgufDecoderOptions{threads, false})) {}
};

// Checks that `dump` was produced by the model (same checkpoint, geometry, positions 0..T-1, tokens
// in its vocabulary) and reads its tokens.
void bind_decoder(Decoder& dec, const DumpReader& dump) {
  const auto& info = dump.info();
  const DecodingShape c = dec.model->shape();
  KVT_CHECK(info.id.model_artifact_sha256 == dec.model->sha256_hex(), MODEL_MISMATCH,
            "the dump was produced by model " << info.id.model_artifact_sha256 << ", not by this model file ("
                                              << dec.model->sha256_hex() << ")");
  KVT_CHECK(info.geo.layers == c.layers && info.geo.kv_heads == c.kv_heads && info.geo.head_dim == c.head_dim &&
                info.geo.q_heads == c.heads,
            MODEL_MISMATCH, "the dump's geometry differs from the model's");
  KVT_CHECK(info.has_tokens, USAGE, "the dump has no /kv/tokens: eval-decode replays the dump's tokens");
  if (info.has_positions) {
    const auto pos = dump.positions();
    for (size_t i = 0; i < pos.size(); ++i)
      KVT_CHECK(pos[i] == static_cast<int64_t>(i), USAGE,
                "eval-decode needs a dump whose row i is position i (row " << i << " is position " << pos[i] << ")");
  }
  for (int64_t t : dump.tokens()) {
    KVT_CHECK(t >= 0 && t < c.vocab, MODEL_MISMATCH, "dump token " << t << " is outside the model's vocabulary");
    dec.tokens.push_back(static_cast<int32_t>(t));
  }
  dec.layers = c.layers;
  dec.kv_heads = c.kv_heads;
  dec.q_heads = c.heads;
  dec.head_dim = c.head_dim;
  dec.group = c.heads / c.kv_heads;
}

// The dense reference of one prefix: its prefilled cache, the teacher-forced next-token
// log-probabilities per step, and dense greedy decoding's tokens (greedy[0] follows the prefill,
// greedy[s + 1] is step s's argmax).
struct DenseRun {
  int64_t E = 0, N = 0;
  int64_t answer_begin = -1, answer_end = -1;  // EvalDecodeOptions::answer_*
  std::any prefill;
  std::vector<std::vector<double>> logp;
  std::vector<int32_t> greedy;
  double ppl = 0;
};

DenseRun dense_run(Decoder& dec, int64_t E, int64_t N) {
  DenseRun r;
  r.E = E;
  r.N = N;
  std::vector<float> q, k, v, logits;
  dec.model->prefill(dec.tokens, static_cast<int32_t>(E), logits);
  r.prefill = dec.model->save_cache();
  r.greedy.push_back(argmax(logits));
  double nll = 0;
  for (int64_t s = 0; s < N; ++s) {
    dec.model->forward(dec.tokens[E + s], static_cast<int32_t>(E + s), q, k, v, logits);
    r.logp.push_back(log_softmax(logits));
    nll -= r.logp.back()[dec.tokens[E + s + 1]];
  }
  r.ppl = std::exp(nll / static_cast<double>(N));
  dec.model->restore_cache(r.prefill);
  for (int64_t s = 0; s < N; ++s) {
    dec.model->forward(r.greedy.back(), static_cast<int32_t>(E + s), q, k, v, logits);
    r.greedy.push_back(argmax(logits));
  }
  return r;
}

// What a sparse run attends to in the prefix [0, E): rows per query, and per KV head the union
// over its query heads (the select hook is called for query heads 0, 1, ... of each layer in turn).
struct Tally {
  int64_t E = 0, group = 1;
  std::vector<int64_t> mark;
  int64_t stamp = 0, open_union = -1;
  double rows = 0, unions = 0;
  int64_t queries = 0, groups = 0;
  Tally(int64_t e, int64_t g) : E(e), group(g), mark(static_cast<size_t>(e), 0) {}
  void close() {
    if (open_union >= 0) unions += static_cast<double>(open_union), ++groups;
    open_union = -1;
  }
  void add(int32_t q_head, const std::vector<int32_t>& chosen) {
    if (q_head % group == 0 || open_union < 0) close(), open_union = 0, ++stamp;
    for (int32_t r : chosen) {
      if (r >= E) break;  // ascending: the decode rows follow
      rows += 1;
      if (mark[static_cast<size_t>(r)] != stamp) mark[static_cast<size_t>(r)] = stamp, ++open_union;
    }
    ++queries;
  }
  double fraction() const { return queries ? rows / static_cast<double>(queries * E) : 0; }
  double union_fraction() const { return groups ? unions / static_cast<double>(groups * E) : 0; }
};

// Adds the decode rows [E, pos] (weight 0) to `out`, which holds prefix rows.
void add_decode_rows(int64_t E, int32_t pos, AttentionRows& out) {
  for (int64_t r = E; r <= pos; ++r) out.rows.push_back(static_cast<int32_t>(r)), out.log_weight.push_back(0.f);
}

// A receipt's rows: the always-included ones and the candidates (a sampled candidate weighted by
// -log of its inclusion probability), ascending and unique, the decode rows after them.
void receipt_rows(const CandidateReceipt& rc, int64_t E, int32_t pos, AttentionRows& out) {
  std::vector<std::pair<int32_t, float>> rw;
  for (int64_t r : rc.always_included)
    if (r < E) rw.emplace_back(static_cast<int32_t>(r), 0.f);
  for (size_t i = 0; i < rc.candidates.size(); ++i) {
    const int64_t r = rc.candidates[i];
    if (r >= E) continue;
    if (rc.inclusion.empty()) {
      rw.emplace_back(static_cast<int32_t>(r), 0.f);
    } else if (rc.inclusion[i] > 0) {
      rw.emplace_back(static_cast<int32_t>(r), static_cast<float>(-std::log(std::min(1.0, rc.inclusion[i]))));
    }
  }
  std::sort(rw.begin(), rw.end());  // a row both always included and sampled keeps weight 0 (first)
  out.rows.clear();
  out.log_weight.clear();
  for (size_t i = 0; i < rw.size(); ++i)
    if (i == 0 || rw[i].first != rw[i - 1].first)
      out.rows.push_back(rw[i].first), out.log_weight.push_back(rw[i].second);
  add_decode_rows(E, pos, out);
}

// The prefix keys [0, E) of every (layer, kv head) as the dump holds them (lsh receipts and the
// exact top-k baseline score against them).
struct PrefixKeys {
  std::vector<std::vector<float>> data;
  std::vector<KeyRows> rows;  // [layer * kv_heads + kv_head]
};

PrefixKeys prefix_keys(const DumpReader& dump, int64_t E) {
  const auto& g = dump.info().geo;
  PrefixKeys pk;
  for (int64_t l = 0; l < g.layers; ++l)
    for (int64_t h = 0; h < g.kv_heads; ++h) {
      pk.data.emplace_back(static_cast<size_t>(E * g.head_dim));
      dump.read_k(l, h, 0, E, pk.data.back().data());
    }
  for (const auto& k : pk.data) pk.rows.push_back(KeyRows{k.data(), E, g.head_dim});
  return pk;
}

// Which query heads a selection applies to: the artifact's layers (the others attend densely).
struct LayerRange {
  int64_t first = 0, last = -1;
  bool covers(int32_t l) const { return l >= first && l <= last; }
};

// The pool's selection, queried through a lease as a decode engine would.
AttentionSelect pool_select(const Lease& lease, const QueryParams& params, const PrefixKeys& keys, const Decoder& dec,
                            LayerRange layers, int64_t E) {
  return
      [&lease, &params, &keys, &dec, layers, E](int32_t l, int32_t h, const float* q, int32_t pos, AttentionRows& out) {
        if (!layers.covers(l)) return false;
        const KeyRows& kr = keys.rows[static_cast<size_t>(l * dec.kv_heads + h / dec.group)];
        receipt_rows(lease.query(l, h, q, pos, params, &kr), E, pos, out);
        return true;
      };
}

// The window baseline: the first `sinks` rows and the most recent prefix rows, `n` in all.
AttentionSelect window_select(LayerRange layers, int64_t E, int64_t n, int64_t sinks) {
  return [layers, E, n, sinks](int32_t l, int32_t, const float*, int32_t pos, AttentionRows& out) {
    if (!layers.covers(l)) return false;
    out.rows.clear();
    out.log_weight.clear();
    const int64_t s = std::min(sinks, n);
    for (int64_t r = 0; r < s; ++r) out.rows.push_back(static_cast<int32_t>(r));
    for (int64_t r = std::max(s, E - (n - s)); r < E; ++r) out.rows.push_back(static_cast<int32_t>(r));
    out.log_weight.assign(out.rows.size(), 0.f);
    add_decode_rows(E, pos, out);
    return true;
  };
}

// q·k of every prefix row [0, E) as (-score, row): sorted ascending, the rows of highest score
// first, ties to the lower row (the exact top-k's order and recall@k's).
void prefix_scores(const KeyRows& kr, const float* q, int64_t E, std::vector<std::pair<float, int32_t>>& scored) {
  scored.resize(static_cast<size_t>(E));
  for (int64_t r = 0; r < E; ++r) {
    float s = 0;
    for (int64_t i = 0; i < kr.d; ++i) s += q[i] * kr.row(r)[i];
    scored[static_cast<size_t>(r)] = {-s, static_cast<int32_t>(r)};
  }
}

// The `k` (1 <= k <= E) prefix rows of highest q·k, ties to the lower row, in scored[0, k) in no
// particular order: the exact top-k baseline's rows and recall@k's reference set.
void exact_top_rows(const KeyRows& kr, const float* q, int64_t E, int64_t k,
                    std::vector<std::pair<float, int32_t>>& scored) {
  prefix_scores(kr, q, E, scored);
  std::nth_element(scored.begin(), scored.begin() + static_cast<std::ptrdiff_t>(k - 1), scored.end());
}

// The exact top-k baseline: the `n` prefix rows of highest q·k (ties to the lower row).
AttentionSelect topk_select(const PrefixKeys& keys, const Decoder& dec, LayerRange layers, int64_t E, int64_t n) {
  return [&keys, &dec, layers, E, n](int32_t l, int32_t h, const float* q, int32_t pos, AttentionRows& out) {
    if (!layers.covers(l)) return false;
    std::vector<std::pair<float, int32_t>> scored;
    const auto keep = static_cast<size_t>(std::clamp<int64_t>(n, 1, E));
    exact_top_rows(keys.rows[static_cast<size_t>(l * dec.kv_heads + h / dec.group)], q, E, static_cast<int64_t>(keep),
                   scored);
    out.rows.clear();
    for (size_t i = 0; i < keep; ++i) out.rows.push_back(scored[i].second);
    std::sort(out.rows.begin(), out.rows.end());
    out.log_weight.assign(out.rows.size(), 0.f);
    add_decode_rows(E, pos, out);
    return true;
  };
}

// recall@k: per sparse (layer, query head, step), the share of the exact top-k prefix rows by the
// head's own q·k (k = the prefix rows the selection holds) that the selection holds; the mean over
// all of them. The exact top-k baseline has recall 1.
struct RecallTally {
  RecallTally(const PrefixKeys& k, const Decoder& d, int64_t e) : keys(k), dec(d), E(e) {}
  const PrefixKeys& keys;
  const Decoder& dec;
  int64_t E;
  double sum = 0;
  int64_t count = 0;
  std::vector<std::pair<float, int32_t>> scored;
  std::vector<uint8_t> top;
  void add(int32_t l, int32_t h, const float* q, const std::vector<int32_t>& rows) {
    int64_t k = 0;
    for (int32_t r : rows) k += r < E;
    if (k == 0) return;
    exact_top_rows(keys.rows[static_cast<size_t>(l * dec.kv_heads + h / dec.group)], q, E, k, scored);
    top.assign(static_cast<size_t>(E), 0);
    for (int64_t i = 0; i < k; ++i) top[static_cast<size_t>(scored[static_cast<size_t>(i)].second)] = 1;
    int64_t hits = 0;
    for (int32_t r : rows) hits += r < E && top[static_cast<size_t>(r)];
    sum += static_cast<double>(hits) / static_cast<double>(k);
    ++count;
  }
  double mean() const { return count ? sum / static_cast<double>(count) : 1.0; }
};

// One selection per KV head (EvalDecodeOptions::share_kv_head): the group's first query head
// selects with the group's mean query, the group's other heads reuse its rows.
AttentionSelect shared_per_kv_head(AttentionSelect inner, const Decoder& dec) {
  struct Shared {
    AttentionRows rows;
    bool sparse = false;
    std::vector<float> q;
  };
  auto st = std::make_shared<Shared>();
  st->q.resize(static_cast<size_t>(dec.head_dim));
  return [inner = std::move(inner), st, group = dec.group, d = dec.head_dim](int32_t l, int32_t h, const float* q,
                                                                             int32_t pos, AttentionRows& out) {
    if (h % group == 0) {
      group_mean_query(q, group, d, st->q.data());  // the group's heads follow q (llama2c.h)
      st->sparse = inner(l, h, st->q.data(), pos, st->rows);
    }
    if (st->sparse) out = st->rows;
    return st->sparse;
  };
}

// Each prefix row's attention summed over the prefix's own queries (causal softmax of q·k/sqrt(d)
// in double), per (layer, query head): H2O's accumulated attention, from a second dense prefill.
std::vector<std::vector<double>> accumulated_attention(Decoder& dec, const PrefixKeys& keys, int64_t E) {
  std::vector<std::vector<double>> acc(static_cast<size_t>(dec.layers * dec.q_heads),
                                       std::vector<double>(static_cast<size_t>(E), 0.0));
  std::vector<double> p;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dec.head_dim));
  const AttentionSelect observe = [&](int32_t l, int32_t h, const float* q, int32_t pos, AttentionRows&) {
    const KeyRows& kr = keys.rows[static_cast<size_t>(l * dec.kv_heads + h / dec.group)];
    p.assign(static_cast<size_t>(pos) + 1, 0.0);
    double mx = -INFINITY, sum = 0;
    for (int32_t r = 0; r <= pos; ++r) {
      double s = 0;
      for (int64_t i = 0; i < kr.d; ++i) s += static_cast<double>(q[i]) * kr.row(r)[i];
      mx = std::max(mx, p[static_cast<size_t>(r)] = s * scale);
    }
    for (double& x : p) sum += (x = std::exp(x - mx));
    auto& a = acc[static_cast<size_t>(l * dec.q_heads + h)];
    for (int32_t r = 0; r <= pos; ++r) a[static_cast<size_t>(r)] += p[static_cast<size_t>(r)] / sum;
    return false;  // dense: the prefill is only observed
  };
  std::vector<float> q, k, v, logits;
  dec.model->reset();
  for (int64_t pos = 0; pos < E; ++pos)
    dec.model->forward(dec.tokens[pos], static_cast<int32_t>(pos), q, k, v, logits, observe);
  return acc;
}

// The static heavy-hitter baseline: per query head (or, shared, per KV head from its heads' summed
// scores) the `n` prefix rows of most accumulated attention (ties to the lower row), fixed for
// every step.
AttentionSelect heavy_select(const std::vector<std::vector<double>>& acc, const Decoder& dec, LayerRange layers,
                             int64_t E, int64_t n, bool shared) {
  auto sets = std::make_shared<std::vector<std::vector<int32_t>>>(acc.size());
  const auto keep = static_cast<size_t>(std::clamp<int64_t>(n, 1, E));
  for (size_t lh = 0; lh < acc.size(); ++lh) {
    std::vector<double> score = acc[lh];
    if (shared) {
      const size_t first = lh - lh % static_cast<size_t>(dec.group);
      for (size_t i = 0; i < static_cast<size_t>(E); ++i) {
        score[i] = 0;
        for (size_t g = 0; g < static_cast<size_t>(dec.group); ++g) score[i] += acc[first + g][i];
      }
    }
    std::vector<int32_t> order(static_cast<size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                      [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    order.resize(keep);
    std::sort(order.begin(), order.end());
    (*sets)[lh] = std::move(order);
  }
  return [sets, layers, E, q_heads = dec.q_heads](int32_t l, int32_t h, const float*, int32_t pos, AttentionRows& out) {
    if (!layers.covers(l)) return false;
    out.rows = (*sets)[static_cast<size_t>(l * q_heads + h)];
    out.log_weight.assign(out.rows.size(), 0.f);
    add_decode_rows(E, pos, out);
    return true;
  };
}

// Teacher-forced sparse decoding against the dense reference, then free-running greedy decoding
// until it leaves dense greedy decoding. Fills the metrics of `res`.
void sparse_run(Decoder& dec, const DenseRun& dense, const PrefixKeys& keys, const AttentionSelect& select,
                DecodeResult& res) {
  Tally tally(dense.E, dec.group);
  RecallTally recall(keys, dec, dense.E);
  res.answer_tokens = res.answer_correct = res.answer_correct_dense = 0;  // a baseline starts from its artifact's
  const AttentionSelect counted = [&](int32_t l, int32_t h, const float* q, int32_t pos, AttentionRows& out) {
    const bool sparse = select(l, h, q, pos, out);
    if (sparse) tally.add(h, out.rows), recall.add(l, h, q, out.rows);
    return sparse;
  };
  std::vector<float> q, k, v, logits;
  dec.model->restore_cache(dense.prefill);
  double kl_sum = 0, nll = 0;
  int64_t agree = 0;
  for (int64_t s = 0; s < dense.N; ++s) {
    const int64_t p = dense.E + s;
    dec.model->forward(dec.tokens[p], static_cast<int32_t>(p), q, k, v, logits, counted);
    const auto lp = log_softmax(logits);
    if (p + 1 >= dense.answer_begin && p + 1 < dense.answer_end) {
      ++res.answer_tokens;
      res.answer_correct += argmax(lp) == dec.tokens[p + 1];
      res.answer_correct_dense += argmax(dense.logp[s]) == dec.tokens[p + 1];
    }
    const double kl = kl_divergence(dense.logp[s], lp);
    kl_sum += kl;
    res.max_kl = std::max(res.max_kl, kl);
    agree += argmax(lp) == argmax(dense.logp[s]);
    nll -= lp[dec.tokens[p + 1]];
  }
  tally.close();
  const auto N = static_cast<double>(dense.N);
  res.steps = dense.N;
  res.mean_kl = kl_sum / N;
  res.top1_agreement = static_cast<double>(agree) / N;
  res.ppl_dense = dense.ppl;
  res.ppl_sparse = std::exp(nll / N);
  res.selected_fraction = tally.fraction();
  res.selected_fraction_kv_union = tally.union_fraction();
  res.recall_at_k = recall.mean();
  dec.model->restore_cache(dense.prefill);
  res.diverge_step = -1;
  res.greedy_common.assign(1, dense.greedy[0]);  // the prefill is dense in both runs
  for (int64_t s = 0; s < dense.N && res.diverge_step < 0; ++s) {
    dec.model->forward(dense.greedy[s], static_cast<int32_t>(dense.E + s), q, k, v, logits, select);
    const int32_t next = argmax(logits);
    if (next == dense.greedy[s + 1]) {
      res.greedy_common.push_back(next);
      continue;
    }
    res.diverge_step = s;
    res.diverge_dense_token = dense.greedy[s + 1];
    res.diverge_sparse_token = next;
  }
}

// What evaluating one artifact needs besides the artifact: the shared decoder, pool and dense
// references, which later artifacts with the same prefix reuse.
struct Session {
  const DumpReader& dump;
  const EvalDecodeOptions& opt;
  Decoder dec;
  Pool pool{PoolOptions{}};
  std::map<int64_t, DenseRun> dense;                                // by prefix rows
  std::map<int64_t, PrefixKeys> keys;                               // by prefix rows
  std::map<int64_t, std::vector<std::vector<double>>> accumulated;  // by prefix rows (heavy baseline)
  Session(const DumpReader& d, const EvalDecodeOptions& o) : dump(d), opt(o), dec(o.model_path, o.threads) {}
};

// Decode steps for a prefix of E rows: the dump must hold the steps' tokens and their targets.
int64_t decode_steps(const Session& ss, int64_t E) {
  const int64_t left = static_cast<int64_t>(ss.dec.tokens.size()) - E - 1;
  KVT_CHECK(left >= 1, USAGE,
            "the dump has no tokens after the artifact's prefix of " << E << " rows to decode (it has "
                                                                     << ss.dec.tokens.size() << ")");
  const int64_t N = ss.opt.steps > 0 ? ss.opt.steps : std::min<int64_t>(64, left);
  KVT_CHECK(N <= left, USAGE,
            "steps " << N << " needs " << E + N + 1 << " dump tokens (the prefix, the steps and their targets); "
                     << "the dump has " << ss.dec.tokens.size());
  const int64_t b = ss.opt.answer_begin, e = ss.opt.answer_end;
  KVT_CHECK(b < 0 || (b > E && b < e && e <= E + N + 1), USAGE,
            "the answer's tokens [" << b << ", " << e << ") must be predicted within the decode steps: positions "
                                    << E + 1 << " to " << E + N << " after the prefix of " << E << " rows and " << N
                                    << " steps");
  return N;
}

// Every swept name must be some kind's query option: the sweep spans artifacts of several kinds,
// so a kind ignores the others' names, but a name no kind takes is a misspelling (USAGE).
void check_sweep_names(const std::map<std::string, std::vector<std::string>>& sweep) {
  std::set<std::string> known;
  for (const auto& name : kind_names())
    for (const auto& qo : find_kind(name)->query_options) known.insert(qo.name);
  for (const auto& [name, values] : sweep) {
    if (known.count(name)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    KVT_THROW(USAGE, "query option '" << printable(name) << "' is not taken by any kind (" << list << ")");
  }
}

// The settings of the artifact's kind that the sweep names (options of other kinds ignored).
std::vector<eval::Setting> decode_settings(const ArtifactReader& r, const KindSpec& kind, const EvalDecodeOptions& o) {
  EvalOptions eo;
  for (const auto& qo : kind.query_options)
    if (auto it = o.sweep.find(qo.name); it != o.sweep.end()) eo.sweep[qo.name] = it->second;
  return eval::eval_settings(r, kind, eo, IndexedRows::of(r).count());
}

DecodeResult baseline(Session& ss, const DenseRun& dense, const DecodeResult& art, const std::string& name,
                      LayerRange layers) {
  DecodeResult b = art;
  b.kind = name;
  b.max_kl = 0;
  const int64_t n = std::max<int64_t>(1, std::llround(art.selected_fraction * static_cast<double>(dense.E)));
  const int64_t E = dense.E;
  AttentionSelect sel;
  if (name == "window") {
    sel = window_select(layers, E, n, ss.opt.window_sinks);
  } else if (name == "topk") {
    sel = topk_select(ss.keys.at(E), ss.dec, layers, E, n);
    if (ss.opt.share_kv_head) sel = shared_per_kv_head(sel, ss.dec);
  } else {
    if (!ss.accumulated.count(E)) ss.accumulated.emplace(E, accumulated_attention(ss.dec, ss.keys.at(E), E));
    sel = heavy_select(ss.accumulated.at(E), ss.dec, layers, E, n, ss.opt.share_kv_head);
  }
  sparse_run(ss.dec, dense, ss.keys.at(E), sel, b);
  return b;
}

void evaluate_artifact(Session& ss, const std::string& path, std::vector<DecodeResult>& out, Progress& progress) {
  ArtifactReader r(path);
  const KindSpec& kind = admit_artifact(r, {});
  check_source(r.source(), ss.dump, false);
  const int64_t E = IndexedRows::of(r).coverage_end;
  if (!ss.dense.count(E)) {
    DenseRun run = dense_run(ss.dec, E, decode_steps(ss, E));
    run.answer_begin = ss.opt.answer_begin, run.answer_end = ss.opt.answer_end;
    ss.dense.emplace(E, std::move(run));
  }
  if (!ss.keys.count(E)) ss.keys.emplace(E, prefix_keys(ss.dump, E));
  const DenseRun& dense = ss.dense.at(E);
  PublishRequest req;
  req.key = path;
  req.artifact = path;
  ss.pool.publish(req);
  const json& params = r.manifest()["params"];
  const LayerRange layers{params["layers"][0].get<int64_t>(), params["layers"][1].get<int64_t>()};
  SelectorSet parts(r);
  impl::EstimatedZone zone(parts, ss.dump, E, ss.dec.group);
  const bool zone_applies = ss.opt.estimated_zone && zone.applies();
  {
    const Lease lease = ss.pool.acquire(path);  // released before retire, which waits for leases
    for (const auto& st : decode_settings(r, kind, ss.opt)) {
      DecodeResult res;
      res.artifact = path;
      res.kind = r.kind();
      res.setting = st.label;
      res.budget = st.params->setting();
      AttentionSelect select = pool_select(lease, *st.params, ss.keys.at(E), ss.dec, layers, E);
      if (ss.opt.share_kv_head) select = shared_per_kv_head(select, ss.dec);
      sparse_run(ss.dec, dense, ss.keys.at(E), select, res);
      out.push_back(res);
      for (const auto& b : ss.opt.baselines) out.push_back(baseline(ss, dense, res, b, layers));
      if (zone_applies) {  // the same rows fetched, the rest estimated
        DecodeResult est;
        est.artifact = path, est.kind = r.kind(), est.setting = st.label + " +est", est.budget = res.budget;
        est.estimated_zone = true;
        sparse_run(ss.dec, dense, ss.keys.at(E), zone.wrap(select), est);
        out.push_back(est);
      }
    }
  }
  ss.pool.retire(path);
  progress.advance();
}

}  // namespace

namespace {

std::string decode_text(const Llama2cTokenizer& tok, const std::vector<int32_t>& tokens) {
  std::string text;
  int32_t prev = 0;  // the prefix's last token is not BOS: a leading space is kept
  for (int32_t t : tokens) text += tok.decode(std::exchange(prev, t), t);
  return text;
}

}  // namespace

json DecodeResult::to_json(const Llama2cTokenizer* tokenizer) const {
  // A budget as a number: the fraction of the indexed rows, or the row count; other kinds' settings
  // (squeeze's quantile, lsh's collisions) as their options.
  json b = budget;
  if (budget.is_object() && budget.contains("budget") && budget["budget"].is_string()) {
    const Budget parsed = Budget::parse(budget["budget"].get<std::string>());
    b = parsed.fraction ? json(parsed.value) : json(static_cast<int64_t>(parsed.value));
  }
  const bool diverged = diverge_step >= 0;
  json j{{"artifact", artifact},
         {"kind", kind},
         {"setting", setting},
         {"estimated_zone", estimated_zone},
         {"budget", b},
         {"steps", steps},
         {"selected_fraction", selected_fraction},
         {"selected_fraction_kv_union", selected_fraction_kv_union},
         {"recall_at_k", recall_at_k},
         {"mean_kl", mean_kl},
         {"max_kl", max_kl},
         {"top1_agreement", top1_agreement},
         {"ppl_dense", ppl_dense},
         {"ppl_sparse", ppl_sparse},
         {"diverge_step", diverged ? json(diverge_step) : json(nullptr)},
         {"diverge_tokens",
          diverged ? json{{"dense", diverge_dense_token}, {"sparse", diverge_sparse_token}} : json(nullptr)}};
  j["answer"] = answer_tokens == 0 ? json(nullptr)
                                   : json{{"tokens", answer_tokens},
                                          {"correct", answer_correct},
                                          {"exact", answer_correct == answer_tokens},
                                          {"dense_correct", answer_correct_dense},
                                          {"dense_exact", answer_correct_dense == answer_tokens}};
  if (tokenizer) {
    const int32_t last = greedy_common.empty() ? 0 : greedy_common.back();
    j["diverge_text"] = diverged ? json{{"common", decode_text(*tokenizer, greedy_common)},
                                        {"dense", tokenizer->decode(last, diverge_dense_token)},
                                        {"sparse", tokenizer->decode(last, diverge_sparse_token)}}
                                 : json(nullptr);
  }
  return j;
}

json EvalDecodeReport::to_json(const Llama2cTokenizer* tokenizer) const {
  json rs = json::array();
  for (const auto& r : results) rs.push_back(r.to_json(tokenizer));
  return json{{"schema_version", kJsonSchemaVersion},
              {"source", source},
              {"model_sha256", model_sha256},
              {"share_kv_head", share_kv_head},
              {"results", rs}};
}

EvalDecodeReport eval_decode(const std::vector<std::string>& artifacts, const DumpReader& dump,
                             const EvalDecodeOptions& opt) {
  KVT_CHECK(!artifacts.empty(), USAGE, "eval-decode needs at least one artifact");
  KVT_CHECK(opt.steps >= 0 && opt.steps <= kMaxDumpTokens, USAGE, "steps must be between 0 and " << kMaxDumpTokens);
  KVT_CHECK(opt.window_sinks >= 0, USAGE, "window sinks must not be negative");
  for (const auto& b : opt.baselines)
    KVT_CHECK(b == "window" || b == "topk" || b == "heavy", USAGE,
              "unknown baseline '" << b << "' (window, topk, heavy)");
  for (size_t i = 0; i < artifacts.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      KVT_CHECK(artifacts[i] != artifacts[j], USAGE, "artifact '" << artifacts[i] << "' is named twice");
  check_sweep_names(opt.sweep);
  Session ss(dump, opt);
  bind_decoder(ss.dec, dump);
  EvalDecodeReport rep;
  rep.source = dump.path();
  rep.model_sha256 = ss.dec.model->sha256_hex();
  rep.share_kv_head = opt.share_kv_head;
  Progress progress("kvtool eval-decode", static_cast<int64_t>(artifacts.size()), opt.quiet);
  for (const auto& a : artifacts) evaluate_artifact(ss, a, rep.results, progress);
  progress.finish();
  return rep;
}

}  // namespace kvtool
