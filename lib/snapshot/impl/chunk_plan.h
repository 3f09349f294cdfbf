// The decoders behind the chunk-file readers (kvtool/chunk_files.h): each input file becomes a
// source of float values and one or more pieces that say where K and V of which layers and rows are
// inside it. Every piece is a strided view: value (kv, layer, row, head, i) of a piece is element
//   kv * s_kv + (layer - first_layer) * s_l + row * s_t + head * s_h + i
// of its source, so one reader serves every layout of formats/lmcache.md and
// formats/sglang-hicache.md. plan_chunks() checks every header and size; read_layer() only reads
// what the plan was checked to describe.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/chunk_files.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/identity.h"
#include "kvtool/json.h"
#include "kvtool/random_access_file.h"
#include "kvtool/tensor_file.h"

namespace kvtool::chunks {

// Values of one input file as float32, elements [first, first + count) of its data.
class Source {
 public:
  virtual ~Source() = default;
  virtual void read(int64_t first, int64_t count, float* out) const = 0;
  // Closes the file until the next read (a plan holds one source per chunk file).
  virtual void release() const {}
};

struct Piece {
  size_t source = 0;
  int64_t first_layer = 0, layers = 0;  // the layers it holds: all of them, or one
  int64_t row0 = 0, rows = 0;           // dump rows [row0, row0 + rows)
  int64_t s_kv = 0, s_l = 0, s_t = 0, s_h = 0;
};

struct Plan {
  std::string format, memory_format;
  std::string source_dtype;  // "f16", "bf16", "f32"
  int64_t layers = 0, kv_heads = 0, head_dim = 0, tokens = 0;
  std::vector<std::unique_ptr<Source>> sources;
  std::vector<Piece> pieces;
};

Plan plan_chunks(const std::vector<std::string>& inputs, const ChunkOptions& o);

// K and V of `layer` for every row, each [kv_heads][tokens][head_dim].
void read_layer(const Plan& p, int64_t layer, std::vector<float>& k, std::vector<float>& v);

// ---- What the format files share (chunk_files.cpp) and use (lmcache.cpp, sglang_hicache.cpp) ----

enum class Elem { f16, bf16, f32 };

inline int64_t elem_size(Elem e) { return e == Elem::f32 ? 4 : 2; }
inline const char* elem_name(Elem e) { return e == Elem::f16 ? "f16" : e == Elem::bf16 ? "bf16" : "f32"; }

// a * b, or SHAPE_MISMATCH when it leaves int64 (factors are non-negative).
inline int64_t checked_mul(int64_t a, int64_t b, const std::string& what) {
  KVT_CHECK(a >= 0 && b >= 0 && (a == 0 || b <= std::numeric_limits<int64_t>::max() / a), SHAPE_MISMATCH,
            what << " is beyond any K/V cache (its size overflows 64 bits)");
  return a * b;
}

// Little-endian values of one type from `offset` on: the bytes LMCache's byte_array and SGLang's
// tofile() write (the host's order; every stack named in formats/ runs little-endian).
class RawSource : public Source {
 public:
  // A plan may hold thousands of chunk files (chunks x layers): each is open only while it is read.
  RawSource(const std::string& path, uint64_t offset, Elem e) : file_(path), offset_(offset), elem_(e) {
    file_.release();
  }

  uint64_t size() const { return file_.size(); }
  const RandomAccessFile& file() const { return file_; }
  const std::string& path() const { return file_.path(); }
  // What the data holds, once a header or the options have been checked against size().
  void set_elements(int64_t n) { elements_ = n; }
  void set_elem(Elem e) { elem_ = e; }
  void release() const override { file_.release(); }

  void read(int64_t first, int64_t count, float* out) const override {
    KVT_CHECK(
        first >= 0 && count >= 0 && first <= elements_ && count <= elements_ - first, INTERNAL,
        "read of elements [" << first << ", " << first + count << ") of '" << path() << "' beyond its " << elements_);
    const int64_t es = elem_size(elem_);
    constexpr int64_t kRun = 1 << 16;
    std::vector<uint8_t> buf(static_cast<size_t>(std::min(count, kRun) * es));
    for (int64_t done = 0; done < count;) {
      const int64_t n = std::min(kRun, count - done);
      file_.pread_exact(offset_ + static_cast<uint64_t>((first + done) * es), static_cast<size_t>(n * es), buf.data());
      const uint8_t* p = buf.data();
      float* o = out + done;
      if (elem_ == Elem::f32) {
        std::memcpy(o, p, static_cast<size_t>(n) * 4);
      } else {
        for (int64_t i = 0; i < n; ++i) {
          const auto h = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
          o[i] = elem_ == Elem::f16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
      }
      done += n;
    }
  }

 private:
  RandomAccessFile file_;
  uint64_t offset_ = 0;
  Elem elem_;
  int64_t elements_ = 0;
};

// The kv_chunk tensor of a v0 safetensors file, opened (and its header checked by TensorFile)
// only while it is read; a file that no longer holds the planned tensor is refused.
class TensorSource : public Source {
 public:
  TensorSource(std::string path, TensorInfo info) : path_(std::move(path)), info_(std::move(info)) {}
  void read(int64_t first, int64_t count, float* out) const override {
    if (!f_) {
      auto f = std::make_unique<TensorFile>(path_);
      const int64_t i = f->find(info_.name);
      KVT_CHECK(i >= 0 && f->tensors()[static_cast<size_t>(i)].shape == info_.shape &&
                    f->tensors()[static_cast<size_t>(i)].type == info_.type,
                BAD_TENSOR_FILE, "'" << path_ << "' changed while it was read");
      f_ = std::move(f);
      index_ = i;
    }
    f_->read_f32(index_, first, count, out);
  }
  void release() const override { f_.reset(); }

 private:
  std::string path_;
  TensorInfo info_;
  mutable std::unique_ptr<TensorFile> f_;
  mutable int64_t index_ = -1;
};

Elem parse_elem(const std::string& s, const char* option);

// What the headerless formats need from the command line.
struct Geometry {
  int64_t layers = 0, heads = 0, dim = 0;
  Elem elem = Elem::f16;
};

Geometry required_geometry(const ChunkOptions& o);

// The files of a plan grouped into chunks (pages): rows and a label per chunk, the chunk of each piece.
struct Chunks {
  std::vector<int64_t> rows;
  std::vector<std::string> labels;
  std::vector<size_t> of_piece;
};

// The planners of each format: sources and pieces into `p`, rows and labels into `c`.
void plan_lmcache_raw(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p,
                      Chunks& c);                                                                         // lmcache.cpp
void plan_lmcache_fs(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c);  // lmcache.cpp
void plan_lmcache_v0(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p, Chunks& c);  // lmcache.cpp
void plan_sglang_page(const std::vector<std::string>& inputs, const ChunkOptions& o, Plan& p,
                      Chunks& c);  // sglang_hicache.cpp

}  // namespace kvtool::chunks
