// kvtool/llama_state.h on bytes laid out as formats/llama-state.md describes (the llama.cpp
// version it names): GGUF metadata, ggsq/ggsn structure, position sorting, transposed V, q8_0 and
// the Hadamard rotation, and hostile files (every truncation, trailing bytes, duplicate positions,
// claims beyond the file). tests/llamacpp/ checks the same code on files real llama.cpp wrote.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "kvtool/dump.h"
#include "kvtool/gguf_model.h"
#include "kvtool/half.h"
#include "kvtool/import.h"
#include "kvtool/llama_state.h"
#include "kvtool/report.h"
#include "test_util.h"

using namespace kvtool;
using namespace kvtool::test;

namespace {

// The import of one state file through the snapshot registry, as `kvtool import STATE --gguf M`.
ImportSummary import_llama_state(const std::string& path, const GgufModel& m, const LlamaStateOptions& o,
                                 const json& meta, std::optional<DType> dtype, const std::string& out, bool overwrite) {
  SnapshotRequest r;
  r.inputs = {path};
  r.format = "llama-state";
  r.gguf = m.path;
  r.llama = o;
  return import_snapshot(r, ImportOptions{dtype, meta, overwrite}, out);
}

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    uint8_t x[sizeof(T)];
    std::memcpy(x, &v, sizeof(T));
    b.insert(b.end(), x, x + sizeof(T));
    return *this;
  }
  Bytes& str64(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

// GGUF v3 metadata only (no tensors): string and u32 keys, and values of any type as raw bytes.
struct Gguf {
  std::vector<std::pair<std::string, std::string>> strs;
  std::vector<std::pair<std::string, uint32_t>> nums;
  struct Raw {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> value;
  };
  std::vector<Raw> raw;
  std::vector<uint8_t> bytes() const {
    Bytes o;
    o.b = {'G', 'G', 'U', 'F'};
    o.put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(strs.size() + nums.size() + raw.size());
    for (const auto& [k, v] : strs) o.str64(k).put<uint32_t>(8).str64(v);
    for (const auto& [k, v] : nums) o.str64(k).put<uint32_t>(4).put<uint32_t>(v);
    for (const auto& r : raw) {
      o.str64(r.key).put<uint32_t>(r.type);
      o.b.insert(o.b.end(), r.value.begin(), r.value.end());
    }
    return o.b;
  }
};

template <typename T>
std::vector<uint8_t> raw_of(T v) {
  std::vector<uint8_t> b(sizeof(T));
  std::memcpy(b.data(), &v, sizeof(T));
  return b;
}

Gguf llama_gguf(uint32_t layers, uint32_t heads, uint32_t kv_heads, uint32_t head_dim) {
  Gguf g;
  g.strs = {{"general.architecture", "llama"}};
  g.nums = {{"llama.block_count", layers},
            {"llama.embedding_length", heads * head_dim},
            {"llama.attention.head_count", heads},
            {"llama.attention.head_count_kv", kv_heads}};
  return g;
}

struct Cell {
  int32_t pos;
  std::vector<int32_t> seqs;
};

// One ggsq v3 stream: K[l][cell][w] and V alike, type f32 (0) or f16 (1), V transposed or not.
std::vector<uint8_t> ggsq(const std::vector<Cell>& cells, int32_t L, int32_t W, bool v_trans, int32_t type,
                          const std::function<float(int, int, int, int)>& value) {
  Bytes o;
  o.put<uint32_t>(0x67677371u).put<uint32_t>(3).put<uint32_t>(static_cast<uint32_t>(cells.size()));
  for (size_t i = 0; i < cells.size(); ++i) o.put<int32_t>(100 + static_cast<int32_t>(i));
  o.put<uint32_t>(1).put<uint32_t>(static_cast<uint32_t>(cells.size()));
  for (const auto& c : cells) {
    o.put<int32_t>(c.pos).put<uint32_t>(static_cast<uint32_t>(c.seqs.size()));
    for (int32_t s : c.seqs) o.put<int32_t>(s);
  }
  o.put<uint32_t>(v_trans ? 1 : 0).put<uint32_t>(static_cast<uint32_t>(L));
  auto val = [&](float x) {
    if (type == 0)
      o.put<float>(x);
    else
      o.put<uint16_t>(f32_to_f16(x));
  };
  const uint64_t es = type == 0 ? 4 : 2;
  const int n = static_cast<int>(cells.size());
  for (int l = 0; l < L; ++l) {
    o.put<int32_t>(type).put<uint64_t>(es * W);
    for (int c = 0; c < n; ++c)
      for (int j = 0; j < W; ++j) val(value(0, l, c, j));
  }
  for (int l = 0; l < L; ++l) {
    o.put<int32_t>(type);
    if (v_trans)
      o.put<uint32_t>(static_cast<uint32_t>(es)).put<uint32_t>(static_cast<uint32_t>(W));
    else
      o.put<uint64_t>(es * W);
    for (int a = 0; a < (v_trans ? W : n); ++a)
      for (int b = 0; b < (v_trans ? n : W); ++b) val(v_trans ? value(1, l, b, a) : value(1, l, a, b));
  }
  return o.b;
}

float kv_value(int is_v, int l, int cell, int j) {
  return 0.25f * static_cast<float>(is_v * 1000 + l * 100 + cell * 10 + j) - 7;
}

bool exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

}  // namespace

