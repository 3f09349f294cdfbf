// One interface over the forward passes eval-decode runs (docs/quality.md, "Decode"): a llama2.c
// checkpoint (kvtool/llama2c.h) or a GGUF llama/qwen2 model (kvtool/gguf_model.h), told apart by
// the file's content.
#pragma once
#include <any>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/gguf_model.h"
#include "kvtool/llama2c.h"

namespace kvtool {

struct DecodingShape {
  int32_t layers = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, context = 0;
};

class DecodingModel {
 public:
  virtual ~DecodingModel() = default;
  virtual DecodingShape shape() const = 0;
  virtual const std::string& sha256_hex() const = 0;
  virtual bool is_gguf() const = 0;
  // One position, as Llama2cModel::forward (the attention hook included).
  virtual void forward(int32_t token, int32_t pos, std::vector<float>& q, std::vector<float>& k, std::vector<float>& v,
                       std::vector<float>& logits, const AttentionSelect& select = nullptr) = 0;
  // Positions [0, n) of `tokens` from an empty cache, dense; the logits of the last. A GGUF model
  // runs them as one batch.
  virtual void prefill(const std::vector<int32_t>& tokens, int32_t n, std::vector<float>& logits) = 0;
  virtual void reset() = 0;
  virtual std::any save_cache() const = 0;
  virtual void restore_cache(const std::any& cache) = 0;
};

// The model at `path`: a GGUF file when it starts with "GGUF", else a llama2.c checkpoint.
std::unique_ptr<DecodingModel> open_decoding_model(const std::string& path, const GgufDecoderOptions& gguf = {});

}  // namespace kvtool
