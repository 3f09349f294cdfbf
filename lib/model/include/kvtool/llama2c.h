// A llama2.c-format ("legacy") checkpoint, its tokenizer, and a plain float32 forward pass that
// exposes the post-RoPE q, k, v of every layer (formats/llama2c.md).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kvtool {

struct Llama2cConfig {
  int32_t dim = 0, hidden_dim = 0, n_layers = 0, n_heads = 0, n_kv_heads = 0, vocab_size = 0, seq_len = 0;
  bool shared_classifier = true;
  int32_t head_dim() const { return dim / n_heads; }
  int32_t kv_dim() const { return head_dim() * n_kv_heads; }
};

// The rows one query head attends to at a position, ascending, each with a log weight added to its
// score: 0 for a row taken as is, -log(p) for a row sampled with inclusion probability p (the
// importance-sampling estimator of sampled attention).
struct AttentionRows {
  std::vector<int32_t> rows;
  std::vector<float> log_weight;
  // Estimated entries that are no row of the cache (eval-decode --estimated-zone): each an
  // attention logit (scaled, with its log weight) and a value vector [head_dim], attended beside
  // the rows in one softmax. The model clears them before each select call.
  std::vector<float> extra_logit, extra_value;
};

// Chooses the rows of (layer, q_head) for query `q` at `pos`; returns false for dense attention
// (every row 0..pos). Rows must be ascending, unique and <= pos. Query heads are offered in order
// 0, 1, ... within a layer, and `q` points into the layer's query vectors of all heads (head-major,
// [n_heads * head_dim]), so a selector may read the other heads of q_head's KV group.
// How many estimated entries `rows` holds (INTERNAL when its logits and values disagree).
int extra_count(const AttentionRows& rows, int head_dim);

using AttentionSelect =
    std::function<bool(int32_t layer, int32_t q_head, const float* q, int32_t pos, AttentionRows& out)>;

class Llama2cModel {
 public:
  // Reads and checks the checkpoint (sizes must match the header exactly); BAD_MODEL otherwise.
  explicit Llama2cModel(const std::string& path);
  const Llama2cConfig& config() const { return cfg_; }
  const std::string& sha256_hex() const { return sha_; }

  // Runs one position. Appends this position's k, v to the cache; fills q_out [n_heads*head_dim],
  // k_out/v_out [n_kv_heads*head_dim] (all post-RoPE) and logits [vocab]. With `select`, each
  // query head attends to the rows it chooses (sparse attention); selecting every row 0..pos with
  // weight 0 gives the same bits as dense attention.
  void forward(int32_t token, int32_t pos, std::vector<float>& q_out, std::vector<float>& k_out,
               std::vector<float>& v_out, std::vector<float>& logits, const AttentionSelect& select = nullptr);
  void reset() { key_cache_.assign(key_cache_.size(), 0.f), val_cache_.assign(val_cache_.size(), 0.f); }
  // The K/V cache, to run several continuations of one prefill.
  struct Cache {
    std::vector<float> k, v;
  };
  Cache save_cache() const { return {key_cache_, val_cache_}; }
  void restore_cache(const Cache& c) { key_cache_ = c.k, val_cache_ = c.v; }

 private:
  Llama2cConfig cfg_;
  std::string sha_;
  std::vector<float> w_;  // all weights, in file order
  const float *emb_, *rms_att_, *wq_, *wk_, *wv_, *wo_, *rms_ffn_, *w1_, *w2_, *w3_, *rms_final_, *wcls_;
  void attend(int32_t layer, int32_t pos, const float* q, float* out, const AttentionSelect& select,
              AttentionRows& rows, std::vector<float>& att) const;
  std::vector<float> key_cache_, val_cache_;  // [L, seq_len, kv_dim]
};

class Llama2cTokenizer {
 public:
  Llama2cTokenizer(const std::string& path, int32_t vocab_size);
  // llama2.c encoding: optional BOS (1), a dummy-prefix space, UTF-8 code points with byte
  // fallback (+3), then greedy merges by best score.
  std::vector<int32_t> encode(const std::string& text, bool bos) const;
  // Piece for `token` following `prev` (strips the leading space after BOS, decodes <0xXX>).
  std::string decode(int32_t prev, int32_t token) const;

 private:
  int32_t lookup(const std::string& s) const;
  std::vector<std::string> vocab_;
  std::vector<float> scores_;
  std::vector<std::pair<std::string, int32_t>> sorted_;
};

struct ModelDumpOptions {
  std::string model_path, tokenizer_path, prompt;
  int64_t tokens = 0;
  bool queries = false;
};

struct ModelDumpResult {
  std::vector<int64_t> tokens;
  std::string text;  // decoded text of the tokens after BOS (empty without a tokenizer)
};

}  // namespace kvtool