TEST_CASE("llama state: GGUF metadata gives the geometry, RoPE and refusals", "[llama_state]") {
  TempDir t;
  const std::string p = t.file("m.gguf");
  write_bytes(p, llama_gguf(3, 8, 2, 16).bytes());
  const GgufModel m = read_gguf_model(p);
  CHECK(m.arch == "llama");
  CHECK(m.layers == 3);
  CHECK(m.heads == 8);
  CHECK(m.kv_heads == 2);
  CHECK(m.head_dim == 16);
  CHECK(m.rope_config() == R"({"head_dim":16,"pairing":"interleaved","scaling":"none","theta":10000.0})");
  Gguf mla = llama_gguf(3, 8, 2, 16);
  mla.nums.push_back({"llama.attention.kv_lora_rank", 512});
  write_bytes(p, mla.bytes());
  CHECK(reason_of([&] { read_gguf_model(p); }) == "UNSUPPORTED_CACHE");
  Gguf swa = llama_gguf(3, 8, 2, 16);
  swa.nums.push_back({"llama.attention.sliding_window", 4096});
  write_bytes(p, swa.bytes());
  CHECK(reason_of([&] { read_gguf_model(p); }) == "UNSUPPORTED_CACHE");
  Gguf other = llama_gguf(3, 8, 2, 16);
  other.strs[0].second = "newarch";
  for (auto& [k, v] : other.nums) k.replace(0, 5, "newarch");
  write_bytes(p, other.bytes());
  CHECK(read_gguf_model(p).rope_config().empty());  // an import then needs rope_config in --meta
  // Sliding-window layers of an architecture whose rule kvtool knows (gemma2: il % 2 < 1 slides,
  // a scalar sliding_window_pattern overrides the period): two caches, full-attention first.
  auto as_arch = [](Gguf g, const std::string& arch) {
    g.strs[0].second = arch;
    for (auto& [k, v] : g.nums) k.replace(0, 5, arch);
    return g;
  };
  Gguf gemma = as_arch(swa, "gemma2");
  write_bytes(p, gemma.bytes());
  CHECK(read_gguf_model(p).memory == "iswa");
  CHECK(read_gguf_model(p).kv_sections == std::vector<std::vector<int64_t>>{{1}, {0, 2}});
  gemma.nums.push_back({"gemma2.attention.sliding_window_pattern", 3});
  write_bytes(p, gemma.bytes());
  CHECK(read_gguf_model(p).kv_sections == std::vector<std::vector<int64_t>>{{2}, {0, 1}});
  write_bytes(p, as_arch(llama_gguf(3, 8, 2, 16), "qwen2vl").bytes());
  CHECK(read_gguf_model(p).cell_ext);
  CHECK(read_gguf_model(p).memory == "kv");
  CHECK_THROWS(require_plain_cache(read_gguf_model(p), "a test"));
  const auto good = llama_gguf(3, 8, 2, 16).bytes();
  for (size_t n = 0; n < good.size(); ++n) {
    write_bytes(p, std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)));
    const std::string r = reason_of([&] { read_gguf_model(p); });
    INFO("cut at " << n << ": " << r);
    CHECK((r == "TRUNCATED" || r == "BAD_MODEL"));
  }
  std::vector<uint8_t> huge = good;
  huge[16] = 0xff;  // the key count's low byte: far more keys than the file holds
  huge[20] = 0x7f;
  write_bytes(p, huge);
  CHECK(reason_of([&] { read_gguf_model(p); }) == "BAD_MODEL");
}

