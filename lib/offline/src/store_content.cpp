// check_store_prompt (kvtool/store_check.h): a prompt's blocks in a cache store against the K/V the
// GGUF model computes for the prompt's tokens (formats/cache-stores.md, "A prompt's blocks").
#include <algorithm>
#include <cmath>

#include "kvtool/gguf_model.h"
#include "kvtool/model_check.h"
#include "kvtool/store_check.h"

namespace kvtool {

namespace {

// Per layer: the first (position, head) where |a - b| / max|b| passes `tol`, and the largest ratio.
struct LayerDiff {
  double worst = 0;
  int64_t position = -1, head = -1;
};

// `mine` is the model's [T][H*d] rows of one layer; `theirs` the store's [H][T][d].
LayerDiff compare_layer(const float* mine, const std::vector<float>& theirs, int64_t T, int64_t H, int64_t d,
                        double tol) {
  double mx = 0;
  for (int64_t i = 0; i < T * H * d; ++i) mx = std::max(mx, std::fabs(static_cast<double>(mine[i])));
  LayerDiff r;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t x = 0; x < d; ++x) {
        const double e = std::fabs(static_cast<double>(theirs[static_cast<size_t>((h * T + t) * d + x)]) -
                                   mine[(t * H + h) * d + x]) /
                         (mx > 0 ? mx : 1.0);
        r.worst = std::max(r.worst, e);
        if (e > tol && r.position < 0) r.position = t, r.head = h;
      }
  return r;
}

}  // namespace

json StoreContentReport::to_json() const {
  json j = found.to_json();
  j["tokens"] = tokens, j["tolerance"] = tolerance, j["max_rel_err_k"] = max_rel_err_k,
  j["max_rel_err_v"] = max_rel_err_v;
  if (first_position >= 0)
    j["first_difference"] = {{"position", first_position}, {"layer", first_layer}, {"head", first_head}};
  return j;
}

StoreContentReport check_store_prompt(const std::string& root, const StoreCheckOptions& o, const std::string& gguf,
                                      std::vector<StoreFinding>& findings) {
  const StoreModel m = read_store_model(gguf);
  StoreContentReport r;
  std::unique_ptr<KvSnapshot> snap = open_store_prompt(root, o.store, m, o.prompt, o.prompt_options, r.found);
  const SnapshotInfo& in = snap->info();
  GgufDecoder model(gguf, GgufDecoderOptions{std::max(1, o.threads), true});
  const int64_t L = m.layers, T = in.geo.tokens, H = m.kv_heads, d = m.head_dim;
  std::vector<float> k(static_cast<size_t>(L * T * H * d)), v(k.size()), logits;
  std::vector<int32_t> tokens(o.prompt.begin(), o.prompt.begin() + T);
  model.prefill(tokens.data(), static_cast<int32_t>(T), 0, nullptr, k.data(), v.data(), logits);
  r.tokens = T;
  r.tolerance = o.tolerance.value_or(default_model_tolerance(in.source_dtype, model.config().rounded_weights));
  std::vector<float> ks, vs;
  for (int64_t l = 0; l < L; ++l) {
    snap->read_kv(l, ks, vs);
    const LayerDiff dk = compare_layer(k.data() + l * T * H * d, ks, T, H, d, r.tolerance);
    const LayerDiff dv = compare_layer(v.data() + l * T * H * d, vs, T, H, d, r.tolerance);
    r.max_rel_err_k = std::max(r.max_rel_err_k, dk.worst), r.max_rel_err_v = std::max(r.max_rel_err_v, dv.worst);
    for (const LayerDiff& x : {dk, dv})
      if (x.position >= 0 && (r.first_position < 0 || x.position < r.first_position))
        r.first_position = x.position, r.first_layer = l, r.first_head = x.head;
  }
  if (r.first_position >= 0) {
    const auto block = static_cast<size_t>(r.first_position / r.found.block_tokens);
    findings.push_back({Reason::PAYLOAD_MISMATCH, r.found.files[block].front(),
                        "the block's K/V differ from what the model '" + gguf +
                            "' computes for the prompt from position " + std::to_string(r.first_position) + ", layer " +
                            std::to_string(r.first_layer) + ", kv head " + std::to_string(r.first_head) +
                            " on (beyond " + std::to_string(r.tolerance) +
                            " of the layer's max|x|): another prompt's, layer's, head's, rank's or model's values",
                        false});
  }
  return r;
}

}  // namespace kvtool
