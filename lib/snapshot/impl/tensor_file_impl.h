// The inside of TensorFile (kvtool/tensor_file.h), shared by its two files: tensor_file.cpp (.npy,
// safetensors, reads) and zip_reader.cpp (the zip container of .npz files). Internal to lib/snapshot.
#pragma once
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/random_access_file.h"
#include "kvtool/tensor_file.h"

namespace kvtool::impl {

constexpr uint64_t kMaxHeader = 1 << 20;  // npy header text; NumPy itself caps it far lower
constexpr uint64_t kMaxZipEntries = 1 << 16;
// Deflate cannot expand a stream by more than 1032:1; a member claiming more is lying.
constexpr uint64_t kMaxDeflateRatio = 1032;

inline uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline size_t type_size(TensorType t) {
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

// The product of `shape` with overflow checks; each element of `size` bytes must fit in int64.
inline int64_t checked_elements(const std::vector<int64_t>& shape, const std::string& what) {
  int64_t n = 1;
  for (int64_t s : shape) {
    KVT_CHECK(s >= 0, BAD_TENSOR_FILE, what << " has a negative dimension");
    KVT_CHECK(s == 0 || n <= (int64_t(1) << 59) / s, SHAPE_MISMATCH,
              what << " claims more than 2^59 elements (a shape far beyond any K/V cache)");
    n *= s;
  }
  return n;
}

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

}  // namespace kvtool::impl

namespace kvtool {

using impl::checked_elements;
using impl::Inflater;
using impl::Storage;
using impl::ZipDirectory;
using impl::ZipEntry;

struct TensorFile::Impl {
  std::string path, format;
  // Open only while reads need it (release() closes it): an import of thousands of per-layer files
  // must not hold a descriptor for each. A reopened path must still be the same file.
  std::optional<RandomAccessFile> file;
  uint64_t size = 0;  // file->size(): every header claim is checked against it
  std::vector<TensorInfo> tensors;
  std::vector<Storage> where;
  mutable std::vector<std::unique_ptr<Inflater>> cursors;
  mutable std::vector<std::vector<uint8_t>> held;  // hold(): a tensor's bytes, or empty

  void pread_all(uint64_t off, size_t n, void* out) const { file->pread_exact(off, n, out); }
  void release() const { file->release(); }

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

}  // namespace kvtool
