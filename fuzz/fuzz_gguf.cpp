// fuzz_gguf: GGUF metadata as typed values. Every key the model reader uses (formats/llama-state.md,
// "The model's GGUF header") is present or not, of any GGUF type (strings of any bytes and length,
// arrays, bools, floats where integers belong), with values from the input; then read_gguf_model,
// the rope_config it derives and its JSON. Byte-level mutations of a file (fuzz_llama_state) rarely
// reach a value of another type in a well-formed file; this target reaches them directly.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/gguf.h"
#include "kvtool/json.h"

using kvtool::fuzz::FuzzBytes;

namespace {

struct Out {
  std::vector<uint8_t> b;
  void raw(const std::vector<uint8_t>& v) { b.insert(b.end(), v.begin(), v.end()); }
  template <typename T>
  void put(T v) {
    uint8_t x[sizeof(T)];
    std::memcpy(x, &v, sizeof(T));
    b.insert(b.end(), x, x + sizeof(T));
  }
  void str(const std::vector<uint8_t>& s) {
    put<uint64_t>(s.size());
    raw(s);
  }
};

// GGUF value types: u8 i8 u16 i16 u32 i32 f32 bool string array u64 i64 f64.
constexpr uint32_t kString = 8, kArray = 9, kTypes = 13;
size_t scalar_bytes(uint32_t t) {
  static const size_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return sizes[t];
}

// A string: up to 255 bytes from the input, or (rarely) a long run past the reader's 65,536 limit.
std::vector<uint8_t> string_value(FuzzBytes& in) {
  const uint8_t len = in.u8();
  if (len == 255) return std::vector<uint8_t>(70000, in.u8());
  return in.take(len);
}

void value(FuzzBytes& in, Out& o, uint32_t type) {
  if (type == kString) return o.str(string_value(in));
  if (type == kArray) {
    const uint32_t et = in.u8() % kTypes;
    const uint64_t count = in.u8() % 9;
    o.put<uint32_t>(et == kArray ? kString : et);
    o.put<uint64_t>(count);
    for (uint64_t i = 0; i < count; ++i) value(in, o, et == kArray ? kString : et);
    return;
  }
  std::vector<uint8_t> v = in.take(scalar_bytes(type));
  v.resize(scalar_bytes(type), 0);
  o.raw(v);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/dev/shm/kvtool-fuzz-gguf-" + std::to_string(getpid()) + ".gguf";
  static const char* const keys[] = {"general.architecture",
                                     "general.name",
                                     "llama.block_count",
                                     "llama.embedding_length",
                                     "llama.attention.head_count",
                                     "llama.attention.head_count_kv",
                                     "llama.attention.key_length",
                                     "llama.attention.value_length",
                                     "llama.rope.freq_base",
                                     "llama.rope.dimension_count",
                                     "llama.rope.scaling.type",
                                     "llama.attention.sliding_window",
                                     "llama.attention.kv_lora_rank",
                                     "llama.ssm.conv_kernel"};
  FuzzBytes in{data, size};
  Out body;
  uint64_t n_kv = 0;
  for (const char* k : keys) {
    const uint8_t c = in.u8();
    if ((c & 1) == 0) continue;  // absent
    const uint32_t type = (c >> 1) % kTypes;
    body.str(std::vector<uint8_t>(k, k + std::strlen(k)));
    body.put<uint32_t>(type);
    value(in, body, type);
    ++n_kv;
  }
  Out file;
  file.raw({'G', 'G', 'U', 'F'});
  file.put<uint32_t>(3);
  file.put<uint64_t>(0);
  file.put<uint64_t>(n_kv);
  file.raw(body.b);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return 0;
  const bool ok = std::fwrite(file.b.data(), 1, file.b.size(), f) == file.b.size();
  std::fclose(f);
  if (!ok) return 0;
  try {
    const kvtool::GgufModel m = kvtool::read_gguf_model(path);
    const std::string rope = m.rope_config();
    const std::string text = kvtool::json_text(m.to_json());  // any byte of a kept string prints
    if (rope.size() + text.size() == 0) std::abort();         // never: to_json is never empty
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  unlink(path.c_str());
  return 0;
}
