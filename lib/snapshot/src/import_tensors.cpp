// Tensor file readers of `kvtool import` (kvtool/import.h): .npy (format versions 1-3), .npz (a zip
// of .npy members, stored or deflated, zip64 as NumPy writes it) and safetensors (u64 header
// length, JSON header, raw little-endian data). Like the kvi reader (lib/format/src/artifact.cpp),
// every size and offset a header claims is checked against the file's real size before anything is
// allocated or read, with overflow-checked products; data is read with pread in the ranges asked.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/json.h"
#include "kvtool/tensor_file.h"

namespace kvtool {

namespace {

constexpr uint64_t kMaxHeader = 1 << 20;  // npy header text; NumPy itself caps it far lower
// The safetensors format allows 100 MB, but a parsed JSON document costs tens of bytes per value:
// a 60 MiB header of small values would take gigabytes. K/V headers are a few KiB (a 1,000-tensor
// checkpoint's, about 100 KiB), so 16 MiB and 2^20 values are far above any real one and keep the
// parse within a few hundred MB.
constexpr uint64_t kMaxSafetensorsHeader = 16 << 20;
constexpr uint64_t kMaxSafetensorsValues = 1 << 20;
constexpr uint64_t kMaxZipEntries = 1 << 16;
constexpr int kMaxRank = 16;
// Deflate cannot expand a stream by more than 1032:1; a member claiming more is lying.
constexpr uint64_t kMaxDeflateRatio = 1032;

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

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

size_t type_size(TensorType t) {
  switch (t) {
    case TensorType::f64:
    case TensorType::i64:
    case TensorType::u64:
      return 8;
    case TensorType::f32:
    case TensorType::i32:
    case TensorType::u32:
      return 4;
    case TensorType::f16:
    case TensorType::bf16:
    case TensorType::i16:
    case TensorType::u16:
      return 2;
    case TensorType::i8:
    case TensorType::u8:
    case TensorType::f8_e4m3:
    case TensorType::f8_e5m2:
      return 1;
    case TensorType::other:
      return 0;
  }
  return 0;
}

bool is_float(TensorType t) {
  return t == TensorType::f32 || t == TensorType::f16 || t == TensorType::bf16 || t == TensorType::f64;
}

// The product of `shape` with overflow checks; each element of `size` bytes must fit in int64.
int64_t checked_elements(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t s : shape) {
    KVT_CHECK(s >= 0, BAD_TENSOR_FILE, what << " has a negative dimension");
    KVT_CHECK(s == 0 || n <= (int64_t(1) << 59) / s, SHAPE_MISMATCH,
              what << " claims more than 2^59 elements (a shape far beyond any K/V cache)");
    n *= s;
  }
  return n;
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

// Where one tensor's bytes are: at `offset` of the file (raw) or at `skip` bytes into a deflated
// stream that starts at `offset` and is `csize` bytes long.
struct Storage {
  uint64_t offset = 0;
  bool deflated = false;
  uint64_t csize = 0, usize = 0, skip = 0;
  uint32_t crc = 0;
  uint64_t span_begin = 0, span_end = 0;  // the file bytes it occupies (checked not to overlap)
};

// The decompression cursor of a deflated member: restarted when a read goes backwards.
struct Inflater {
  z_stream z{};
  bool live = false;
  uint64_t in_pos = 0;   // compressed bytes consumed (relative to the member's data)
  uint64_t out_pos = 0;  // uncompressed bytes produced
  uint32_t crc = 0;
  std::vector<uint8_t> in;
  ~Inflater() {
    if (live) inflateEnd(&z);
  }
};

struct ZipEntry {
  std::string name;
  uint16_t flags = 0, method = 0;
  uint32_t crc = 0;
  uint64_t csize = 0, usize = 0, local = 0;
};

// The zip central directory: entries, offset and size, and where the end record starts.
struct ZipDirectory {
  uint64_t entries = 0, offset = 0, size = 0, end = 0;
};

}  // namespace

struct TensorFile::Impl {
  std::string path, format;
  // Open only while reads need it (release() closes it): an import of thousands of per-layer files
  // must not hold a descriptor for each. A reopened path must still be the same file.
  mutable int fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  uint64_t size = 0;
  std::vector<TensorInfo> tensors;
  std::vector<Storage> where;
  mutable std::vector<std::unique_ptr<Inflater>> cursors;
  mutable std::vector<std::vector<uint8_t>> held;  // hold(): a tensor's bytes, or empty

