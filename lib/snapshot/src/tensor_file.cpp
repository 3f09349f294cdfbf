// Tensor file readers (kvtool/tensor_file.h): .npy (format versions 1-3), .npz (a zip
// of .npy members, stored or deflated, zip64 as NumPy writes it: zip_reader.cpp) and safetensors (u64 header
// length, JSON header, raw little-endian data). Like the kvi reader (lib/format/src/artifact.cpp),
// every size and offset a header claims is checked against the file's real size before anything is
// allocated or read, with overflow-checked products; data is read with pread in the ranges asked.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "impl/tensor_file_impl.h"
#include "kvtool/half.h"
#include "kvtool/json.h"

namespace kvtool {

using impl::kMaxHeader;
using impl::le;
using impl::type_size;

namespace {

// The safetensors format allows 100 MB, but a parsed JSON document costs tens of bytes per value:
// a 60 MiB header of small values would take gigabytes. K/V headers are a few KiB (a 1,000-tensor
// checkpoint's, about 100 KiB), so 16 MiB and 2^20 values are far above any real one and keep the
// parse within a few hundred MB.
constexpr uint64_t kMaxSafetensorsHeader = 16 << 20;
constexpr uint64_t kMaxSafetensorsValues = 1 << 20;
constexpr int kMaxRank = 16;
// An upper bound on the values (and keys) a JSON text holds: one per ',' or ':' or opening bracket
// outside strings, plus one. Counted before parsing, so that the parsed document's size is bounded.
uint64_t json_value_bound(const std::string& text) {
  uint64_t n = 1;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':' || c == '[' || c == '{') {
      ++n;
    }
  }
  return n;
}

bool is_float(TensorType t) {
  return t == TensorType::f32 || t == TensorType::f16 || t == TensorType::bf16 || t == TensorType::f64;
}

// NumPy descr ('<f4', '|u1') → type. Little-endian or byte-sized only.
TensorType npy_type(const std::string& d) {
  // '>' (big-endian) and '=' (the writer's native order) are not read: NumPy writes '<' on every
  // little-endian machine.
  if (d.size() != 3 || !(d[0] == '<' || d[0] == '|')) return TensorType::other;
  const std::string t = d.substr(1);
  if (d[0] == '|' && t != "u1" && t != "i1") return TensorType::other;
  if (t == "f4") return TensorType::f32;
  if (t == "f2") return TensorType::f16;
  if (t == "f8") return TensorType::f64;
  if (t == "i1") return TensorType::i8;
  if (t == "i2") return TensorType::i16;
  if (t == "i4") return TensorType::i32;
  if (t == "i8") return TensorType::i64;
  if (t == "u1") return TensorType::u8;
  if (t == "u2") return TensorType::u16;
  if (t == "u4") return TensorType::u32;
  if (t == "u8") return TensorType::u64;
  return TensorType::other;
}

TensorType safetensors_type(const std::string& d) {
  static const std::pair<const char*, TensorType> table[] = {
      {"F32", TensorType::f32},         {"F16", TensorType::f16},        {"BF16", TensorType::bf16},
      {"F64", TensorType::f64},         {"I8", TensorType::i8},          {"I16", TensorType::i16},
      {"I32", TensorType::i32},         {"I64", TensorType::i64},        {"U8", TensorType::u8},
      {"U16", TensorType::u16},         {"U32", TensorType::u32},        {"U64", TensorType::u64},
      {"F8_E4M3", TensorType::f8_e4m3}, {"F8_E5M2", TensorType::f8_e5m2}};
  for (const auto& [name, t] : table)
    if (d == name) return t;
  return TensorType::other;
}

// A minimal reader of the Python dict literal of an npy header:
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
struct NpyHeader {
  std::string descr;
  bool fortran = false;
  std::vector<int64_t> shape;
};