TEST_CASE("llama state: cells sorted into position order, V by row and transposed", "[llama_state]") {
  TempDir t;
  write_bytes(t.file("m.gguf"), llama_gguf(2, 4, 2, 4).bytes());
  const GgufModel m = read_gguf_model(t.file("m.gguf"));
  const std::vector<Cell> cells = {{0, {0}}, {5, {0}}, {1, {0}}, {2, {0}}};  // a shifted cache: 3, 4 erased
  for (bool v_trans : {false, true}) {
    write_bytes(t.file("s.bin"), ggsq(cells, 2, 8, v_trans, 0, kv_value));
    const auto ins = inspect_llama_state(t.file("s.bin"), &m, {});
    CHECK(ins.rows == 4);
    CHECK(ins.pos_min == 0);
    CHECK(ins.pos_max == 5);
    CHECK(ins.gaps == 2);
    CHECK_FALSE(ins.cells_in_order);
    CHECK(ins.v_trans == v_trans);
    const std::string out = t.file(v_trans ? "vt.h5" : "v.h5");
    import_llama_state(t.file("s.bin"), m, {}, json{{"model_artifact_sha256", std::string(64, 'a')}}, std::nullopt, out,
                       false);
    DumpReader d(out);
    CHECK(d.positions() == std::vector<int64_t>{0, 1, 2, 5});
    CHECK(d.tokens() == std::vector<int64_t>{100, 101, 102, 103});  // the file's list, one per row
    CHECK(d.info().id.rope_config.find("interleaved") != std::string::npos);
    const int order[] = {0, 2, 3, 1};  // file cells in position order
    for (int l = 0; l < 2; ++l)
      for (int h = 0; h < 2; ++h) {
        std::vector<float> k(16), v(16);
        d.read_k(l, h, 0, 4, k.data());
        d.read_v(l, h, 0, 4, v.data());
        for (int r = 0; r < 4; ++r)
          for (int i = 0; i < 4; ++i) {
            CHECK(k[static_cast<size_t>(r * 4 + i)] == kv_value(0, l, order[r], h * 4 + i));
            CHECK(v[static_cast<size_t>(r * 4 + i)] == kv_value(1, l, order[r], h * 4 + i));
          }
      }
  }
}

TEST_CASE("llama state: q8_0 decoded and Hadamard-rotated caches un-rotated", "[llama_state]") {
  TempDir t;
  write_bytes(t.file("m.gguf"), llama_gguf(1, 1, 1, 64).bytes());
  const GgufModel m = read_gguf_model(t.file("m.gguf"));
  // One cell, K and V q8_0 with scale 0.5: stored values 0.5 * q, q = (j * 7 % 61) - 30.
  Bytes o;
  o.put<uint32_t>(0x67677371u).put<uint32_t>(3).put<uint32_t>(0).put<uint32_t>(1).put<uint32_t>(1);
  o.put<int32_t>(0).put<uint32_t>(1).put<int32_t>(0).put<uint32_t>(0).put<uint32_t>(1);
  std::vector<double> stored(64);
  for (int kv = 0; kv < 2; ++kv) {
    o.put<int32_t>(8).put<uint64_t>(68);
    for (int b = 0; b < 2; ++b) {
      o.put<uint16_t>(f32_to_f16(0.5f));
      for (int j = 0; j < 32; ++j) {
        const int q = ((b * 32 + j) * 7 % 61) - 30;
        o.put<int8_t>(static_cast<int8_t>(q));
        stored[static_cast<size_t>(b * 32 + j)] = 0.5 * q;
      }
    }
  }
  write_bytes(t.file("q.bin"), o.b);
  // The Sylvester Hadamard matrix of order 64, built by its definition H_2n = [[H, H], [H, -H]].
  std::vector<double> H(64 * 64, 0);
  H[0] = 1;
  for (int s = 1; s < 64; s *= 2)
    for (int i = 0; i < s; ++i)
      for (int j = 0; j < s; ++j) {
        H[static_cast<size_t>((i + s) * 64 + j)] = H[static_cast<size_t>(i * 64 + j)];
        H[static_cast<size_t>(i * 64 + j + s)] = H[static_cast<size_t>(i * 64 + j)];
        H[static_cast<size_t>((i + s) * 64 + j + s)] = -H[static_cast<size_t>(i * 64 + j)];
      }
  const json meta{{"model_artifact_sha256", std::string(64, 'a')}};
  for (auto rot : {LlamaRotation::automatic, LlamaRotation::off}) {
    LlamaStateOptions opt;
    opt.rotation = rot;
    const std::string out = t.file(rot == LlamaRotation::off ? "off.h5" : "auto.h5");
    const auto s = import_llama_state(t.file("q.bin"), m, opt, meta, std::nullopt, out, false);
    CHECK(s.geo.dtype == DType::f32);
    DumpReader d(out);
    std::vector<float> k(64), v(64);
    d.read_k(0, 0, 0, 1, k.data());
    d.read_v(0, 0, 0, 1, v.data());
    for (int i = 0; i < 64; ++i) {
      double want = stored[static_cast<size_t>(i)];
      if (rot != LlamaRotation::off) {
        want = 0;
        for (int j = 0; j < 64; ++j) want += H[static_cast<size_t>(i * 64 + j)] * stored[static_cast<size_t>(j)] / 8.0;
      }
      CHECK(std::fabs(k[static_cast<size_t>(i)] - want) < 1e-5);
      CHECK(std::fabs(v[static_cast<size_t>(i)] - want) < 1e-5);
    }
  }
}

