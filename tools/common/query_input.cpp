// Query vectors given on the command line: a .npy, a file of text or raw float32 (a program concern: the
// library takes the floats).
#include "query_input.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "kvtool/error.h"
#include "kvtool/tensor_file.h"

namespace kvtool::cli {

std::vector<float> read_query_vector(const std::string& path, int64_t d);

std::vector<float> read_query_vector(const std::string& path, int64_t d) {
  // A .npy (by name or by its magic) goes through the library's bounds-checked reader.
  if (path.size() > 4 && path.substr(path.size() - 4) == ".npy") return read_npy_vector(path, d);
  {
    std::ifstream m(path, std::ios::binary);
    char magic[6] = {0};
    if (m.read(magic, 6) && std::memcmp(magic, "\x93NUMPY", 6) == 0) return read_npy_vector(path, d);
  }
  std::ifstream f(path, std::ios::binary);
  KVT_CHECK(f.good(), IO_ERROR, "cannot open query vector file '" << path << "'");
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<float> v;
  bool binary = path.size() > 4 && (path.substr(path.size() - 4) == ".f32" || path.substr(path.size() - 4) == ".bin");
  if (binary) {
    KVT_CHECK(
        data.size() == static_cast<size_t>(d) * 4, SHAPE_MISMATCH,
        "'" << path << "' has " << data.size() << " bytes; a float32 query of head dim " << d << " has " << d * 4);
    v.resize(static_cast<size_t>(d));
    std::memcpy(v.data(), data.data(), data.size());
  } else {
    for (char& c : data)
      if (c == ',' || c == '[' || c == ']') c = ' ';
    std::istringstream is(data);
    std::string tok;
    while (is >> tok) {
      try {
        size_t pos = 0;
        float x = std::stof(tok, &pos);
        KVT_CHECK(pos == tok.size(), SHAPE_MISMATCH, "'" << tok << "' in '" << path << "' is not a number");
        v.push_back(x);
      } catch (const Error&) {
        throw;
      } catch (...) {
        KVT_THROW(SHAPE_MISMATCH, "'" << tok << "' in '" << path << "' is not a number");
      }
    }
    KVT_CHECK(static_cast<int64_t>(v.size()) == d, SHAPE_MISMATCH,
              "'" << path << "' holds " << v.size() << " numbers; the head dim is " << d);
  }
  for (float x : v) KVT_CHECK(std::isfinite(x), NON_FINITE, "the query vector in '" << path << "' has NaN/Inf");
  return v;
}

}  // namespace kvtool::cli
