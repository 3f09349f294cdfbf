// fuzz_llama_state: bytes as a llama.cpp state file (ggsq / ggsn, formats/llama-state.md) or, when
// they start with "GGUF", as a model's GGUF file (its metadata for the state reader; its tensor
// infos, weights and two tokens of the forward pass): the structure checks, then inspect (which
// decodes every layer of the sequence read) with and without a model. The bytes go to a file in
// /dev/shm because the readers take a path.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/gguf_model.h"
#include "kvtool/gguf_tokenizer.h"
#include "kvtool/llama_state.h"
#include "kvtool/report.h"

namespace {

struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

// The models of the seeds (fuzz/corpus/llama_state, written by llama.cpp): stories260K (5 layers,
// 8 query and 4 kv heads, head_dim 8), cheaders (4 layers, 4 query heads, 1 kv head, head_dim 64),
// and make_gguf_models.py's 2-layer variants (4 query heads, 2 kv heads, head_dim 64): gemma2 (layer
// 1 full attention, layer 0 sliding), lfm2 (layer 0 attention, layer 1 recurrent), qwen2vl (M-RoPE).
kvtool::GgufModel seed_model(int64_t layers, int64_t heads, int64_t kv_heads, int64_t head_dim,
                             const std::string& memory = "kv", std::vector<std::vector<int64_t>> sections = {},
                             bool cell_ext = false) {
  kvtool::GgufModel m;
  m.path = "seed.gguf";
  m.arch = "llama";
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.head_dim = head_dim;
  m.rope_pairing = "interleaved";
  m.memory = memory;
  m.kv_sections = std::move(sections);
  m.cell_ext = cell_ext;
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const TempPath tmp("/dev/shm/kvtool-fuzz-llama-" + std::to_string(getpid()) + ".bin");
  FILE* f = std::fopen(tmp.path.c_str(), "wb");
  if (!f) return 0;
  const bool ok = std::fwrite(data, 1, size, f) == size;
  std::fclose(f);
  if (!ok) return 0;
  if (size >= 4 && std::memcmp(data, "GGUF", 4) == 0) {
    try {
      kvtool::read_gguf_model(tmp.path);
    } catch (...) {
      kvtool::fuzz::on_exception(std::current_exception());
    }
    try {  // the tokenizer's arrays and both tokenizers (kvtool/gguf_tokenizer.h)
      const kvtool::GgufTokenizer tok(tmp.path);
      tok.encode("Hello world! 123 \xc3\xa9\xe2\x96\x81 it's", true);
    } catch (...) {
      kvtool::fuzz::on_exception(std::current_exception());
    }
    try {  // the tensor infos and the forward pass (kvtool/gguf_model.h) over two tokens
      kvtool::GgufDecoder model(tmp.path, kvtool::GgufDecoderOptions{});
      const int32_t tokens[2] = {0, model.config().vocab - 1};
      std::vector<float> logits;
      model.prefill(tokens, 2, 0, nullptr, nullptr, nullptr, logits);
    } catch (...) {
      kvtool::fuzz::on_exception(std::current_exception());
    }
    return 0;
  }
  static const kvtool::GgufModel stories = seed_model(5, 8, 4, 8), cheaders = seed_model(4, 4, 1, 64),
                                 gemma2 = seed_model(2, 4, 2, 64, "iswa", {{1}, {0}}),
                                 lfm2 = seed_model(2, 4, 2, 64, "hybrid", {{0}}),
                                 qwen2vl = seed_model(2, 4, 2, 64, "kv", {{0, 1}}, true);
  for (const kvtool::GgufModel* m :
       {static_cast<const kvtool::GgufModel*>(nullptr), &stories, &cheaders, &gemma2, &lfm2, &qwen2vl}) {
    try {
      kvtool::LlamaStateOptions o;
      kvtool::inspect_llama_state(tmp.path, m, o);
      o.rotation = kvtool::LlamaRotation::on;
      if (m) kvtool::verify_llama_state(tmp.path, m, o, "", std::nullopt);
    } catch (...) {
      kvtool::fuzz::on_exception(std::current_exception());
    }
  }
  return 0;
}
