// kvtool/model_check.h: the GGUF forward pass (kvtool/gguf_model.h) over a snapshot's tokens.
#include "kvtool/model_check.h"

#include <algorithm>
#include <cmath>

#include "kvtool/error.h"
#include "kvtool/gguf_model.h"
#include "kvtool/llama_state.h"

namespace kvtool {

namespace {

// The snapshot's rows as a prompt: positions 0..T-1 in order, every token known.
std::vector<int32_t> prompt_of(const SnapshotInfo& in) {
  const int64_t T = in.geo.tokens;
  KVT_CHECK(static_cast<int64_t>(in.tokens.size()) == T, USAGE,
            "the snapshot does not record the token of each row, so the model cannot recompute it");
  for (int64_t i = 0; i < T && !in.positions.empty(); ++i)
    KVT_CHECK(in.positions[static_cast<size_t>(i)] == i, USAGE,
              "row " << i << " is at position " << in.positions[static_cast<size_t>(i)]
                     << ": the model recomputes a prompt at positions 0..T-1 (this cache was shifted or cut)");
  std::vector<int32_t> p;
  for (int64_t t : in.tokens) {
    KVT_CHECK(t >= 0 && t <= INT32_MAX, USAGE, "token " << t << " is not a token id");
    p.push_back(static_cast<int32_t>(t));
  }
  return p;
}

// [layers][n][H * d] rows into [layers][H][n][d].
std::vector<float> heads_major(const std::vector<float>& rows, int64_t L, int64_t n, int64_t H, int64_t d) {
  std::vector<float> out(rows.size());
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(rows.begin() + ((l * n + i) * H + h) * d, d, out.begin() + ((l * H + h) * n + i) * d);
  return out;
}

class ModelQueriedSnapshot final : public KvSnapshot {
 public:
  ModelQueriedSnapshot(std::unique_ptr<KvSnapshot> inner, std::vector<float> q, int64_t q_heads)
      : inner_(std::move(inner)), info_(inner_->info()), q_(std::move(q)) {
    info_.q_heads = q_heads;
    info_.geo.q_tokens = info_.geo.tokens;
    info_.q_rows.resize(static_cast<size_t>(info_.geo.tokens));
    for (int64_t i = 0; i < info_.geo.tokens; ++i) info_.q_rows[static_cast<size_t>(i)] = i;
  }
  const SnapshotInfo& info() const override { return info_; }
  void read_kv(int64_t layer, std::vector<float>& k, std::vector<float>& v) override { inner_->read_kv(layer, k, v); }
  void read_q(int64_t layer, std::vector<float>& q) override {
    const size_t n = static_cast<size_t>(info_.q_heads * info_.geo.tokens * info_.geo.head_dim);
    q.assign(q_.begin() + static_cast<ptrdiff_t>(layer * n), q_.begin() + static_cast<ptrdiff_t>((layer + 1) * n));
  }
  std::string label(char what, int64_t layer) const override {
    return what == 'Q' ? std::string("the model's recomputed queries") : inner_->label(what, layer);
  }
  void complete_meta(json& meta) const override { inner_->complete_meta(meta); }

 private:
  std::unique_ptr<KvSnapshot> inner_;
  SnapshotInfo info_;
  std::vector<float> q_;
};

}  // namespace

json ModelCheckReport::to_json() const {
  return json{
      {"model", model}, {"tolerance", tolerance}, {"max_rel_err_k", max_rel_err}, {"layer_rel_err_k", layer_rel_err}};
}

double default_model_tolerance(const std::string& cache_type, bool rounded_weights) {
  return default_state_tolerance(cache_type) + (rounded_weights ? 4e-2 : 0.0);
}

ModelCheckReport check_snapshot_model(KvSnapshot& s, const std::string& gguf, const ModelCheckOptions& o,
                                      std::vector<float>* queries) {
  const SnapshotInfo& in = s.info();
  const std::vector<int32_t> prompt = prompt_of(in);
  KVT_CHECK(!prompt.empty(), USAGE, "the snapshot holds no rows");
  GgufDecoder model(gguf, GgufDecoderOptions{o.threads, true});
  const GgufModelConfig& c = model.config();
  KVT_CHECK(c.layers == in.geo.layers && c.kv_heads == in.geo.kv_heads && c.head_dim == in.geo.head_dim, MODEL_MISMATCH,
            "the model's geometry (" << c.layers << " layers, " << c.kv_heads << " KV heads, head_dim " << c.head_dim
                                     << ") is not the snapshot's");
  const int64_t L = c.layers, n = static_cast<int64_t>(prompt.size()), H = c.kv_heads, d = c.head_dim;
  std::vector<float> k(static_cast<size_t>(L * n * H * d)), q(queries ? static_cast<size_t>(L * n * c.heads * d) : 0);
  std::vector<float> logits;
  model.prefill(prompt.data(), static_cast<int32_t>(n), 0, queries ? q.data() : nullptr, k.data(), nullptr, logits);
  const std::vector<float> mine = heads_major(k, L, n, H, d);
  ModelCheckReport r;
  r.model = gguf;
  const std::string cache_type = in.source_dtype.substr(0, in.source_dtype.find('/'));
  r.tolerance = o.tolerance.value_or(default_model_tolerance(cache_type, c.rounded_weights));
  std::vector<float> ks, vs;
  for (int64_t l = 0; l < L; ++l) {
    s.read_kv(l, ks, vs);
    double diff = 0, mx = 0;
    const size_t off = static_cast<size_t>(l * H * n * d);
    for (size_t i = 0; i < ks.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(ks[i]) - mine[off + i]));
      mx = std::max(mx, std::fabs(static_cast<double>(ks[i])));
    }
    r.layer_rel_err.push_back(mx > 0 ? diff / mx : diff);
    r.max_rel_err = std::max(r.max_rel_err, r.layer_rel_err.back());
  }
  KVT_CHECK(r.max_rel_err <= r.tolerance, MODEL_MISMATCH,
            "the model '" << gguf << "' recomputes this cache's K with a difference of " << r.max_rel_err
                          << " of max|K| (tolerance " << r.tolerance
                          << "): the cache was not written by this model over these tokens");
  if (queries) *queries = heads_major(q, L, n, c.heads, d);
  return r;
}

std::unique_ptr<KvSnapshot> with_model_queries(std::unique_ptr<KvSnapshot> inner, const std::string& gguf,
                                               const ModelCheckOptions& o, ModelCheckReport* report) {
  KVT_CHECK(inner->info().geo.q_tokens == 0, USAGE, "the snapshot has queries already; the model's would replace them");
  std::vector<float> q;
  ModelCheckReport r = check_snapshot_model(*inner, gguf, o, &q);
  if (report) *report = r;
  const int64_t q_heads = static_cast<int64_t>(q.size()) /
                          (inner->info().geo.layers * inner->info().geo.tokens * inner->info().geo.head_dim);
  return std::make_unique<ModelQueriedSnapshot>(std::move(inner), std::move(q), q_heads);
}

}  // namespace kvtool
