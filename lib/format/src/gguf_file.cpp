// The GGUF reader of kvtool/gguf_file.h (formats/gguf.md): the header, typed metadata and tensor
// infos, as ggml/src/gguf.cpp reads them at the llama.cpp version formats/llama-state.md names.
#include "kvtool/gguf_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "kvtool/byte_reader.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

enum GgufType : uint32_t { U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64, COUNT };

using gguf_detail::LongString;
using gguf_detail::Number;
using gguf_detail::StringArray;
using gguf_detail::Value;

constexpr uint64_t kMaxKeys = uint64_t(1) << 20;
constexpr uint64_t kMaxKeptString = 1 << 16;
constexpr uint64_t kMaxKeptArray = 4096;

uint64_t scalar_size(uint32_t t) {
  static const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return t < COUNT ? sizes[t] : 0;
}

double read_scalar(ByteReader& r, uint32_t t) {
  switch (t) {
    case U8:
    case BOOL:
      return r.get<uint8_t>("a value");
    case I8:
      return r.get<int8_t>("a value");
    case U16:
      return r.get<uint16_t>("a value");
    case I16:
      return r.get<int16_t>("a value");
    case U32:
      return r.get<uint32_t>("a value");
    case I32:
      return r.get<int32_t>("a value");
    case F32:
      return r.get<float>("a value");
    case U64:
      return static_cast<double>(r.get<uint64_t>("a value"));
    case I64:
      return static_cast<double>(r.get<int64_t>("a value"));
    default:
      return r.get<double>("a value");
  }
}

// A string (u64 length, bytes): returned when short enough to keep, else skipped (its length in
// `skipped`).
std::optional<std::string> read_string(ByteReader& r, const char* field, uint64_t* skipped = nullptr) {
  const uint64_t n = r.u64(field);
  r.need(n, field);
  if (n > kMaxKeptString) {
    r.skip(n, field);
    if (skipped) *skipped = n;
    return std::nullopt;
  }
  std::string s(static_cast<size_t>(n), '\0');
  r.read(s.data(), n, field);
  return s;
}

// The tokenizer's arrays (tokenizer.ggml.*: tokens, merges, scores, token types) are kept whole when
// asked for: each is bounded by the bytes of the file it is read from.
bool keep_whole(const std::string& key, bool tokenizer) { return tokenizer && key.rfind("tokenizer.ggml.", 0) == 0; }

std::optional<Value> read_value(ByteReader& r, uint32_t type, const std::string& key, bool tokenizer) {
  KVT_CHECK(type < COUNT, BAD_MODEL, r.what() << ": key '" << excerpt(key) << "' has unknown value type " << type);
  if (type == STR) {
    uint64_t skipped = 0;
    auto s = read_string(r, "a string value", &skipped);
    if (!s) return Value(LongString{skipped});
    return Value(*s);
  }
  if (type != ARR) return Value(Number{read_scalar(r, type), type});
  const uint32_t et = r.u32("an array's element type");
  const uint64_t n = r.u64("an array's length");
  KVT_CHECK(et < COUNT && et != ARR, BAD_MODEL,
            r.what() << ": key '" << excerpt(key) << "' is an array of unsupported type " << et);
  if (et == STR) {
    KVT_CHECK(n <= r.remaining() / 8, TRUNCATED,
              r.what() << ": array '" << excerpt(key) << "' claims " << n << " strings");
    if (!keep_whole(key, tokenizer)) {
      for (uint64_t i = 0; i < n; ++i) read_string(r, "a string in an array");
      return Value(StringArray{n});
    }
    std::vector<std::string> all;
    for (uint64_t i = 0; i < n; ++i) {
      auto s = read_string(r, "a string in an array");
      KVT_CHECK(s, BAD_MODEL, r.what() << ": a string of '" << excerpt(key) << "' is longer than any token");
      all.push_back(std::move(*s));
    }
    return Value(std::move(all));
  }
  const uint64_t es = scalar_size(et);
  KVT_CHECK(n <= r.remaining() / es, TRUNCATED,
            r.what() << ": array '" << excerpt(key) << "' claims " << n << " elements beyond the end of the file");
  if (n > kMaxKeptArray && !keep_whole(key, tokenizer)) {
    r.skip(n * es, "an array");
    return std::nullopt;
  }
  std::vector<double> v(static_cast<size_t>(n));
  for (auto& x : v) x = read_scalar(r, et);
  return Value(std::move(v));
}