TEST_CASE("llama state: hostile files get reason codes and no output", "[llama_state]") {
  TempDir t;
  write_bytes(t.file("m.gguf"), llama_gguf(2, 4, 2, 4).bytes());
  const GgufModel m = read_gguf_model(t.file("m.gguf"));
  const json meta{{"model_artifact_sha256", std::string(64, 'a')}};
  const std::string out = t.file("out.h5");
  auto import_reason = [&](const std::vector<uint8_t>& b, LlamaStateOptions o = {}) {
    write_bytes(t.file("s.bin"), b);
    const std::string r = reason_of([&] { import_llama_state(t.file("s.bin"), m, o, meta, std::nullopt, out, false); });
    CHECK_FALSE(exists(out));
    return r;
  };
  const std::vector<Cell> cells = {{0, {0}}, {1, {0}}, {2, {0}}};
  const auto good = ggsq(cells, 2, 8, true, 1, kv_value);
  for (size_t n = 0; n < good.size(); n += (n < 200 ? 1 : 7)) {
    const std::string r = import_reason(std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(n)));
    INFO("cut at " << n << ": " << r);
    CHECK((r == "TRUNCATED" || r == "BAD_STATE_FILE"));
  }
  auto trailing = good;
  trailing.push_back(0);
  CHECK(import_reason(trailing) == "BAD_STATE_FILE");
  CHECK(import_reason(ggsq({{0, {0}}, {0, {0}}}, 2, 8, false, 0, kv_value)) == "BAD_STATE_FILE");  // same position
  CHECK(import_reason(ggsq({{0, {0}}, {1, {1}}}, 2, 8, false, 0, kv_value)) == "USAGE");           // which sequence?
  LlamaStateOptions seq1;
  seq1.seq_id = 1;
  CHECK(reason_of([&] {
          import_llama_state(t.file("s.bin"), m, seq1, meta, std::nullopt, t.file("seq1.h5"), false);
        }) == "OK");
  CHECK(DumpReader(t.file("seq1.h5")).positions() == std::vector<int64_t>{1});
  CHECK(import_reason(ggsq(cells, 2, 6, false, 0, kv_value)) == "SHAPE_MISMATCH");  // rows of 6, model 2 x 4
  CHECK(import_reason(ggsq(cells, 3, 8, false, 0, kv_value)) == "SHAPE_MISMATCH");  // 3 layers, model 2
  auto q4 = good;
  q4[12 + 12 + 4 + 4 + 3 * 12 + 8] = 2;  // layer 0 K type: q4_0
  CHECK(import_reason(q4) == "UNSUPPORTED_DTYPE");
  auto claims = good;
  claims[28] = 0xff;  // the stream's cell count: 0x7f0000ff cells
  claims[31] = 0x7f;
  CHECK(import_reason(claims) == "TRUNCATED");
  auto nan =
      ggsq(cells, 2, 8, false, 0, [](int, int l, int c, int j) { return l == 1 && c == 2 && j == 3 ? NAN : 1.f; });
  CHECK(import_reason(nan) == "NON_FINITE");
  write_bytes(t.file("s.bin"), nan);
  CHECK(reason_of([&] { verify_llama_state(t.file("s.bin"), &m, {}, "", std::nullopt); }) == "NON_FINITE");
  CHECK(inspect_llama_state(t.file("s.bin"), &m, {}).health[2].nonfinite_k == 1);  // layer 1, head 0
}

