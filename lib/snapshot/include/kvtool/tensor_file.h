// The tensor files people already have: NumPy .npy/.npz and safetensors. TensorFile reads the
// headers of one file, checks every size and offset against the file's real size before anything is
// allocated, and reads element ranges converted to float32 or int64.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvtool {

// Element types a tensor file can declare. `other` is any type kvtool does not read (complex,
// object, structured, big-endian ...): listing the file works, reading it is UNSUPPORTED_DTYPE.
// f8_e4m3 / f8_e5m2 (safetensors F8_E4M3 / F8_E5M2) are read only through read_fp8, with scales.
enum class TensorType { f32, f16, bf16, f64, i8, i16, i32, i64, u8, u16, u32, u64, f8_e4m3, f8_e5m2, other };

// One fp8 byte as float: `kind` f8_e4m3 is OCP E4M3 ("e4m3fn": bias 7, no infinities, NaN only
// 0x7f/0xff, max 448); f8_e5m2 is OCP E5M2 (bias 15, IEEE-like: 0x7c is +inf).
float decode_fp8(uint8_t byte, TensorType kind);

struct TensorInfo {
  std::string name;  // .npy: the file name without ".npy"; .npz: the member without ".npy"
  TensorType type = TensorType::other;
  std::string type_text;       // as the file states it: '<f4', 'F32'
  std::vector<int64_t> shape;  // C order
  int64_t elements = 1;        // product of shape; its bytes are checked to be in the file
};

// One .npy, .npz or safetensors file, recognised by its content. The constructor reads and checks
// every header (BAD_TENSOR_FILE, TRUNCATED, BAD_LAYOUT, UNSUPPORTED_DTYPE); reads never go past
// what the headers were checked to describe. Reads of one TensorFile are not thread-safe (a
// deflated .npz member keeps a decompression cursor, so reads in increasing order are linear).
class TensorFile {
 public:
  explicit TensorFile(const std::string& path);
  ~TensorFile();
  TensorFile(const TensorFile&) = delete;
  TensorFile& operator=(const TensorFile&) = delete;

  const std::string& path() const;
  const char* format() const;  // "npy", "npz" or "safetensors"
  const std::vector<TensorInfo>& tensors() const;
  // Closes the file until the next read reopens it (checked to be the same file): the file is
  // open only while it is read, so thousands of per-layer files need no descriptor each.
  void release() const;
  // Index of the tensor called `name`, or -1.
  int64_t find(const std::string& name) const;
  // Keeps tensor `index`'s bytes in memory, read (a deflated member: inflated) in one pass, when
  // they are at most `budget` bytes; later reads of it are copies. True when held. For layouts
  // read in short strided runs, which would otherwise cost a call per run and, deflated, a new
  // inflation for every backwards jump.
  bool hold(int64_t index, uint64_t budget) const;
  // Elements [first, first + count) of tensor `index` in C order, as float32 (float types only).
  void read_f32(int64_t index, int64_t first, int64_t count, float* out) const;
  // The same as int64 (integer types only; a u64 above INT64_MAX is BAD_ATTRIBUTE).
  void read_i64(int64_t index, int64_t first, int64_t count, int64_t* out) const;
  // The same from one-byte fp8 codes decoded as `kind` (decode_fp8; unscaled): tensors of type
  // f8_e4m3, f8_e5m2 (their own kind only) or u8 (raw bytes, e.g. a .npy of a uint8 view).
  void read_fp8(int64_t index, int64_t first, int64_t count, TensorType kind, float* out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A query vector file for `kvtool query --vector`: a 1-D .npy of exactly `d` float32/float16/
// float64 values (a leading axis of 1 is accepted); NaN/Inf are NON_FINITE.
std::vector<float> read_npy_vector(const std::string& path, int64_t d);

}  // namespace kvtool
