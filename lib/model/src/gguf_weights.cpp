// The weights of a GGUF llama/qwen2 model as float32 (impl/gguf_weights.h): tensor names and shapes
// as llama.cpp's llm_build_llama / llm_build_qwen2 take them (src/llama-model.cpp at the version
// formats/gguf.md names), each dequantized by ggml's reference rules (ggml_dequantize).
#include <set>
#include <string>

#include "impl/gguf_weights.h"
#include "kvtool/error.h"
#include "kvtool/mapped_file.h"
#include "kvtool/random_access_file.h"

namespace kvtool::impl {

namespace {

class TensorLoader {
 public:
  explicit TensorLoader(const GgufFile& f) : f_(f), file_(f.path(), {f.what(), true, false, "read"}), map_(file_) {
    KVT_CHECK(file_.size() == f.file_size(), TRUNCATED, f.what() << " changed size while it was read");
  }

  // The tensor `name` with exactly `dims` (ggml order), as float32; `optional` ones may be absent.
  std::vector<float> get(const std::string& name, std::vector<int64_t> dims, bool optional = false) {
    return matrix(name, std::move(dims), optional).w;
  }
  GgufMatrix matrix(const std::string& name, std::vector<int64_t> dims, bool optional = false) {
    const GgufTensor* t = f_.find(name);
    if (!t) {
      KVT_CHECK(optional, BAD_MODEL, f_.what() << " lacks tensor '" << name << "'");
      return {};
    }
    used_.insert(name);
    while (t->dims.size() > dims.size() && t->dims.back() == 1) dims.push_back(1);  // trailing 1s
    KVT_CHECK(t->dims == dims, BAD_MODEL,
              f_.what() << ": tensor '" << name << "' has shape " << shape(t->dims) << ", the model's metadata says "
                        << shape(dims));
    GgufMatrix m;
    m.type = t->type;
    m.w.resize(static_cast<size_t>(t->elements()));
    map_.read(t->offset, static_cast<size_t>(t->bytes),
              [&](const uint8_t* raw) { ggml_dequantize(t->type, raw, t->elements(), m.w.data()); });
    return m;
  }
  // Tensors of the file the graph did not take: each is a feature this forward would ignore.
  void refuse_unused() const {
    for (const auto& t : f_.tensors())
      KVT_CHECK(used_.count(t.name), UNSUPPORTED_MODEL,
                f_.what() << " holds tensor '" << printable(t.name)
                          << "', which the llama/qwen2 graph kvtool runs does not use (a feature it does not compute)");
  }

 private:
  static std::string shape(const std::vector<int64_t>& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
  }
  const GgufFile& f_;
  RandomAccessFile file_;
  MappedFile map_;  // the tensor data, as llama.cpp maps it: no copy of the raw bytes
  std::set<std::string> used_;
};

}  // namespace

GgufWeights load_weights(const GgufFile& f, GgufModelConfig& c) {
  TensorLoader ld(f);
  GgufWeights w;
  const GgufTensor* embd = f.find("token_embd.weight");
  KVT_CHECK(embd && embd->dims.size() >= 2, BAD_MODEL, f.what() << " lacks tensor 'token_embd.weight'");
  c.vocab = static_cast<int32_t>(std::min<int64_t>(embd->dims[1], INT32_MAX));
  const int64_t D = c.dim, qd = int64_t(c.heads) * c.head_dim, kvd = int64_t(c.kv_heads) * c.head_dim, F = c.hidden;
  w.embed = ld.matrix("token_embd.weight", {D, c.vocab});
  w.output_norm = ld.get("output_norm.weight", {D});
  w.output = ld.matrix("output.weight", {D, c.vocab}, true);
  c.tied_output = w.output.empty();
  w.rope_freqs = ld.get("rope_freqs.weight", {c.rope_dims / 2}, true);
  c.rope_freq_factors = !w.rope_freqs.empty();
  c.qkv_bias = f.find("blk.0.attn_q.bias") != nullptr;
  KVT_CHECK(!c.qkv_bias || c.arch == "qwen2", UNSUPPORTED_MODEL,
            f.what() << ": a llama model with attention biases; kvtool computes them for qwen2");
  for (int32_t l = 0; l < c.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    GgufLayer y;
    y.attn_norm = ld.get(b + "attn_norm.weight", {D});
    y.wq = ld.matrix(b + "attn_q.weight", {D, qd});
    y.wk = ld.matrix(b + "attn_k.weight", {D, kvd});
    y.wv = ld.matrix(b + "attn_v.weight", {D, kvd});
    y.wo = ld.matrix(b + "attn_output.weight", {qd, D});
    if (c.qkv_bias) {
      y.bq = ld.get(b + "attn_q.bias", {qd});
      y.bk = ld.get(b + "attn_k.bias", {kvd});
      y.bv = ld.get(b + "attn_v.bias", {kvd});
    }
    y.ffn_norm = ld.get(b + "ffn_norm.weight", {D});
    y.gate = ld.matrix(b + "ffn_gate.weight", {D, F});
    y.up = ld.matrix(b + "ffn_up.weight", {D, F});
    y.down = ld.matrix(b + "ffn_down.weight", {F, D});
    w.layers.push_back(std::move(y));
  }
  ld.refuse_unused();
  auto rounded = [](const GgufMatrix& m) { return !m.empty() && m.type != 0 && m.type != 1; };
  c.rounded_weights = rounded(w.embed) || rounded(w.output);
  for (const auto& y : w.layers)
    for (const GgufMatrix* m : {&y.wq, &y.wk, &y.wv, &y.wo, &y.gate, &y.up, &y.down})
      c.rounded_weights = c.rounded_weights || rounded(*m);
  return w;
}

}  // namespace kvtool::impl