TEST_CASE("llama state: GGUF metadata is read as llama.cpp reads it (types, enums, ranges)", "[llama_state]") {
  TempDir t;
  const std::string p = t.file("m.gguf");
  auto reason = [&](const Gguf& g) {
    write_bytes(p, g.bytes());
    return reason_of([&] { read_gguf_model(p); });
  };
  auto with = [](const std::string& key, uint32_t type, std::vector<uint8_t> v) {
    Gguf g = llama_gguf(3, 8, 2, 16);
    g.raw.push_back({key, type, std::move(v)});
    return g;
  };
  constexpr uint32_t U32 = 4, F32 = 6, BOOL = 7;
  CHECK(reason(with("llama.rope.freq_base", BOOL, {1})) == "BAD_MODEL");  // once theta 1
  CHECK(reason(with("llama.rope.freq_base", U32, raw_of<uint32_t>(500000))) == "BAD_MODEL");
  write_bytes(p, with("llama.rope.freq_base", F32, raw_of<float>(500000.f)).bytes());
  CHECK(read_gguf_model(p).rope_theta == 500000.0);
  CHECK(reason(with("llama.rope.dimension_count", U32, raw_of<uint32_t>(7))) == "BAD_MODEL");   // odd
  CHECK(reason(with("llama.rope.dimension_count", U32, raw_of<uint32_t>(18))) == "BAD_MODEL");  // > head_dim
  CHECK(reason(with("llama.block_count", F32, raw_of<float>(3.f))) == "BAD_MODEL");             // not an integer
  write_bytes(p, with("llama.rope.dimension_count", U32, raw_of<uint32_t>(8)).bytes());
  const GgufModel partial = read_gguf_model(p);
  CHECK(partial.rope_dims == 8);
  CHECK(partial.rope_config().find("\"rotated_dims\":8") != std::string::npos);  // recorded, not only "partial"
  for (const std::string& bad : {std::string("foo"), std::string(), std::string("\xff\xfe"), std::string(70000, 'y')}) {
    Gguf g = llama_gguf(3, 8, 2, 16);
    g.strs.push_back({"llama.rope.scaling.type", bad});
    INFO("scaling of " << bad.size() << " bytes");
    CHECK(reason(g) == "BAD_MODEL");
  }
  Gguf yarn = llama_gguf(3, 8, 2, 16);
  yarn.strs.push_back({"llama.rope.scaling.type", "yarn"});
  write_bytes(p, yarn.bytes());
  CHECK(read_gguf_model(p).rope_scaling == "yarn");
}

TEST_CASE("llama state: sequence ids are llama.cpp's 0 to 255, each sequence in one stream", "[llama_state]") {
  TempDir t;
  const std::string s = t.file("s.bin");
  auto reason = [&](const std::vector<uint8_t>& b) {
    write_bytes(s, b);
    return reason_of([&] { inspect_llama_state(s, nullptr, {}); });
  };
  CHECK(reason(ggsq({{0, {0}}, {1, {300}}}, 2, 8, false, 0, kv_value)) == "BAD_STATE_FILE");
  CHECK(reason(ggsq({{0, {-1}}}, 2, 8, false, 0, kv_value)) == "BAD_STATE_FILE");
  std::vector<int32_t> many(257);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>(i % 256);
  CHECK(reason(ggsq({{0, many}}, 2, 8, false, 0, kv_value)) == "BAD_STATE_FILE");
  CHECK(reason(ggsq({{0, {0, 255}}}, 2, 8, false, 0, kv_value)) == "OK");
  // Two streams, sequence 0 in both: damaged whichever sequence is read.
  const std::vector<uint8_t> one = ggsq({{0, {0}}}, 2, 8, false, 0, kv_value);
  const size_t head = 12 + 4;  // magic, version, n_token = 1, the token
  Bytes two;
  two.b.assign(one.begin(), one.begin() + static_cast<long>(head));
  two.put<uint32_t>(2);
  const std::vector<uint8_t> stream(one.begin() + static_cast<long>(head + 4), one.end());
  for (int k = 0; k < 2; ++k) two.b.insert(two.b.end(), stream.begin(), stream.end());
  CHECK(reason(two.b) == "BAD_STATE_FILE");
}

