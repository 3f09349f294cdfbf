// The GGUF forward pass's internals (kvtool/gguf_model.h): the weights as float32, and the scratch
// rows one batch passes through the layers.
#pragma once
#include <cstdint>
#include <vector>

#include "kvtool/gguf_file.h"
#include "kvtool/gguf_model.h"

namespace kvtool::impl {

// A matrix [out][in] as float32, and the ggml type it was stored as (what llama.cpp's CPU kernels
// round the activations to before multiplying by it; GgufDecoderOptions::llama_cpp_activations).
struct GgufMatrix {
  std::vector<float> w;
  uint32_t type = 0;
  bool empty() const { return w.empty(); }
};

struct GgufLayer {
  std::vector<float> attn_norm, bq, bk, bv, ffn_norm;
  GgufMatrix wq, wk, wv, wo, gate, up, down;
};

struct GgufWeights {
  GgufMatrix embed;  // [vocab][dim]
  std::vector<float> output_norm;
  GgufMatrix output;              // empty: tied to embed
  std::vector<float> rope_freqs;  // [rope_dims / 2] or empty
  std::vector<GgufLayer> layers;
};

// Every tensor of the graph, checked against the config's shapes; a tensor the graph does not use is
// refused by name (it would mean a feature this forward does not compute).
GgufWeights load_weights(const GgufFile& f, GgufModelConfig& c);

// One batch of n rows: the residual stream and each stage's outputs, row-major.
struct GgufScratch {
  int32_t n = 0;
  std::vector<float> x, xn, q, k, v, o, gate, up, scores;
  std::vector<int32_t> positions;
  float* q_out = nullptr;  // where q, k, v of each layer go ([n][layers][...]) when wanted
  float* k_out = nullptr;
  float* v_out = nullptr;
};

}  // namespace kvtool::impl