std::map<std::string, Value> read_metadata(ByteReader& r, uint64_t& n_tensors, bool tokenizer) {
  char magic[4];
  r.read(magic, 4, "the magic");
  KVT_CHECK(std::memcmp(magic, "GGUF", 4) == 0, BAD_MODEL, r.what() << " is not a GGUF file (no GGUF magic)");
  const uint32_t version = r.u32("the version");
  KVT_CHECK(version == 2 || version == 3, UNSUPPORTED_VERSION,
            r.what() << " is GGUF version " << version << "; kvtool reads versions 2 and 3 (little-endian)");
  n_tensors = r.u64("the tensor count");
  const uint64_t n_kv = r.u64("the key count");
  KVT_CHECK(n_kv <= kMaxKeys && n_kv <= r.remaining() / 12, BAD_MODEL,
            r.what() << " claims " << n_kv << " metadata keys, more than its size allows");
  std::map<std::string, Value> kv;
  for (uint64_t i = 0; i < n_kv; ++i) {
    auto key = read_string(r, "a key");
    KVT_CHECK(key && !key->empty(), BAD_MODEL, r.what() << ": metadata key " << i << " is empty or too long");
    const uint32_t type = r.u32("a value type");
    auto v = read_value(r, type, *key, tokenizer);
    if (v) KVT_CHECK(kv.emplace(*key, std::move(*v)).second, BAD_MODEL, r.what() << ": key '" << *key << "' twice");
  }
  return kv;
}

// ggml's tensor types (ggml/include/ggml.h); sizes (values and bytes per block, ggml-common.h) for
// those kvtool decodes.
const GgmlType kTypes[] = {
    {0, "f32", 1, 4},       {1, "f16", 1, 2},      {2, "q4_0", 32, 18},    {3, "q4_1", 32, 20},  {6, "q5_0", 32, 22},
    {7, "q5_1", 32, 24},    {8, "q8_0", 32, 34},   {9, "q8_1", 0, 0},      {10, "q2_K", 0, 0},   {11, "q3_K", 0, 0},
    {12, "q4_K", 256, 144}, {13, "q5_K", 0, 0},    {14, "q6_K", 256, 210}, {15, "q8_K", 0, 0},   {16, "iq2_xxs", 0, 0},
    {17, "iq2_xs", 0, 0},   {18, "iq3_xxs", 0, 0}, {19, "iq1_s", 0, 0},    {20, "iq4_nl", 0, 0}, {21, "iq3_s", 0, 0},
    {22, "iq2_s", 0, 0},    {23, "iq4_xs", 0, 0},  {24, "i8", 0, 0},       {25, "i16", 0, 0},    {26, "i32", 0, 0},
    {27, "i64", 0, 0},      {28, "f64", 0, 0},     {29, "iq1_m", 0, 0},    {30, "bf16", 1, 2},   {34, "tq1_0", 0, 0},
    {35, "tq2_0", 0, 0},    {39, "mxfp4", 0, 0},   {40, "nvfp4", 0, 0},    {41, "q1_0", 0, 0},   {42, "q2_0", 0, 0}};

constexpr uint64_t kMaxTensors = uint64_t(1) << 20;
constexpr uint64_t kMaxName = 63;  // GGML_MAX_NAME - 1
constexpr uint32_t kMaxDims = 4;   // GGML_MAX_DIMS

