// What every producer of a dump (synth, dump --llama2c, dump --gguf) records the same way.
#pragma once
#include <string>
#include <vector>

#include "kvtool/dump.h"
#include "kvtool/producers.h"

namespace kvtool::impl {

// The identity fields a caller sets (IdentityOptions), the empty adapter set and the position
// contract of post-RoPE absolute rows.
DumpIdentity base_identity(const IdentityOptions& o);
std::string representation_for(DType t);
void check_frontier(const IdentityOptions& o, int64_t T);

// What a model's forward pass produced, in the dump's order: K and V [layers][kv_heads][T][d], Q
// [layers][q_heads][T][d] (empty: no queries), the tokens.
struct ModelRows {
  int64_t layers = 0, kv_heads = 0, q_heads = 0, head_dim = 0, tokens = 0;
  std::vector<float> k, v, q;
  std::vector<int64_t> token_ids;
};
// Writes them as a kvdump (queries at every position when there are any), atomically.
void write_model_dump(const ModelRows& rows, const IdentityOptions& ident, const std::string& model_sha256,
                      const std::string& rope_config, DType dtype, const std::string& generator,
                      const std::string& out_path, bool overwrite);

}  // namespace kvtool::impl
