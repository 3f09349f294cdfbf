// A GGUF file (formats/gguf.md): its typed key/value metadata and, when asked, its tensor infos, read
// as ggml's gguf.cpp reads them (llama.cpp at the version formats/llama-state.md names). Every
// length, count and offset is checked against the file's size before it is used; nothing is
// allocated from a claim. The llama.cpp state reader takes the metadata (snapshot layer), the GGUF
// forward pass the tensors too (model layer).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace kvtool {

// A ggml tensor type: its name, and for the types kvtool decodes, the values per block and the
// bytes per block (0 for the others, which are refused by name).
struct GgmlType {
  uint32_t id = 0;
  const char* name = "";
  int64_t block = 0, bytes = 0;
  bool decoded() const { return bytes > 0; }
};
GgmlType ggml_type(uint32_t id);  // name "unknown" for an id ggml does not define

struct GgufTensor {
  std::string name;
  uint32_t type = 0;
  std::vector<int64_t> dims;  // ne[0] (the contiguous axis) first, as ggml lists them
  uint64_t offset = 0;        // where its data starts in the file
  uint64_t bytes = 0;
  int64_t elements() const;
};

namespace gguf_detail {
// A kept value: a number with its GGUF type (a bool or an integer is not a float), a string, a
// short array of numbers (per-layer head counts), or what is left of a string or an array of
// strings too long to keep (its size).
struct Number {
  double value = 0;
  uint32_t type = 0;
};
struct LongString {
  uint64_t bytes = 0;
};
struct StringArray {  // its strings skipped, their count kept (tokenizer.ggml.tokens: the vocabulary)
  uint64_t count = 0;
};
using Value = std::variant<Number, std::string, std::vector<double>, LongString, StringArray, std::vector<std::string>>;
}  // namespace gguf_detail

class GgufFile {
 public:
  // Reads the header and the metadata, and with `tensors` the tensor infos: each of a type kvtool
  // decodes, at the offset ggml expects (in order, aligned), inside the file. BAD_MODEL,
  // TRUNCATED, UNSUPPORTED_VERSION or UNSUPPORTED_DTYPE naming what is wrong otherwise.
  // With `tokenizer`, the arrays under tokenizer.ggml.* are kept whole (strings() and numbers()).
  GgufFile(const std::string& path, bool tensors, bool tokenizer = false);

  const std::string& path() const { return path_; }
  const std::string& what() const { return what_; }  // "the GGUF file 'PATH'", for messages
  uint64_t file_size() const { return file_size_; }

  bool has(const std::string& key) const { return kv_.count(key) > 0; }
  bool has_prefix(const std::string& prefix) const;
  // Typed reads, each refusing a value of another type as llama.cpp does (BAD_MODEL naming the key).
  std::string str(const std::string& key) const;  // "" when absent
  // A positive integer: a scalar, or an array whose entries are all equal (per-layer head counts;
  // UNSUPPORTED_CACHE when they differ).
  int64_t count(const std::string& key, int64_t absent) const;
  double number(const std::string& key, double absent) const;             // a float32 or float64
  double any_number(const std::string& key, double absent) const;         // any number, bools included
  int64_t string_count(const std::string& key) const;                     // length of an array of strings; 0 absent
  const std::vector<std::string>& strings(const std::string& key) const;  // a kept array; empty when absent
  std::vector<double> numbers(const std::string& key) const;              // a kept array; empty when absent
  bool is_numbers(const std::string& key) const;                          // a kept array of numbers

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find(const std::string& name) const;  // nullptr when absent

 private:
  std::string path_, what_;
  uint64_t file_size_ = 0;
  std::map<std::string, gguf_detail::Value> kv_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> by_name_;
};

}  // namespace kvtool
