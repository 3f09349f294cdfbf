// Producers of kvdump v1 files: a real llama2.c forward pass and a deterministic synthetic generator.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "kvtool/dump.h"
#include "kvtool/llama2c.h"

namespace kvtool {

// Identity attributes a caller may set on a produced dump (the rest comes from the producer).
struct IdentityOptions {
  std::string tenant_namespace = "default";
  int64_t checkpoint_generation = 0;
  int64_t namespace_generation = 0;
  int64_t request_generation = 0;
  int64_t cache_generation = 0;
  int64_t publication_generation = 0;
  int64_t frontier = -1;  // -1: all T rows committed
};

// BOS, then the prompt's tokens teacher-forced, then greedy decoding; `tokens` positions in total.
ModelDumpResult dump_llama2c(const ModelDumpOptions& opt, DType dtype, const IdentityOptions& ident,
                             const std::string& out_path, bool overwrite = true);

// A GGUF model (kvtool/gguf_model.h): `prompt` prefilled in one batch, then greedy decoding up to
// `tokens` positions in total (0: the prompt's length).
struct GgufDumpOptions {
  std::string model_path;
  std::vector<int32_t> prompt;
  int64_t tokens = 0;
  bool queries = false;
  int threads = 1;
  bool llama_cpp_activations = false;  // GgufDecoderOptions::llama_cpp_activations
};
ModelDumpResult dump_gguf(const GgufDumpOptions& opt, DType dtype, const IdentityOptions& ident,
                          const std::string& out_path, bool overwrite = true);
// Token ids given to `dump --gguf`: a JSON array of integers (--token-ids), or the tokens recorded in
// a dump or in a llama.cpp state file read with the model `gguf` (--tokens-from).
std::vector<int32_t> read_token_ids(const std::string& json_path);
std::vector<int32_t> tokens_from(const std::string& path, const std::string& gguf);

struct SynthOptions {
  int64_t layers = 2, kv_heads = 2, q_heads = 4, head_dim = 64, tokens = 1024;
  uint64_t seed = 0;
  DType dtype = DType::f16;
  int64_t query_count = 64;  // queries of the last min(T, query_count) positions go to /kv/q
  int64_t threads = 0;       // worker threads (0: the hardware's); the file is the same for any count
};

// `quiet` silences the progress report on stderr.
void synth_dump(const SynthOptions& opt, const IdentityOptions& ident, const std::string& out_path,
                bool overwrite = true, bool quiet = true);

}  // namespace kvtool
