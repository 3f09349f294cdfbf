#include "kvtool/producers.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <thread>

#include "impl/producer_identity.h"
#include "kvtool/builder.h"
#include "kvtool/error.h"
#include "kvtool/json.h"
#include "kvtool/progress.h"
#include "kvtool/prng.h"
#include "kvtool/sha256.h"

namespace kvtool {

using impl::base_identity;
using impl::check_frontier;
using impl::representation_for;

namespace {

// Interleaved-pair RoPE at one position over a [d] vector (same convention as llama2.c).
void apply_rope(float* v, int64_t d, int64_t pos, double theta) {
  for (int64_t i = 0; i < d; i += 2) {
    double freq = 1.0 / std::pow(theta, static_cast<double>(i) / static_cast<double>(d));
    double a = static_cast<double>(pos) * freq;
    double c = std::cos(a), s = std::sin(a);
    double x = v[i], y = v[i + 1];
    v[i] = static_cast<float>(x * c - y * s);
    v[i + 1] = static_cast<float>(x * s + y * c);
  }
}

}  // namespace

ModelDumpResult dump_llama2c(const ModelDumpOptions& opt, DType dtype, const IdentityOptions& ident,
                             const std::string& out_path, bool overwrite) {
  Llama2cModel model(opt.model_path);
  const auto& c = model.config();
  KVT_CHECK(opt.tokens >= 1, USAGE, "tokens must be at least 1");
  KVT_CHECK(opt.tokens <= c.seq_len, USAGE,
            "tokens " << opt.tokens << " exceeds the model's context length " << c.seq_len);
  check_frontier(ident, opt.tokens);
  std::unique_ptr<Llama2cTokenizer> tok;
  if (!opt.tokenizer_path.empty()) tok = std::make_unique<Llama2cTokenizer>(opt.tokenizer_path, c.vocab_size);
  KVT_CHECK(opt.prompt.empty() || tok, USAGE, "prompt needs tokenizer");
  std::vector<int32_t> forced = tok ? tok->encode(opt.prompt, true) : std::vector<int32_t>{1};
  const int64_t T = opt.tokens, L = c.n_layers, H = c.n_kv_heads, Hq = c.n_heads, d = c.head_dim();
  if (static_cast<int64_t>(forced.size()) > T) forced.resize(static_cast<size_t>(T));  // a longer prompt is cut

  // Per (layer, head) slices, [T, d] each.
  std::vector<float> K(static_cast<size_t>(L * H * T * d)), V(K.size());
  std::vector<float> Q(opt.queries ? static_cast<size_t>(L * Hq * T * d) : 0);
  ModelDumpResult res;
  std::vector<float> q, k, v, logits;
  int32_t token = forced[0];
  for (int64_t pos = 0; pos < T; ++pos) {
    res.tokens.push_back(token);
    model.forward(token, static_cast<int32_t>(pos), q, k, v, logits);
    for (int64_t l = 0; l < L; ++l) {
      for (int64_t h = 0; h < H; ++h) {
        size_t dst = static_cast<size_t>(((l * H + h) * T + pos) * d);
        size_t src = static_cast<size_t>(l * H * d + h * d);
        std::copy_n(k.begin() + src, d, K.begin() + dst);
        std::copy_n(v.begin() + src, d, V.begin() + dst);
      }
      if (opt.queries)
        for (int64_t h = 0; h < Hq; ++h)
          std::copy_n(q.begin() + l * Hq * d + h * d, d, Q.begin() + ((l * Hq + h) * T + pos) * d);
    }
    int32_t next;
    if (pos + 1 < static_cast<int64_t>(forced.size())) {
      next = forced[pos + 1];
    } else {
      next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    if (tok && pos > 0) res.text += tok->decode(res.tokens[pos - 1], token);
    token = next;
  }

  impl::ModelRows rows{L, H, Hq, d, T, std::move(K), std::move(V), std::move(Q), res.tokens};
  impl::write_model_dump(rows, ident, model.sha256_hex(), llama_rope_config(d), dtype,
                         "kvtool dump --llama2c (forward pass, greedy)", out_path, overwrite);
  return res;
}

namespace {

// The phases of synth_dump, in order.

constexpr double kSynthRopeTheta = 10000.0;

void check_synth_options(const SynthOptions& o, const IdentityOptions& ident) {
  KVT_CHECK(o.layers >= 1 && o.kv_heads >= 1 && o.q_heads >= 1 && o.tokens >= 1 && o.head_dim >= 2, USAGE,
            "synth geometry must be positive (head dim >= 2)");
  // The bounds every dump reader holds a dump to (identity.h): synth writes no dump kvtool refuses.
  KVT_CHECK(o.layers <= kMaxDumpLayers && o.kv_heads <= kMaxDumpHeads && o.q_heads <= kMaxDumpHeads &&
                o.head_dim <= kMaxDumpHeadDim && o.tokens <= kMaxDumpTokens,
            USAGE,
            "synth geometry beyond what a dump may hold (layers " << kMaxDumpLayers << ", heads " << kMaxDumpHeads
                                                                  << ", head_dim " << kMaxDumpHeadDim
                                                                  << ", tokens 2^31)");
  KVT_CHECK(o.head_dim % 2 == 0, USAGE, "head_dim must be even (RoPE rotates pairs)");
  KVT_CHECK(o.q_heads % o.kv_heads == 0, USAGE, "q_heads must be a multiple of kv_heads");
  KVT_CHECK(o.query_count >= 0 && o.query_count <= kMaxDumpTokens, USAGE, "query_count must be in [0, 2^31]");
  check_frontier(ident, o.tokens);
}

// The dump's identity and geometry: queries of the last query_count positions.
DumpSpec synth_spec(const SynthOptions& o, const IdentityOptions& ident) {
  const int64_t L = o.layers, H = o.kv_heads, Hq = o.q_heads, d = o.head_dim, T = o.tokens;
  DumpSpec spec;
  spec.id = base_identity(ident);
  spec.id.model_artifact_sha256 = to_hex(sha256("kvtool.synth.v1:seed=" + std::to_string(o.seed)));
  spec.id.rope_config = llama_rope_config(d, kSynthRopeTheta);
  spec.id.representation = representation_for(o.dtype);
  for (int64_t h = 0; h < Hq; ++h) spec.id.q_to_kv_head.push_back(static_cast<int32_t>(h / (Hq / H)));
  spec.geo = {L, H, T, d, Hq, std::min(T, o.query_count), o.dtype};
  spec.committed_frontier = ident.frontier;
  spec.generator = "kvtool synth v1 seed=" + std::to_string(o.seed);
  spec.synthetic = true;
  return spec;
}

// One (layer, kv head) of a synthetic dump: its keys, values and the queries of its query heads.
struct SynthSlice {
  std::vector<float> k, v, q;  // q: [group, Tq, d]
};

// Seeded per (layer, head) only, so slices are independent of one another and of the threads.
// Keys: a low-rank "semantic" part with slowly drifting topics, isotropic noise, two
// high-magnitude outlier channels in the slow (low-frequency) RoPE pairs, and a sink row.
// Queries of the heads mapped to this kv head: aligned with the key basis plus noise.
void synth_slice(const SynthOptions& o, int64_t l, int64_t h, SynthSlice& s) {
  const int64_t d = o.head_dim, T = o.tokens, Tq = std::min(T, o.query_count);
  const int64_t group = o.q_heads / o.kv_heads, rank = std::min<int64_t>(8, d);
  s.k.assign(static_cast<size_t>(T * d), 0.f);
  s.v.assign(s.k.size(), 0.f);
  s.q.assign(static_cast<size_t>(group * Tq * d), 0.f);
  std::vector<float> basis(static_cast<size_t>(rank * d));
  SplitMix64 g(part_seed(o.seed, l, h, 1));
  for (auto& x : basis) x = static_cast<float>(g.normal());
  int64_t outlier = d - 2 - 2 * static_cast<int64_t>(g.below(static_cast<uint64_t>(std::max<int64_t>(1, d / 8))));
  std::vector<double> topic(rank);
  for (auto& t : topic) t = g.normal();
  const double scale = 0.6 / std::sqrt(static_cast<double>(rank));
  for (int64_t t = 0; t < T; ++t) {
    for (auto& z : topic) z = 0.95 * z + 0.31 * g.normal();
    float* row = s.k.data() + t * d;
    for (int64_t i = 0; i < d; ++i) {
      double acc = 0;
      for (int64_t r = 0; r < rank; ++r) acc += topic[r] * basis[r * d + i];
      row[i] = static_cast<float>(scale * acc + 0.5 * g.normal());
    }
    row[outlier] += static_cast<float>(6.0 + 0.5 * g.normal());
    row[outlier + 1] += static_cast<float>(-4.0 + 0.5 * g.normal());
    if (t == 0)
      for (int64_t i = 0; i < d; ++i) row[i] *= 4.0f;
    apply_rope(row, d, t, kSynthRopeTheta);
    for (int64_t i = 0; i < d; ++i) s.v[t * d + i] = static_cast<float>(g.normal());
  }
  for (int64_t j = 0; j < group; ++j) {
    int64_t qh = h * group + j;
    SplitMix64 gq(part_seed(o.seed, l, static_cast<uint64_t>(qh), 2));
    std::vector<double> coef(rank);
    for (int64_t r = 0; r < Tq; ++r) {
      int64_t pos = T - Tq + r;
      float* row = s.q.data() + (j * Tq + r) * d;
      for (auto& cf : coef) cf = gq.normal();
      for (int64_t i = 0; i < d; ++i) {
        double acc = 0;
        for (int64_t c = 0; c < rank; ++c) acc += coef[c] * basis[c * d + i];
        row[i] = static_cast<float>(acc / std::sqrt(static_cast<double>(rank)) + 0.3 * gq.normal());
      }
      row[outlier] += 1.0f;
      apply_rope(row, d, pos, kSynthRopeTheta);
    }
  }
}

// Every slice, generated in parallel batches and written in (layer, kv head) order: the bytes do
// not depend on the thread count.
void write_synth_slices(const SynthOptions& o, DumpWriter& w, bool quiet) {
  const int64_t H = o.kv_heads, d = o.head_dim, Tq = std::min(o.tokens, o.query_count);
  const int64_t group = o.q_heads / H, parts = o.layers * H;
  KVT_CHECK(o.threads >= 0 && o.threads <= kMaxThreads, USAGE,
            "threads must be 0 (every CPU) to " << kMaxThreads << ", got " << o.threads);
  const int64_t wanted = o.threads > 0 ? o.threads : static_cast<int64_t>(std::thread::hardware_concurrency());
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(parts, wanted));
  std::vector<SynthSlice> batch(static_cast<size_t>(workers));
  Progress progress("kvtool synth", parts, quiet);
  for (int64_t base = 0; base < parts; base += workers) {
    int64_t n = std::min(workers, parts - base);
    std::vector<std::thread> ts;
    std::vector<std::exception_ptr> errs(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      ts.emplace_back([&, i] {
        try {
          synth_slice(o, (base + i) / H, (base + i) % H, batch[i]);
        } catch (...) {
          errs[i] = std::current_exception();
        }
      });
    for (auto& t : ts) t.join();
    for (auto& e : errs)
      if (e) std::rethrow_exception(e);
    for (int64_t i = 0; i < n; ++i) {
      int64_t l = (base + i) / H, h = (base + i) % H;
      w.write_kv(l, h, batch[i].k.data(), batch[i].v.data());
      for (int64_t j = 0; j < group && Tq > 0; ++j) w.write_q(l, h * group + j, batch[i].q.data() + j * Tq * d);
      progress.advance();
    }
  }
}

// The query positions (the last Tq rows) and the token ids (seeded; BOS first).
void write_synth_positions_and_tokens(const SynthOptions& o, DumpWriter& w) {
  const int64_t T = o.tokens, Tq = std::min(T, o.query_count);
  if (Tq > 0) {
    std::vector<int64_t> qp(static_cast<size_t>(Tq));
    for (int64_t j = 0; j < Tq; ++j) qp[j] = T - Tq + j;
    w.write_q_positions(qp);
  }
  std::vector<int64_t> toks(static_cast<size_t>(T));
  SplitMix64 gt(part_seed(o.seed, 0, 0, 3));
  for (auto& t : toks) t = static_cast<int64_t>(gt.below(32000));
  toks[0] = 1;
  w.write_tokens(toks);
}

}  // namespace

void synth_dump(const SynthOptions& o, const IdentityOptions& ident, const std::string& out_path, bool overwrite,
                bool quiet) {
  check_synth_options(o, ident);
  DumpWriter w(out_path, synth_spec(o, ident), overwrite);
  write_synth_slices(o, w, quiet);
  write_synth_positions_and_tokens(o, w);
  w.commit();
}

}  // namespace kvtool
