// `kvtool dump --gguf` (kvtool/producers.h): a GGUF model's forward pass (kvtool/gguf_model.h) over
// given tokens, prefilled in one batch, then greedy decoding; K, V (and Q) of every position
// written as a kvdump with the model's identity (its file's SHA-256, its RoPE).
#include <algorithm>
#include <fstream>
#include <sstream>

#include "impl/producer_identity.h"
#include "kvtool/error.h"
#include "kvtool/gguf_model.h"
#include "kvtool/json.h"
#include "kvtool/producers.h"
#include "kvtool/report.h"
#include "kvtool/snapshot.h"

namespace kvtool {

using impl::check_frontier;

namespace {

// [layers][n][heads * d] rows of a batch into the dump's [layers][heads][T][d] at rows [t0, t0 + n).
void scatter(const std::vector<float>& batch, int64_t L, int64_t n, int64_t H, int64_t d, int64_t T, int64_t t0,
             std::vector<float>& out) {
  for (int64_t l = 0; l < L; ++l)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < H; ++h)
        std::copy_n(batch.begin() + ((l * n + i) * H + h) * d, d, out.begin() + ((l * H + h) * T + t0 + i) * d);
}

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

std::vector<int32_t> read_token_ids(const std::string& json_path) {
  std::ifstream f(json_path);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open token ids '" << json_path << "'");
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  check_json_limits(text, "token ids '" + json_path + "'", Reason::USAGE, 4, size_t(1) << 28);
  json j;
  try {
    j = json::parse(text);
  } catch (const std::exception&) {
    KVT_THROW(USAGE, "token ids '" << json_path << "' are not JSON");
  }
  KVT_CHECK(j.is_array() && !j.empty(), USAGE, "token ids '" << json_path << "' must be a non-empty JSON array");
  std::vector<int32_t> ids;
  for (const auto& v : j) {
    KVT_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX, USAGE,
              "token ids '" << json_path << "' hold " << json_text(v) << ", not a token id");
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

std::vector<int32_t> tokens_from(const std::string& path, const std::string& gguf) {
  SnapshotRequest r;
  r.inputs = {path};
  const FileKind kind = detect_file_kind(path);
  KVT_CHECK(kind == FileKind::dump || kind == FileKind::llama_state, USAGE,
            "'" << path << "' is neither a dump nor a llama.cpp state file; --tokens-from reads the tokens of one");
  std::vector<int64_t> t;
  if (kind == FileKind::dump) {
    DumpReader d(path);
    KVT_CHECK(d.info().has_tokens, USAGE, "the dump '" << path << "' has no /kv/tokens");
    t = d.tokens();
  } else {
    r.format = "llama-state";
    r.gguf = gguf;
    t = open_snapshot(r)->info().tokens;
    KVT_CHECK(!t.empty(), USAGE, "the state file '" << path << "' holds no token list of its sequence");
  }
  std::vector<int32_t> ids;
  for (int64_t x : t) {
    KVT_CHECK(x >= 0 && x <= INT32_MAX, USAGE, "'" << path << "' holds token " << x);
    ids.push_back(static_cast<int32_t>(x));
  }
  return ids;
}

ModelDumpResult dump_gguf(const GgufDumpOptions& opt, DType dtype, const IdentityOptions& ident,
                          const std::string& out_path, bool overwrite) {
  KVT_CHECK(!opt.prompt.empty(), USAGE, "dump --gguf needs tokens (--token-ids or --tokens-from)");
  const int64_t T = opt.tokens > 0 ? opt.tokens : static_cast<int64_t>(opt.prompt.size());
  KVT_CHECK(T <= kMaxDumpTokens, USAGE, "tokens " << T << " is beyond 2^31");
  GgufDecoder model(opt.model_path, GgufDecoderOptions{opt.threads, opt.llama_cpp_activations});
  const GgufModelConfig& c = model.config();
  KVT_CHECK(T <= c.context, USAGE, "tokens " << T << " exceeds the model's context length " << c.context);
  check_frontier(ident, T);
  const int64_t L = c.layers, H = c.kv_heads, Hq = c.heads, d = c.head_dim;
  const int64_t n0 = std::min<int64_t>(T, static_cast<int64_t>(opt.prompt.size()));
  std::vector<float> K(static_cast<size_t>(L * H * T * d)), V(K.size());
  std::vector<float> Q(opt.queries ? static_cast<size_t>(L * Hq * T * d) : 0);
  std::vector<float> bq(opt.queries ? static_cast<size_t>(L * n0 * Hq * d) : 0),
      bk(static_cast<size_t>(L * n0 * H * d)), bv(bk.size()), logits;
  model.prefill(opt.prompt.data(), static_cast<int32_t>(n0), 0, opt.queries ? bq.data() : nullptr, bk.data(), bv.data(),
                logits);
  scatter(bk, L, n0, H, d, T, 0, K);
  scatter(bv, L, n0, H, d, T, 0, V);
  if (opt.queries) scatter(bq, L, n0, Hq, d, T, 0, Q);
  ModelDumpResult res;
  res.tokens.assign(opt.prompt.begin(), opt.prompt.begin() + n0);
  std::vector<float> q, k, v;
  for (int64_t pos = n0; pos < T; ++pos) {
    const int32_t token = argmax(logits);
    res.tokens.push_back(token);
    model.forward(token, static_cast<int32_t>(pos), q, k, v, logits);
    scatter(k, L, 1, H, d, T, pos, K);
    scatter(v, L, 1, H, d, T, pos, V);
    if (opt.queries) scatter(q, L, 1, Hq, d, T, pos, Q);
  }
  impl::ModelRows rows{L, H, Hq, d, T, std::move(K), std::move(V), std::move(Q), res.tokens};
  impl::write_model_dump(rows, ident, model.sha256_hex(), c.rope_config(), dtype,
                         "kvtool dump --gguf (" + c.arch + " forward pass, batched prefill, greedy)", out_path,
                         overwrite);
  return res;
}

}  // namespace kvtool
