// fuzz_chunks: bytes as the chunk/page files of `kvtool import --format` (impl/chunk_plan.h):
// the LMCache FS-connector header, LMCache v0 safetensors chunks, and the size rules of headerless
// LMCache v1 chunks and SGLang pages, then every layer read through the plan. Input: 6 control
// bytes, then the file's bytes (in /dev/shm: the readers take paths).
//   u8 format (mod 4: lmcache-raw, lmcache-fs, lmcache-v0, sglang-page), u8 layout variant,
//   u8 layers-1 (mod 4), u8 heads-1 (mod 4), u8 head_dim-1 (mod 16), u8 chunk/page tokens-1 (mod 64;
//   bit 7: the file is given twice, as two chunks)
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "fuzz_common.h"
#include "impl/chunk_plan.h"

namespace {

struct TempPath {
  explicit TempPath(std::string p) : path(std::move(p)) {}
  ~TempPath() { unlink(path.c_str()); }
  std::string path;
};

kvtool::ChunkOptions options(const uint8_t* c) {
  static const char* formats[] = {"lmcache-raw", "lmcache-fs", "lmcache-v0", "sglang-page"};
  static const char* lmc[] = {"KV_2LTD", "KV_T2D", "KV_2TD"};
  static const char* v0[] = {"vllm", "huggingface"};
  static const char* sgl[] = {"layer_first", "page_first", "page_first_direct"};
  static const char* dtypes[] = {"f16", "bf16", "f32"};
  kvtool::ChunkOptions o;
  const int f = c[0] % 4;
  o.format = formats[f];
  o.memory_format = f == 0 ? lmc[c[1] % 3] : f == 2 ? v0[c[1] % 2] : f == 3 ? sgl[c[1] % 3] : "";
  o.src_dtype = f == 0 || f == 3 ? dtypes[(c[1] >> 4) % 3] : "";
  o.layers = 1 + c[2] % 4;
  o.kv_heads = 1 + c[3] % 4;
  o.head_dim = 1 + c[4] % 16;
  if (f == 3)
    o.page_size = 1 + (c[5] & 63);
  else
    o.chunk_tokens = 1 + (c[5] & 63);
  if (f == 1 || f == 2) o.layers = (c[1] & 1) ? o.layers : 0;  // checked against the header, or not given
  if (f == 2 && (c[1] & 2)) o.kv_heads = o.head_dim = 0;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 6) return 0;
  static const TempPath tmp("/dev/shm/kvtool-fuzz-chunks-" + std::to_string(getpid()) + ".bin");
  FILE* f = std::fopen(tmp.path.c_str(), "wb");
  if (!f) return 0;
  const bool ok = std::fwrite(data + 6, 1, size - 6, f) == size - 6;
  std::fclose(f);
  if (!ok) return 0;
  const kvtool::ChunkOptions o = options(data);
  std::vector<std::string> inputs(data[5] & 128 ? 2 : 1, tmp.path);
  if (o.format == "lmcache-raw" && o.memory_format != "KV_2LTD")
    inputs.assign(static_cast<size_t>(o.layers) * inputs.size(), tmp.path);
  try {
    const kvtool::chunks::Plan p = kvtool::chunks::plan_chunks(inputs, o);
    std::vector<float> k, v;
    for (int64_t l = 0; l < p.layers; ++l) kvtool::chunks::read_layer(p, l, k, v);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