TEST_CASE("llama state: token ids inside the vocabulary, rotation only where llama.cpp rotates", "[llama_state]") {
  TempDir t;
  auto with_vocab = [](uint32_t head_dim, uint64_t vocab) {
    Gguf g = llama_gguf(2, 1, 1, head_dim);
    Bytes a;
    a.put<uint32_t>(8).put<uint64_t>(vocab);  // an array of strings: tokenizer.ggml.tokens
    for (uint64_t i = 0; i < vocab; ++i) a.str64("t" + std::to_string(i));
    g.raw.push_back({"tokenizer.ggml.tokens", 9, a.b});
    return g;
  };
  const json meta{{"model_artifact_sha256", std::string(64, 'a')}};
  const std::string s = t.file("s.bin");
  write_bytes(s, ggsq({{0, {0}}, {1, {0}}, {2, {0}}}, 2, 64, false, 1, kv_value));  // tokens 100, 101, 102
  auto import_reason = [&](const Gguf& g, LlamaStateOptions o, const std::string& out) {
    write_bytes(t.file("m.gguf"), g.bytes());
    const GgufModel m = read_gguf_model(t.file("m.gguf"));
    return reason_of([&] { import_llama_state(s, m, o, meta, std::nullopt, out, false); });
  };
  write_bytes(t.file("m.gguf"), with_vocab(64, 103).bytes());
  CHECK(read_gguf_model(t.file("m.gguf")).vocab_size == 103);
  CHECK(import_reason(with_vocab(64, 103), {}, t.file("ok.h5")) == "OK");
  CHECK(DumpReader(t.file("ok.h5")).tokens() == std::vector<int64_t>{100, 101, 102});
  CHECK(import_reason(with_vocab(64, 102), {}, t.file("out.h5")) == "BAD_STATE_FILE");  // 102 is not a token
  CHECK_FALSE(exists(t.file("out.h5")));
  LlamaStateOptions on;
  on.rotation = LlamaRotation::on;  // an f16 cache: llama.cpp rotates only quantized ones
  CHECK(import_reason(with_vocab(64, 103), on, t.file("out.h5")) == "USAGE");
  CHECK_FALSE(exists(t.file("out.h5")));
  CHECK(reason_of([&] { inspect_llama_state(s, nullptr, on); }) == "USAGE");  // no model: no block size
}

TEST_CASE("GGUF decoder: weights beyond the memory budget are refused before they are expanded", "[llama_state]") {
  // A llama model with f32 weights (fuzz/corpus/llama_state, written by tests/llamacpp's writer).
  const std::string p = source_dir() + "/fuzz/corpus/llama_state/tiny-llama-f32.gguf";
  GgufDecoderOptions o;
  o.max_weight_bytes = 1024;
  CHECK(reason_of([&] { GgufDecoder m(p, o); }) == "OUT_OF_MEMORY");
  o.max_weight_bytes = 0;  // the machine's memory
  GgufDecoder m(p, o);
  CHECK(m.config().layers > 0);
}

// Two streams of one cache whose layer counts differ (llama.cpp writes the cache's layers in every
// stream that holds cells): refused, with or without a sequence chosen, and without a model, where
// nothing else says how many layers the cache has.
TEST_CASE("llama state: streams of one cache with different layer counts are refused", "[llama_state]") {
  TempDir t;
  Bytes f;
  f.put<uint32_t>(0x67677371u).put<uint32_t>(3).put<uint32_t>(0).put<uint32_t>(2);  // ggsq v3, no tokens, 2 streams
  for (int32_t s = 0; s < 2; ++s) {
    f.put<uint32_t>(1).put<int32_t>(0).put<uint32_t>(1).put<int32_t>(s);  // one cell at 0, sequence s
    const uint32_t layers = 1 + static_cast<uint32_t>(s);
    f.put<uint32_t>(0).put<uint32_t>(layers);  // V by row
    for (uint32_t l = 0; l < 2 * layers; ++l) {
      f.put<int32_t>(0).put<uint64_t>(16);  // f32 rows of 4 values
      for (int j = 0; j < 4; ++j) f.put<float>(1.0f);
    }
  }
  write_bytes(t.file("s.bin"), f.b);
  for (int32_t seq : {0, 1}) {
    LlamaStateOptions o;
    o.seq_id = seq;
    CHECK(reason_of([&] { inspect_llama_state(t.file("s.bin"), nullptr, o); }) == "BAD_STATE_FILE");
  }
}