  ~Impl() {
    if (fd >= 0) close(fd);
  }

  void pread_all(uint64_t off, size_t n, void* out) const {
    KVT_CHECK(off <= size && n <= size - off, TRUNCATED,
              "'" << path << "' is shorter than its headers say (" << size << " bytes)");
    if (fd < 0) reopen();
    auto* p = static_cast<uint8_t*>(out);
    while (n > 0) {
      ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      KVT_CHECK(r >= 0, IO_ERROR, "cannot read '" << path << "': " << std::strerror(errno));
      KVT_CHECK(r > 0, TRUNCATED, "'" << path << "' became shorter while it was read");
      p += r;
      off += static_cast<uint64_t>(r);
      n -= static_cast<size_t>(r);
    }
  }

  void reopen() const {
    const int f = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    KVT_CHECK(f >= 0, IO_ERROR, "cannot open '" << path << "': " << std::strerror(errno));
    struct stat st {};
    const bool same =
        fstat(f, &st) == 0 && st.st_dev == dev && st.st_ino == ino && static_cast<uint64_t>(st.st_size) == size;
    if (!same) close(f);
    KVT_CHECK(same, IO_ERROR, "'" << path << "' was replaced or changed size while it was imported");
    fd = f;
  }
  void release() const {
    if (fd >= 0) close(fd);
    fd = -1;
  }

  // Bytes [pos, pos + n) of a member's uncompressed stream (a deflated .npz member).
  void inflate_range(size_t idx, uint64_t pos, size_t n, uint8_t* out) const;
  void read_bytes(size_t idx, uint64_t byte_off, size_t n, uint8_t* out) const {
    const Storage& s = where[idx];
    if (!held[idx].empty()) {
      KVT_CHECK(byte_off <= held[idx].size() && n <= held[idx].size() - byte_off, INTERNAL, "read past a tensor");
      std::memcpy(out, held[idx].data() + byte_off, n);
    } else if (s.deflated)
      inflate_range(idx, s.skip + byte_off, n, out);
    else
      pread_all(s.offset + byte_off, n, out);
  }

  void add(TensorInfo info, Storage st) {
    const std::string what = "tensor '" + info.name + "' of '" + path + "'";
    info.elements = checked_elements(info.shape, what);
    tensors.push_back(std::move(info));
    where.push_back(st);
    cursors.emplace_back();
    held.emplace_back();
  }