class DictParser {
 public:
  DictParser(const std::string& s, const std::string& what) : s_(s), what_(what) {}
  NpyHeader parse() {
    NpyHeader h;
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    while (true) {
      skip();
      if (peek() == '}') break;
      const std::string key = string_lit();
      expect(':');
      if (key == "descr") {
        skip();
        KVT_CHECK(peek() == '\'' || peek() == '"', UNSUPPORTED_DTYPE,
                  what_ << " has a structured dtype; kvtool imports plain float arrays");
        h.descr = string_lit();
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran = boolean();
        have_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        have_shape = true;
      } else {
        fail("an unknown header key '" + key + "'");
      }
      skip();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip();
      KVT_CHECK(peek() == '}', BAD_TENSOR_FILE, what_ << ": malformed .npy header");
    }
    ++i_;
    KVT_CHECK(have_descr && have_order && have_shape, BAD_TENSOR_FILE,
              what_ << ": the .npy header lacks one of descr, fortran_order, shape");
    skip();  // only padding may follow the dict: NumPy's literal_eval refuses anything else
    if (i_ != s_.size()) fail("bytes after its dict");
    return h;
  }

 private:
  [[noreturn]] void fail(const std::string& m) { KVT_THROW(BAD_TENSOR_FILE, what_ << ": .npy header has " << m); }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t')) ++i_;
  }
  char peek() { return i_ < s_.size() ? s_[i_] : '\0'; }
  void expect(char c) {
    skip();
    if (peek() != c) fail(std::string("no '") + c + "' where one is expected");
    ++i_;
  }
  std::string string_lit() {
    skip();
    const char q = peek();
    if (q != '\'' && q != '"') fail("a key or value that is not a string");
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string::npos || end - i_ > 64) fail("an unterminated or overlong string");
    std::string r = s_.substr(i_ + 1, end - i_ - 1);
    i_ = end + 1;
    return r;
  }
  bool boolean() {
    skip();
    if (s_.compare(i_, 4, "True") == 0) return i_ += 4, true;
    if (s_.compare(i_, 5, "False") == 0) return i_ += 5, false;
    fail("a fortran_order that is neither True nor False");
  }
  std::vector<int64_t> tuple() {
    expect('(');
    std::vector<int64_t> dims;
    while (true) {
      skip();
      if (peek() == ')') break;
      if (peek() < '0' || peek() > '9') fail("a shape entry that is not a non-negative integer");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (v > (std::numeric_limits<int64_t>::max() - 9) / 10) fail("a shape entry beyond int64");
        v = v * 10 + (s_[i_++] - '0');
      }
      while (peek() == 'L') ++i_;  // Python 2 longs
      dims.push_back(v);
      if (dims.size() > static_cast<size_t>(kMaxRank)) fail("more than 16 dimensions");
      skip();
      if (peek() == ',') ++i_;
    }
    ++i_;
    return dims;
  }
  const std::string& s_;
  const std::string& what_;
  size_t i_ = 0;
};

}  // namespace

uint64_t TensorFile::Impl::parse_npy(const uint8_t* head, uint64_t avail, const std::string& what,
                                     TensorInfo& info) const {
  KVT_CHECK(avail >= 10, TRUNCATED, what << " is too short for a .npy header");
  KVT_CHECK(std::memcmp(head, "\x93NUMPY", 6) == 0, BAD_TENSOR_FILE, what << " does not start with the .npy magic");
  const int major = head[6];
  KVT_CHECK(major >= 1 && major <= 3, BAD_TENSOR_FILE,
            what << " is .npy format version " << major << " (1-3 are read)");
  const uint64_t prefix = major == 1 ? 10 : 12;
  KVT_CHECK(avail >= prefix, TRUNCATED, what << " is too short for a .npy header");
  const uint64_t hlen = major == 1 ? le(head + 8, 2) : le(head + 8, 4);
  KVT_CHECK(hlen <= kMaxHeader, BAD_TENSOR_FILE, what << " claims a " << hlen << "-byte .npy header");
  KVT_CHECK(prefix + hlen <= avail, TRUNCATED, what << " is shorter than its .npy header length says");
  const std::string text(reinterpret_cast<const char*>(head + prefix), hlen);
  NpyHeader h = DictParser(text, what).parse();
  KVT_CHECK(!h.fortran, BAD_TENSOR_FILE,
            what << " is stored in Fortran order; save it with np.save(f, np.ascontiguousarray(a))");
  info.type_text = h.descr;
  info.type = npy_type(h.descr);
  info.shape = h.shape;
  return prefix + hlen;
}

