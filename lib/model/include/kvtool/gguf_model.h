// A GGUF model's forward pass (formats/gguf.md, docs/models.md): architectures llama and qwen2, the
// weights dequantized to float32 exactly as ggml's reference dequantizers do (f32, f16, bf16, q8_0,
// q4_0, q4_1, q5_0, q5_1, q4_K, q6_K), the graph llama.cpp builds for them (RMSNorm, RoPE NORM or NEOX with
// llama.cpp's angles, grouped-query attention, SwiGLU), with the same attention hook as the
// llama2.c model (kvtool/llama2c.h) and a batched prefill on BLAS. Anything else — another
// architecture, weight type or feature (sliding window, MoE, MLA, YaRN) — is refused by name.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/llama2c.h"  // AttentionSelect, AttentionRows

namespace kvtool {

namespace impl {
struct GgufWeights;
struct GgufScratch;
}  // namespace impl

// ggml's reference dequantization of `values` values of `type` (a multiple of its block) from
// `blocks` (ggml-quants.c, dequantize_row_*); USAGE for a type kvtool does not decode.
void ggml_dequantize(uint32_t type, const uint8_t* blocks, int64_t values, float* out);

struct GgufModelConfig {
  std::string arch;  // "llama" | "qwen2"
  int32_t layers = 0, dim = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0, context = 0;
  int32_t rope_dims = 0;           // channels RoPE rotates (rope.dimension_count)
  bool rope_neox = false;          // NEOX pairs (i, i + rope_dims/2); NORM pairs (2i, 2i + 1)
  float rope_theta = 10000.f;      // rope.freq_base
  float rope_freq_scale = 1.f;     // 1 / rope.scaling.factor for linear scaling
  bool rope_freq_factors = false;  // rope_freqs.weight (Llama 3 scaling) divides the angles
  float rms_eps = 1e-5f;
  bool qkv_bias = false, tied_output = false;
  bool rounded_weights = false;     // some matrix is bf16 or quantized (not f32 or f16)
  std::string rope_config() const;  // canonical JSON recorded in dumps (kvtool/identity.h)
};

struct GgufDecoderOptions {
  int threads = 1;  // of the products and the batched attention (>= 1); the sums are the same for any
  // Round each matrix product's input as llama.cpp's CPU kernels do for the weight's type
  // (ggml-cpu's vec_dot_type): to bf16 for bf16 weights, to q8_0 blocks for q8_0, q4_0 and q5_0, to
  // q8_1 blocks for q4_1 and q5_1, to q8_K blocks for q4_K and q6_K (quantize_row_q8_0 and
  // quantize_row_q8_K_ref). Off: float32 inputs, the model as its weights define it.
  bool llama_cpp_activations = false;
  // The forward runs on float32 weights, up to 8x a quantized file's size: a model whose weights
  // would take more bytes is refused (OUT_OF_MEMORY) before anything is expanded. 0: the
  // machine's physical memory.
  uint64_t max_weight_bytes = 0;
};

class GgufDecoder {
 public:
  // Reads and checks the file (GgufFile with tensors), refuses what the forward cannot run
  // exactly, and dequantizes every weight.
  GgufDecoder(const std::string& path, const GgufDecoderOptions& options);
  ~GgufDecoder();
  GgufDecoder(const GgufDecoder&) = delete;
  GgufDecoder& operator=(const GgufDecoder&) = delete;

  const GgufModelConfig& config() const { return cfg_; }
  const std::string& sha256_hex() const { return sha_; }

  // Positions [pos0, pos0 + n) of `tokens` in one batch after the cached rows [0, pos0): fills q
  // [layers][n][heads * head_dim], k and v [layers][n][kv_heads * head_dim] (post-RoPE; null to
  // skip) and the logits of the last position [vocab].
  void prefill(const int32_t* tokens, int32_t n, int32_t pos0, float* q, float* k, float* v,
               std::vector<float>& last_logits);
  // One position, as Llama2cModel::forward: with `select`, each query head attends to the rows it
  // chooses.
  void forward(int32_t token, int32_t pos, std::vector<float>& q_out, std::vector<float>& k_out,
               std::vector<float>& v_out, std::vector<float>& logits, const AttentionSelect& select = nullptr);

  struct Cache {
    std::vector<std::vector<float>> k, v;  // per layer, [rows][kv_heads * head_dim]
    int32_t rows = 0;
  };
  const Cache& save_cache() const { return cache_; }
  void restore_cache(const Cache& c) { cache_ = c; }
  void reset();

 private:
  void run(const int32_t* tokens, int32_t n, int32_t pos0, float* q, float* k, float* v,
           std::vector<float>& last_logits, const AttentionSelect& select);
  // The batch's rows through layer `l` (impl/gguf_weights.h, src/gguf_forward.cpp).
  void layer(int32_t l, int32_t n, int32_t pos0, impl::GgufScratch& s, const AttentionSelect& select);
  GgufModelConfig cfg_;
  std::string sha_;
  std::unique_ptr<impl::GgufWeights> w_;
  GgufDecoderOptions opt_;
  Cache cache_;
};

}  // namespace kvtool
