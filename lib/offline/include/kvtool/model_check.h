// A cache snapshot checked against the GGUF model it claims (docs/models.md, "A state's queries"):
// a llama.cpp state file carries its tokens but no model identity and no queries. Running the model
// over the tokens recomputes K — which must equal the state's, so a state from another model is
// refused — and gives the post-RoPE queries `eval` needs (`kvtool import STATE --gguf M --queries`,
// `kvtool verify STATE --gguf M --model-check`).
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/json.h"
#include "kvtool/snapshot.h"

namespace kvtool {

struct ModelCheckOptions {
  std::optional<double> tolerance;  // largest max|recomputed K - K| / max|K| of a layer; default below
  int threads = 1;                  // of the batched prefill
};

struct ModelCheckReport {
  std::string model;
  double tolerance = 0, max_rel_err = 0;
  std::vector<double> layer_rel_err;  // K, per layer
  json to_json() const;
};

// The model's default tolerance for a cache of `cache_type` (ggml type name of K): the cache's
// rounding (default_state_tolerance, as verify --source) plus 4e-2 when the model's weights are
// bf16 or quantized (4x the largest gap measured between llama.cpp and kvtool over such weights,
// docs/models.md).
double default_model_tolerance(const std::string& cache_type, bool rounded_weights);

// Runs the model at `gguf` over the snapshot's tokens (its rows must be positions 0..T-1 with their
// tokens known; USAGE otherwise), compares the recomputed K with the snapshot's layer by layer
// (MODEL_MISMATCH beyond the tolerance) and, when `queries` is not null, returns in it the post-RoPE
// queries of every row, [layers][q_heads][T][head_dim]. The model's activations are rounded as
// llama.cpp's CPU kernels round them (GgufDecoderOptions::llama_cpp_activations).
ModelCheckReport check_snapshot_model(KvSnapshot& s, const std::string& gguf, const ModelCheckOptions& o,
                                      std::vector<float>* queries = nullptr);

// `inner` with the model's queries of every row added (after check_snapshot_model passes): what
// import writes for `--queries`. USAGE when `inner` has queries of its own.
std::unique_ptr<KvSnapshot> with_model_queries(std::unique_ptr<KvSnapshot> inner, const std::string& gguf,
                                               const ModelCheckOptions& o, ModelCheckReport* report);

}  // namespace kvtool