void TensorFile::Impl::open_npy() {
  format = "npy";
  std::vector<uint8_t> head(static_cast<size_t>(std::min<uint64_t>(size, kMaxHeader + 12)));
  pread_all(0, head.size(), head.data());
  TensorInfo info;
  std::string name = path.substr(path.find_last_of('/') + 1);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0) name.resize(name.size() - 4);
  info.name = name;
  Storage st;
  st.offset = parse_npy(head.data(), head.size(), "'" + path + "'", info);
  add(info, st);
  const TensorInfo& t = tensors.back();
  const uint64_t data = size - st.offset, esize = type_size(t.type);
  if (esize == 0) return;  // listing works; reading is refused
  KVT_CHECK(static_cast<uint64_t>(t.elements) <= data / esize, TRUNCATED,
            "'" << path << "' holds " << data << " data bytes; its shape needs " << t.elements << " x " << esize);
  KVT_CHECK(static_cast<uint64_t>(t.elements) * esize == data, BAD_LAYOUT,
            "'" << path << "' has " << data - static_cast<uint64_t>(t.elements) * esize
                << " bytes after the array its header describes");
}

void TensorFile::Impl::open_safetensors() {
  format = "safetensors";
  uint8_t h8[8];
  pread_all(0, 8, h8);
  const uint64_t n = le(h8, 8);
  KVT_CHECK(n <= kMaxSafetensorsHeader, BAD_TENSOR_FILE,
            "'" << path << "' claims a " << n << "-byte safetensors header (at most " << kMaxSafetensorsHeader
                << " are read)");
  KVT_CHECK(n <= size - 8, TRUNCATED, "'" << path << "' is shorter than its safetensors header length (" << n << ")");
  std::string text(static_cast<size_t>(n), '\0');
  pread_all(8, text.size(), text.data());
  KVT_CHECK(json_value_bound(text) <= kMaxSafetensorsValues, BAD_TENSOR_FILE,
            "the safetensors header of '" << path << "' holds more than " << kMaxSafetensorsValues
                                          << " JSON values (a header lists tensors, not data)");
  const json j = parse_untrusted_json(text, "the safetensors header of '" + path + "'", Reason::BAD_TENSOR_FILE);
  KVT_CHECK(j.is_object(), BAD_TENSOR_FILE, "the safetensors header of '" << path << "' is not a JSON object");
  const uint64_t base = 8 + n, region = size - base;
  for (const auto& [name, e] : j.items()) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "' of '" + path + "'";
    KVT_CHECK(e.is_object() && e.contains("dtype") && e["dtype"].is_string() && e.contains("shape") &&
                  e["shape"].is_array() && e.contains("data_offsets") && e["data_offsets"].is_array() &&
                  e["data_offsets"].size() == 2,
              BAD_TENSOR_FILE, what << " lacks dtype, shape or data_offsets");
    TensorInfo info;
    info.name = name;
    info.type_text = e["dtype"].get<std::string>();
    info.type = safetensors_type(info.type_text);
    KVT_CHECK(e["shape"].size() <= static_cast<size_t>(kMaxRank), BAD_TENSOR_FILE, what << " has over 16 dimensions");
    for (const auto& d : e["shape"]) {
      KVT_CHECK(d.is_number_unsigned(), BAD_TENSOR_FILE,
                what << " has a shape entry that is not a non-negative integer");
      KVT_CHECK(d.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), SHAPE_MISMATCH,
                what << " has a dimension beyond int64");
      info.shape.push_back(d.get<int64_t>());
    }
    const json& off = e["data_offsets"];
    KVT_CHECK(off[0].is_number_unsigned() && off[1].is_number_unsigned(), BAD_TENSOR_FILE,
              what << " has data_offsets that are not non-negative integers");
    const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    KVT_CHECK(b <= end, BAD_LAYOUT,
              what << " has data_offsets [" << b << ", " << end << ") that end before they begin");
    KVT_CHECK(end <= region, TRUNCATED,
              what << " has data_offsets [" << b << ", " << end << ") past the file's " << region << " data bytes");
    Storage st;
    st.offset = base + b;
    st.usize = end - b;
    st.span_begin = st.offset;
    st.span_end = st.offset + st.usize;
    add(info, st);
    const TensorInfo& t = tensors.back();
    const uint64_t esize = type_size(t.type);
    if (esize == 0) continue;
    KVT_CHECK(
        static_cast<uint64_t>(t.elements) <= st.usize / esize && static_cast<uint64_t>(t.elements) * esize == st.usize,
        BAD_LAYOUT,
        what << " has " << st.usize << " data bytes; dtype " << t.type_text << " and its shape need " << t.elements
             << " x " << esize);
  }
  check_no_overlap();
}