  // The npy header at the start of `head` (head_len bytes available); returns the header's size.
  uint64_t parse_npy(const uint8_t* head, uint64_t avail, const std::string& name, TensorInfo& info) const;
  void open_npy();
  void open_npz();
  ZipDirectory find_zip_directory() const;
  Storage zip_member_storage(const ZipEntry& z, uint64_t cd_off, const std::string& what) const;
  void add_npz_member(const ZipEntry& z, const Storage& st, const std::string& what);
  void check_stored_crc(const Storage& st, const std::string& what) const;
  void open_safetensors();
  void check_no_overlap() const;
};

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

namespace {

// zip64 extended information (extra field 0x0001): the 64-bit values of the fields set to 0xFFFFFFFF.
void zip64_extra(const uint8_t* p, size_t n, ZipEntry& e, bool u_big, bool c_big, bool l_big, const std::string& what) {
  size_t i = 0;
  while (i + 4 <= n) {
    const uint16_t id = static_cast<uint16_t>(le(p + i, 2)), len = static_cast<uint16_t>(le(p + i + 2, 2));
    KVT_CHECK(i + 4 + len <= n, BAD_TENSOR_FILE, what << ": a zip extra field runs past its record");
    if (id == 1) {
      size_t j = i + 4, end = i + 4 + len;
      auto take = [&](uint64_t& v) {
        KVT_CHECK(j + 8 <= end, BAD_TENSOR_FILE, what << ": a zip64 extra field is too short");
        v = le(p + j, 8);
        j += 8;
      };
      if (u_big) take(e.usize);
      if (c_big) take(e.csize);
      if (l_big) take(e.local);
      return;
    }
    i += 4 + len;
  }
  KVT_CHECK(!(u_big || c_big || l_big), BAD_TENSOR_FILE, what << ": a zip64 size has no zip64 extra field");
}

}  // namespace

// The zip central directory: where the end record (or its zip64 form) says it is.
ZipDirectory TensorFile::Impl::find_zip_directory() const {
  // The end of central directory record: 22 bytes plus a comment of at most 65535.
  const uint64_t tail = std::min<uint64_t>(size, 22 + 65535 + 20);
  std::vector<uint8_t> t(static_cast<size_t>(tail));
  pread_all(size - tail, t.size(), t.data());
  int64_t eocd = -1;
  for (int64_t i = static_cast<int64_t>(tail) - 22; i >= 0; --i)
    if (le(&t[static_cast<size_t>(i)], 4) == 0x06054b50u) {
      eocd = i;
      break;
    }
  KVT_CHECK(eocd >= 0, TRUNCATED, "'" << path << "' is a zip file without its end record (truncated .npz?)");
  const uint8_t* e = &t[static_cast<size_t>(eocd)];
  ZipDirectory dir{le(e + 10, 2), le(e + 16, 4), le(e + 12, 4), size - tail + static_cast<uint64_t>(eocd)};
  if (dir.entries == 0xffff || dir.size == 0xffffffffu || dir.offset == 0xffffffffu) {
    KVT_CHECK(eocd >= 20 && le(e - 20, 4) == 0x07064b50u, BAD_TENSOR_FILE,
              "'" << path << "' needs a zip64 end record and has none");
    const uint64_t rec = le(e - 20 + 8, 8);
    uint8_t z[56];
    KVT_CHECK(rec <= dir.end && dir.end - rec >= 56, TRUNCATED,
              "'" << path << "': the zip64 end record is outside the file");
    pread_all(rec, 56, z);
    KVT_CHECK(le(z, 4) == 0x06064b50u, BAD_TENSOR_FILE, "'" << path << "': bad zip64 end record signature");
    dir.entries = le(z + 32, 8);
    dir.size = le(z + 40, 8);
    dir.offset = le(z + 48, 8);
  }
  KVT_CHECK(dir.entries <= kMaxZipEntries, BAD_TENSOR_FILE,
            "'" << path << "' claims " << dir.entries << " zip members");
  KVT_CHECK(dir.offset <= dir.end && dir.size <= dir.end - dir.offset, TRUNCATED,
            "'" << path << "': the zip central directory is outside the file");
  return dir;
}

namespace {

// One central directory entry at cd[pos]; advances pos past it.
ZipEntry read_zip_entry(const std::vector<uint8_t>& cd, size_t& pos, const std::string& what) {
  KVT_CHECK(pos + 46 <= cd.size() && le(&cd[pos], 4) == 0x02014b50u, BAD_TENSOR_FILE,
            what << ": bad central directory entry");
  const uint8_t* c = &cd[pos];
  ZipEntry z;
  z.flags = static_cast<uint16_t>(le(c + 8, 2));
  z.method = static_cast<uint16_t>(le(c + 10, 2));
  z.crc = static_cast<uint32_t>(le(c + 16, 4));
  z.csize = le(c + 20, 4);
  z.usize = le(c + 24, 4);
  const size_t nlen = le(c + 28, 2), xlen = le(c + 30, 2), clen = le(c + 32, 2);
  z.local = le(c + 42, 4);
  KVT_CHECK(pos + 46 + nlen + xlen + clen <= cd.size(), BAD_TENSOR_FILE, what << ": entry runs past the directory");
  z.name.assign(reinterpret_cast<const char*>(c + 46), nlen);
  zip64_extra(c + 46 + nlen, xlen, z, z.usize == 0xffffffffu, z.csize == 0xffffffffu, z.local == 0xffffffffu, what);
  pos += 46 + nlen + xlen + clen;
  return z;
}

}  // namespace

// Where a member's bytes are: after its local header, whose name and extra lengths are its own.
Storage TensorFile::Impl::zip_member_storage(const ZipEntry& z, uint64_t cd_off, const std::string& what) const {
  KVT_CHECK((z.flags & 1) == 0, BAD_TENSOR_FILE, what << " ('" << z.name << "') is encrypted");
  KVT_CHECK(
      z.method == 0 || z.method == 8, BAD_TENSOR_FILE,
      what << " ('" << z.name << "') uses zip compression method " << z.method << " (stored and deflated are read)");
  uint8_t lh[30];
  KVT_CHECK(z.local <= cd_off && cd_off - z.local >= 30, TRUNCATED, what << ": local header outside the file");
  pread_all(z.local, 30, lh);
  KVT_CHECK(le(lh, 4) == 0x04034b50u, BAD_TENSOR_FILE, what << ": bad local header signature");
  Storage st;
  st.offset = z.local + 30 + le(lh + 26, 2) + le(lh + 28, 2);
  KVT_CHECK(st.offset <= cd_off && z.csize <= cd_off - st.offset, TRUNCATED,
            what << " ('" << z.name << "'): its " << z.csize << " bytes run past the zip directory");
  st.csize = z.csize;
  st.usize = z.usize;
  st.crc = z.crc;
  st.deflated = z.method == 8;
  st.span_begin = st.offset;
  st.span_end = st.offset + z.csize;
  if (!st.deflated) {
    KVT_CHECK(z.csize == z.usize, BAD_TENSOR_FILE, what << ": a stored member with two sizes");
    check_stored_crc(st, what + " ('" + z.name + "')");
  }
  KVT_CHECK(z.usize <= z.csize * kMaxDeflateRatio + 1024, BAD_TENSOR_FILE,
            what << " ('" << z.name << "') claims " << z.usize << " bytes from " << z.csize
                 << " compressed: more than deflate can produce");
  return st;
}

// One .npy member: registered, then its npy header read through the member's own reader (inflated
// when deflated) and its data size checked against the header's shape.
// A stored member's CRC-32, checked once at open as NumPy's zipfile does on read (a deflated
// member's is checked as it is inflated).
void TensorFile::Impl::check_stored_crc(const Storage& st, const std::string& what) const {
  std::vector<uint8_t> buf(1 << 20);
  uLong crc = crc32(0, nullptr, 0);
  for (uint64_t done = 0; done < st.csize;) {
    const size_t k = static_cast<size_t>(std::min<uint64_t>(buf.size(), st.csize - done));
    pread_all(st.offset + done, k, buf.data());
    crc = crc32(crc, buf.data(), static_cast<uInt>(k));
    done += k;
  }
  KVT_CHECK(static_cast<uint32_t>(crc) == st.crc, BAD_TENSOR_FILE, what << " fails its CRC-32 (damaged file)");
}

void TensorFile::Impl::add_npz_member(const ZipEntry& z, const Storage& st, const std::string& what) {
  TensorInfo info;
  info.name = z.name.substr(0, z.name.size() - 4);
  const uint64_t hn = std::min<uint64_t>(z.usize, kMaxHeader + 12);
  std::vector<uint8_t> head(static_cast<size_t>(hn));
  add(info, st);  // registered first so that the inflater below can read it
  const size_t idx = tensors.size() - 1;
  where[idx].skip = 0;
  read_bytes(idx, 0, head.size(), head.data());
  TensorInfo parsed;
  const uint64_t hdr = parse_npy(head.data(), head.size(), what + " ('" + z.name + "')", parsed);
  parsed.name = info.name;
  parsed.elements = checked_elements(parsed.shape, what);
  tensors[idx] = parsed;
  where[idx].skip = hdr;
  if (!st.deflated) where[idx].offset = st.offset + hdr;
  cursors[idx].reset();  // the header read is not where the data reads start
  const uint64_t data = z.usize - hdr, esize = type_size(parsed.type);
  if (esize == 0) return;
  KVT_CHECK(static_cast<uint64_t>(parsed.elements) <= data / esize, TRUNCATED,
            what << " ('" << z.name << "') holds " << data << " data bytes; its shape needs " << parsed.elements
                 << " x " << esize);
  KVT_CHECK(static_cast<uint64_t>(parsed.elements) * esize == data, BAD_LAYOUT,
            what << " ('" << z.name << "') has bytes after the array its header describes");
}

void TensorFile::Impl::open_npz() {
  format = "npz";
  const ZipDirectory dir = find_zip_directory();
  std::vector<uint8_t> cd(static_cast<size_t>(dir.size));
  pread_all(dir.offset, cd.size(), cd.data());
  size_t pos = 0;
  std::set<std::string> names;
  for (uint64_t k = 0; k < dir.entries; ++k) {
    const std::string what = "'" + path + "' zip member " + std::to_string(k);
    const ZipEntry z = read_zip_entry(cd, pos, what);
    // NumPy returns the last of two members of one name; refused, so no reader sees another array.
    KVT_CHECK(names.insert(z.name).second, BAD_TENSOR_FILE,
              what << " repeats the name '" << z.name << "': which array is meant is ambiguous");
    if (z.name.size() < 5 || z.name.compare(z.name.size() - 4, 4, ".npy") != 0) continue;  // not an array
    add_npz_member(z, zip_member_storage(z, dir.offset, what), what);
  }
  check_no_overlap();
}

void TensorFile::Impl::inflate_range(size_t idx, uint64_t pos, size_t n, uint8_t* out) const {
  const Storage& s = where[idx];
  const std::string what = "'" + path + "' member '" + tensors[idx].name + ".npy'";
  KVT_CHECK(pos <= s.usize && n <= s.usize - pos, INTERNAL, "read past a member");
  auto& cur = cursors[idx];
  if (!cur || cur->out_pos > pos) {
    cur = std::make_unique<Inflater>();
    KVT_CHECK(inflateInit2(&cur->z, -MAX_WBITS) == Z_OK, OUT_OF_MEMORY, "zlib could not start");
    cur->live = true;
    cur->crc = static_cast<uint32_t>(crc32(0, nullptr, 0));
    cur->in.resize(1 << 16);
  }
  Inflater& f = *cur;
  std::vector<uint8_t> sink;
  while (n > 0) {
    uint8_t* dst = out;
    size_t want = n;
    if (f.out_pos < pos) {  // skip forward to `pos`
      sink.resize(static_cast<size_t>(std::min<uint64_t>(pos - f.out_pos, 1 << 16)));
      dst = sink.data();
      want = sink.size();
    }
    if (f.z.avail_in == 0 && f.in_pos < s.csize) {
      const size_t k = static_cast<size_t>(std::min<uint64_t>(f.in.size(), s.csize - f.in_pos));
      pread_all(s.offset + f.in_pos, k, f.in.data());
      f.in_pos += k;
      f.z.next_in = f.in.data();
      f.z.avail_in = static_cast<uInt>(k);
    }
    f.z.next_out = dst;
    f.z.avail_out = static_cast<uInt>(std::min<size_t>(want, 1u << 30));
    const int rc = inflate(&f.z, Z_NO_FLUSH);
    const size_t got = static_cast<size_t>(f.z.next_out - dst);
    KVT_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, BAD_TENSOR_FILE,
              what << " is not a valid deflate stream");
    f.crc = static_cast<uint32_t>(crc32(f.crc, dst, static_cast<uInt>(got)));
    f.out_pos += got;
    if (dst == out) {
      out += got;
      n -= got;
    }
    if (f.out_pos == s.usize) KVT_CHECK(f.crc == s.crc, BAD_TENSOR_FILE, what << " fails its CRC-32 (damaged file)");
    const bool exhausted = f.z.avail_in == 0 && f.in_pos == s.csize;
    KVT_CHECK(got > 0 || !(rc == Z_STREAM_END || exhausted), TRUNCATED,
              what << " ends before its claimed " << s.usize << " bytes");
  }
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
  m.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  KVT_CHECK(m.fd >= 0, IO_ERROR, "cannot open '" << path << "': " << std::strerror(errno));
  struct stat st {};
  KVT_CHECK(fstat(m.fd, &st) == 0, IO_ERROR, "cannot stat '" << path << "'");
  KVT_CHECK(S_ISREG(st.st_mode), IO_ERROR, "'" << path << "' is not a regular file");
  m.size = static_cast<uint64_t>(st.st_size);
  m.dev = st.st_dev;
  m.ino = st.st_ino;
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