GgufTensor read_tensor_info(ByteReader& r) {
  GgufTensor t;
  auto name = read_string(r, "a tensor name");
  KVT_CHECK(name && !name->empty() && name->size() <= kMaxName, BAD_MODEL,
            r.what() << ": a tensor name is empty or longer than ggml's " << kMaxName << " bytes");
  t.name = *name;
  const uint32_t n_dims = r.u32("a tensor's dimension count");
  KVT_CHECK(n_dims >= 1 && n_dims <= kMaxDims, BAD_MODEL,
            r.what() << ": tensor '" << printable(t.name) << "' has " << n_dims << " dimensions (ggml: 1 to 4)");
  int64_t elements = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    const int64_t ne = r.get<int64_t>("a tensor dimension");
    KVT_CHECK(ne >= 0 && (ne == 0 || elements <= INT64_MAX / ne), BAD_MODEL,
              r.what() << ": tensor '" << printable(t.name) << "' has a negative or overflowing shape");
    elements *= ne;
    t.dims.push_back(ne);
  }
  t.type = r.u32("a tensor type");
  t.offset = r.u64("a tensor offset");
  const GgmlType ty = ggml_type(t.type);
  KVT_CHECK(
      ty.decoded(), UNSUPPORTED_DTYPE,
      r.what() << ": tensor '" << printable(t.name) << "' is " << ty.name << " (ggml type " << t.type
               << "); kvtool decodes f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_K and q6_K (formats/gguf.md)");
  KVT_CHECK(t.dims[0] % ty.block == 0, BAD_MODEL,
            r.what() << ": tensor '" << printable(t.name) << "' has rows of " << t.dims[0]
                     << " values, not a multiple of " << ty.name << "'s block of " << ty.block);
  const uint64_t blocks = static_cast<uint64_t>(elements / ty.block);
  KVT_CHECK(blocks <= UINT64_MAX / static_cast<uint64_t>(ty.bytes), BAD_MODEL,
            r.what() << ": tensor '" << printable(t.name) << "' is larger than any file");
  t.bytes = blocks * static_cast<uint64_t>(ty.bytes);
  return t;
}

}  // namespace