// Two tensors sharing bytes would let a writer make K and V alias (formats differ on whether that is
// legal; safetensors says no): refused.
void TensorFile::Impl::check_no_overlap() const {
  std::vector<std::pair<uint64_t, uint64_t>> r;
  for (size_t i = 0; i < where.size(); ++i)
    if (where[i].span_end > where[i].span_begin) r.emplace_back(where[i].span_begin, where[i].span_end);
  std::sort(r.begin(), r.end());
  for (size_t i = 1; i < r.size(); ++i)
    KVT_CHECK(r[i].first >= r[i - 1].second, BAD_LAYOUT,
              "'" << path << "': two tensors share the bytes at offset " << r[i].first);
}

TensorFile::TensorFile(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  RandomAccessFile::Options o;
  o.activity = "imported";
  m.file.emplace(path, o);
  m.size = m.file->size();
  uint8_t magic[8] = {0};
  const size_t k = static_cast<size_t>(std::min<uint64_t>(8, m.size));
  m.pread_all(0, k, magic);
  if (k >= 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0)
    m.open_npy();
  else if (k >= 4 && le(magic, 4) == 0x04034b50u)
    m.open_npz();
  else if (k == 8 && m.size > 8 && [&] {
             uint8_t c = 0;  // safetensors: a u64 length, then the JSON header's '{'
             m.pread_all(8, 1, &c);
             return c == '{';
           }())
    m.open_safetensors();
  else {
    KVT_CHECK(k >= 8, TRUNCATED, "'" << path << "' is too short for any tensor file (" << m.size << " bytes)");
    KVT_THROW(BAD_TENSOR_FILE, "'" << path << "' is not a .npy, .npz or safetensors file");
  }
  m.release();  // headers read; reads reopen it
}

TensorFile::~TensorFile() = default;
void TensorFile::release() const { impl_->release(); }
const std::string& TensorFile::path() const { return impl_->path; }
const char* TensorFile::format() const { return impl_->format.c_str(); }
const std::vector<TensorInfo>& TensorFile::tensors() const { return impl_->tensors; }

int64_t TensorFile::find(const std::string& name) const {
  for (size_t i = 0; i < impl_->tensors.size(); ++i)
    if (impl_->tensors[i].name == name) return static_cast<int64_t>(i);
  return -1;
}

namespace {

void check_range(const TensorInfo& t, int64_t first, int64_t count, const std::string& path) {
  KVT_CHECK(first >= 0 && count >= 0 && first <= t.elements && count <= t.elements - first, INTERNAL,
            "read of elements [" << first << ", " << first + count << ") of tensor '" << t.name << "' in '" << path
                                 << "' beyond its " << t.elements);
}

}  // namespace

