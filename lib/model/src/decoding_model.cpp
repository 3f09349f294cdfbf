// The two forward passes behind kvtool/decoding_model.h.
#include "kvtool/decoding_model.h"

#include <cstring>
#include <fstream>

#include "kvtool/error.h"

namespace kvtool {

namespace {

class Llama2cDecoding final : public DecodingModel {
 public:
  explicit Llama2cDecoding(const std::string& path) : m_(path) {}
  DecodingShape shape() const override {
    const Llama2cConfig& c = m_.config();
    return {c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim(), c.vocab_size, c.seq_len};
  }
  const std::string& sha256_hex() const override { return m_.sha256_hex(); }
  bool is_gguf() const override { return false; }
  void forward(int32_t token, int32_t pos, std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
               std::vector<float>& logits, const AttentionSelect& select) override {
    m_.forward(token, pos, q, k, v, logits, select);
  }
  void prefill(const std::vector<int32_t>& tokens, int32_t n, std::vector<float>& logits) override {
    std::vector<float> q, k, v;
    m_.reset();
    for (int32_t p = 0; p < n; ++p) m_.forward(tokens[static_cast<size_t>(p)], p, q, k, v, logits);
  }
  void reset() override { m_.reset(); }
  std::any save_cache() const override { return m_.save_cache(); }
  void restore_cache(const std::any& c) override { m_.restore_cache(std::any_cast<const Llama2cModel::Cache&>(c)); }

 private:
  Llama2cModel m_;
};

class GgufDecoding final : public DecodingModel {
 public:
  GgufDecoding(const std::string& path, const GgufDecoderOptions& o) : m_(path, o) {}
  DecodingShape shape() const override {
    const GgufModelConfig& c = m_.config();
    return {c.layers, c.heads, c.kv_heads, c.head_dim, c.vocab, c.context};
  }
  const std::string& sha256_hex() const override { return m_.sha256_hex(); }
  bool is_gguf() const override { return true; }
  void forward(int32_t token, int32_t pos, std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
               std::vector<float>& logits, const AttentionSelect& select) override {
    m_.forward(token, pos, q, k, v, logits, select);
  }
  void prefill(const std::vector<int32_t>& tokens, int32_t n, std::vector<float>& logits) override {
    m_.reset();
    m_.prefill(tokens.data(), n, 0, nullptr, nullptr, nullptr, logits);
  }
  void reset() override { m_.reset(); }
  std::any save_cache() const override { return m_.save_cache(); }
  void restore_cache(const std::any& c) override { m_.restore_cache(std::any_cast<const GgufDecoder::Cache&>(c)); }

 private:
  GgufDecoder m_;
};

bool starts_with_gguf(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open model '" << path << "'");
  char magic[4] = {};
  f.read(magic, 4);
  return f.gcount() == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

std::unique_ptr<DecodingModel> open_decoding_model(const std::string& path, const GgufDecoderOptions& gguf) {
  if (starts_with_gguf(path)) return std::make_unique<GgufDecoding>(path, gguf);
  return std::make_unique<Llama2cDecoding>(path);
}

}  // namespace kvtool