GgmlType ggml_type(uint32_t id) {
  for (const auto& t : kTypes)
    if (t.id == id) return t;
  return GgmlType{id, "unknown", 0, 0};
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

GgufFile::GgufFile(const std::string& path, bool tensors, bool tokenizer)
    : path_(path), what_("the GGUF file '" + path + "'") {
  ByteReader r(path, what_);
  file_size_ = r.size();
  uint64_t n_tensors = 0;
  kv_ = read_metadata(r, n_tensors, tokenizer);
  if (!tensors) return;
  KVT_CHECK(n_tensors <= kMaxTensors && n_tensors <= r.remaining() / 24, BAD_MODEL,
            what_ << " claims " << n_tensors << " tensors, more than its size allows");
  for (uint64_t i = 0; i < n_tensors; ++i) {
    tensors_.push_back(read_tensor_info(r));
    KVT_CHECK(by_name_.emplace(tensors_.back().name, tensors_.size() - 1).second, BAD_MODEL,
              what_ << ": tensor '" << printable(tensors_.back().name) << "' twice");
  }
  // ggml: general.alignment (u32, a power of two; 32 when absent); the data section starts at the
  // next multiple of it, and each tensor at the offset the ones before it leave, padded.
  const auto align = static_cast<uint64_t>(count("general.alignment", 32));
  KVT_CHECK(align <= 65536 && (align & (align - 1)) == 0, BAD_MODEL,
            what_ << ": general.alignment " << align << " is not a power of two up to 65536");
  const uint64_t data = (r.offset() + align - 1) / align * align;
  KVT_CHECK(data <= file_size_, TRUNCATED, what_ << " ends before its tensor data");
  uint64_t expected = 0;
  for (auto& t : tensors_) {
    KVT_CHECK(t.offset == expected, BAD_MODEL,
              what_ << ": tensor '" << printable(t.name) << "' is at data offset " << t.offset << ", ggml expects "
                    << expected);
    KVT_CHECK(
        t.offset <= file_size_ - data && t.bytes <= file_size_ - data - t.offset, TRUNCATED,
        what_ << ": tensor '" << printable(t.name) << "' (" << t.bytes << " bytes) runs past the end of the file");
    t.offset += data;
    expected += (t.bytes + align - 1) / align * align;
  }
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

bool GgufFile::has_prefix(const std::string& p) const {
  auto it = kv_.lower_bound(p);
  return it != kv_.end() && it->first.compare(0, p.size(), p) == 0;
}
std::string GgufFile::str(const std::string& k) const {
  auto it = kv_.find(k);
  if (it == kv_.end()) return "";
  if (const auto* l = std::get_if<LongString>(&it->second))
    KVT_THROW(BAD_MODEL, what_ << ": '" << k << "' is a string of " << l->bytes << " bytes, longer than any value "
                               << "kvtool reads (" << kMaxKeptString << ")");
  KVT_CHECK(std::holds_alternative<std::string>(it->second), BAD_MODEL, what_ << ": '" << k << "' is not a string");
  return std::get<std::string>(it->second);
}
// A positive integer (a scalar, or an array whose entries are all equal: per-layer head counts).
int64_t GgufFile::count(const std::string& k, int64_t def) const {
  auto it = kv_.find(k);
  if (it == kv_.end()) return def;
  double x = 0;
  if (const auto* a = std::get_if<std::vector<double>>(&it->second)) {
    KVT_CHECK(!a->empty(), BAD_MODEL, what_ << ": '" << k << "' is an empty array");
    KVT_CHECK(std::all_of(a->begin(), a->end(), [&](double y) { return y == a->front(); }), UNSUPPORTED_CACHE,
              what_ << ": '" << k << "' differs between layers; kvtool imports caches with one geometry per layer");
    x = a->front();
  } else {
    const auto* n = std::get_if<Number>(&it->second);
    KVT_CHECK(n && n->type != BOOL && n->type != F32 && n->type != F64, BAD_MODEL,
              what_ << ": '" << k << "' is not an integer");
    x = n->value;
  }
  KVT_CHECK(x >= 1 && x <= 1e9 && x == static_cast<double>(static_cast<int64_t>(x)), BAD_MODEL,
            what_ << ": '" << k << "' = " << x << " is not a positive integer");
  return static_cast<int64_t>(x);
}
// The length of an array of strings (0 when absent).
int64_t GgufFile::string_count(const std::string& k) const {
  auto it = kv_.find(k);
  if (it == kv_.end()) return 0;
  uint64_t count = 0;
  if (const auto* kept = std::get_if<std::vector<std::string>>(&it->second)) {
    count = kept->size();
  } else {
    const auto* a = std::get_if<StringArray>(&it->second);
    KVT_CHECK(a, BAD_MODEL, what_ << ": '" << k << "' is not an array of strings");
    count = a->count;
  }
  KVT_CHECK(count <= uint64_t(INT32_MAX), BAD_MODEL,
            what_ << ": '" << k << "' holds " << count << " strings, more than llama.cpp's int32 token ids reach");
  return static_cast<int64_t>(count);
}

// A float, as llama.cpp reads one (gguf_get_val_f32: the key must hold a float32; float64 too).
double GgufFile::number(const std::string& k, double def) const {
  auto it = kv_.find(k);
  if (it == kv_.end()) return def;
  const auto* n = std::get_if<Number>(&it->second);
  KVT_CHECK(n && (n->type == F32 || n->type == F64), BAD_MODEL,
            what_ << ": '" << k << "' is not a float (llama.cpp reads it as float32)");
  return n->value;
}
// Any number (a bool or an integer included), for keys kvtool only tests against zero.
double GgufFile::any_number(const std::string& k, double def) const {
  auto it = kv_.find(k);
  if (it == kv_.end()) return def;
  const auto* n = std::get_if<Number>(&it->second);
  KVT_CHECK(n, BAD_MODEL, what_ << ": '" << k << "' is not a number");
  return n->value;
}

const std::vector<std::string>& GgufFile::strings(const std::string& key) const {
  static const std::vector<std::string> none;
  auto it = kv_.find(key);
  if (it == kv_.end()) return none;
  const auto* a = std::get_if<std::vector<std::string>>(&it->second);
  KVT_CHECK(a, BAD_MODEL, what_ << ": '" << key << "' is not an array of strings (read with the tokenizer's arrays)");
  return *a;
}

bool GgufFile::is_numbers(const std::string& key) const {
  auto it = kv_.find(key);
  return it != kv_.end() && std::holds_alternative<std::vector<double>>(it->second);
}

std::vector<double> GgufFile::numbers(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) return {};
  const auto* a = std::get_if<std::vector<double>>(&it->second);
  KVT_CHECK(a, BAD_MODEL, what_ << ": '" << key << "' is not an array of numbers");
  return *a;
}

}  // namespace kvtool