void TensorFile::read_f32(int64_t index, int64_t first, int64_t count, float* out) const {
  const Impl& m = *impl_;
  KVT_CHECK(index >= 0 && index < static_cast<int64_t>(m.tensors.size()), INTERNAL, "tensor index");
  const TensorInfo& t = m.tensors[static_cast<size_t>(index)];
  KVT_CHECK(is_float(t.type), UNSUPPORTED_DTYPE,
            "tensor '" << t.name << "' of '" << m.path << "' has dtype " << t.type_text
                       << "; K, V and Q are read from float32, float16, bfloat16 or float64");
  check_range(t, first, count, m.path);
  const size_t es = type_size(t.type);
  constexpr int64_t kChunk = 1 << 16;
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(count, kChunk)) * es);
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kChunk, count - done);
    m.read_bytes(static_cast<size_t>(index), static_cast<uint64_t>(first + done) * es, static_cast<size_t>(n) * es,
                 buf.data());
    float* o = out + done;
    const uint8_t* p = buf.data();
    switch (t.type) {
      case TensorType::f32:
        std::memcpy(o, p, static_cast<size_t>(n) * 4);
        break;
      case TensorType::f16:
        for (int64_t i = 0; i < n; ++i) o[i] = f16_to_f32(static_cast<uint16_t>(le(p + 2 * i, 2)));
        break;
      case TensorType::bf16:
        for (int64_t i = 0; i < n; ++i) o[i] = bf16_to_f32(static_cast<uint16_t>(le(p + 2 * i, 2)));
        break;
      default: {  // f64
        for (int64_t i = 0; i < n; ++i) {
          double d;
          std::memcpy(&d, p + 8 * i, 8);
          o[i] = static_cast<float>(d);
        }
      }
    }
    done += n;
  }
}

// OCP 8-bit floating point (OFP8) formats, as vLLM's fp8 KV caches (torch.float8_e4m3fn,
// torch.float8_e5m2) and safetensors F8_E4M3 / F8_E5M2 store them. E4M3: bias 7, subnormals
// m x 2^-9, exponent 15 is a normal binade except mantissa 7 (NaN). E5M2: bias 15, subnormals
// m x 2^-16, exponent 31 is inf (m = 0) or NaN.
float decode_fp8(uint8_t byte, TensorType kind) {
  const bool e5m2 = kind == TensorType::f8_e5m2;
  KVT_CHECK(e5m2 || kind == TensorType::f8_e4m3, INTERNAL, "decode_fp8 of a non-fp8 kind");
  const int mbits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7, emax = e5m2 ? 31 : 15;
  const int e = (byte & 0x7f) >> mbits, m = byte & ((1 << mbits) - 1);
  const float sign = (byte & 0x80) ? -1.f : 1.f;
  if (e5m2 && e == emax) return m == 0 ? sign * std::numeric_limits<float>::infinity() : std::nanf("");
  if (!e5m2 && e == emax && m == 7) return std::nanf("");
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), 1 - bias - mbits);
  return sign * std::ldexp(static_cast<float>((1 << mbits) + m), e - bias - mbits);
}

bool TensorFile::hold(int64_t index, uint64_t budget) const {
  const Impl& m = *impl_;
  KVT_CHECK(index >= 0 && index < static_cast<int64_t>(m.tensors.size()), INTERNAL, "tensor index");
  const size_t idx = static_cast<size_t>(index);
  if (!m.held[idx].empty()) return true;
  // The data size was checked at open to be exactly elements x element size, in the file (or,
  // deflated, within what its compressed bytes can produce).
  const uint64_t bytes = static_cast<uint64_t>(m.tensors[idx].elements) * type_size(m.tensors[idx].type);
  if (bytes == 0 || bytes > budget) return false;
  std::vector<uint8_t> all(static_cast<size_t>(bytes));
  m.read_bytes(idx, 0, all.size(), all.data());
  m.held[idx] = std::move(all);
  m.cursors[idx].reset();  // no inflation is needed any more
  return true;
}

void TensorFile::read_fp8(int64_t index, int64_t first, int64_t count, TensorType kind, float* out) const {
  const Impl& m = *impl_;
  KVT_CHECK(index >= 0 && index < static_cast<int64_t>(m.tensors.size()), INTERNAL, "tensor index");
  const TensorInfo& t = m.tensors[static_cast<size_t>(index)];
  KVT_CHECK(t.type == kind || t.type == TensorType::u8, UNSUPPORTED_DTYPE,
            "tensor '" << t.name << "' of '" << m.path << "' has dtype " << t.type_text << ", not the "
                       << (kind == TensorType::f8_e5m2 ? "e5m2" : "e4m3") << " fp8 codes the other tensors hold");
  check_range(t, first, count, m.path);
  constexpr int64_t kChunk = 1 << 16;
  float table[256];
  for (int i = 0; i < 256; ++i) table[i] = decode_fp8(static_cast<uint8_t>(i), kind);
  std::vector<uint8_t> buf(static_cast<size_t>(std::min(count, kChunk)));
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(kChunk, count - done);
    m.read_bytes(static_cast<size_t>(index), static_cast<uint64_t>(first + done), static_cast<size_t>(n), buf.data());
    for (int64_t i = 0; i < n; ++i) out[done + i] = table[buf[static_cast<size_t>(i)]];
    done += n;
  }
}

void TensorFile::read_i64(int64_t index, int64_t first, int64_t count, int64_t* out) const {
  const Impl& m = *impl_;
  KVT_CHECK(index >= 0 && index < static_cast<int64_t>(m.tensors.size()), INTERNAL, "tensor index");
  const TensorInfo& t = m.tensors[static_cast<size_t>(index)];
  const bool fp8 = t.type == TensorType::f8_e4m3 || t.type == TensorType::f8_e5m2;
  KVT_CHECK(!is_float(t.type) && !fp8 && t.type != TensorType::other, UNSUPPORTED_DTYPE,
            "tensor '" << t.name << "' of '" << m.path << "' has dtype " << t.type_text
                       << "; token ids and positions are read from integer arrays");
  check_range(t, first, count, m.path);
  const size_t es = type_size(t.type);
  std::vector<uint8_t> buf(static_cast<size_t>(count) * es);
  m.read_bytes(static_cast<size_t>(index), static_cast<uint64_t>(first) * es, buf.size(), buf.data());
  const bool is_signed =
      t.type == TensorType::i8 || t.type == TensorType::i16 || t.type == TensorType::i32 || t.type == TensorType::i64;
  for (int64_t i = 0; i < count; ++i) {
    uint64_t u = le(buf.data() + static_cast<size_t>(i) * es, static_cast<int>(es));
    if (is_signed && es < 8 && (u >> (8 * es - 1)) & 1) u |= ~uint64_t(0) << (8 * es);  // sign-extend
    KVT_CHECK(is_signed || u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), BAD_ATTRIBUTE,
              "tensor '" << t.name << "' of '" << m.path << "' holds a value beyond int64");
    out[i] = static_cast<int64_t>(u);
  }
}

std::vector<float> read_npy_vector(const std::string& path, int64_t d) {
  TensorFile f(path);
  KVT_CHECK(std::string(f.format()) == "npy", USAGE, "'" << path << "' is a " << f.format() << " file; give a .npy");
  const TensorInfo& t = f.tensors().front();
  const bool ok_shape = (t.shape.size() == 1) || (t.shape.size() == 2 && t.shape[0] == 1);
  KVT_CHECK(
      ok_shape && t.elements == d, SHAPE_MISMATCH,
      "'" << path << "' has shape " << json(t.shape).dump() << "; a query of head dim " << d << " is [" << d << "]");
  std::vector<float> v(static_cast<size_t>(d));
  f.read_f32(0, 0, d, v.data());
  for (float x : v) KVT_CHECK(std::isfinite(x), NON_FINITE, "the query vector in '" << path << "' has NaN/Inf");
  return v;
}

}  // namespace kvtool
