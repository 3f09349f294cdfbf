#include "receipts.h"

#include <pybind11/stl.h>
#include <sys/stat.h>

#include <cmath>

namespace kvtool::python {

std::vector<float> vector_values(const FloatArray& a, const char* what) {
  KVT_CHECK(a.ndim() == 1, USAGE, what << " must be a 1-D vector, got " << a.ndim() << " dimensions");
  std::vector<float> v(a.data(), a.data() + a.shape(0));
  check_finite(v.data(), static_cast<int64_t>(v.size()), what);
  return v;
}

void check_finite(const float* x, int64_t n, const char* what) {
  // As `kvtool query --vector`: a NaN/Inf query has no meaningful ranking (and no defined order).
  for (int64_t i = 0; i < n; ++i) KVT_CHECK(std::isfinite(x[i]), NON_FINITE, what << " has NaN/Inf values");
}

void check_dim(const std::vector<float>& q, int64_t dim, const char* what) {
  KVT_CHECK(static_cast<int64_t>(q.size()) == dim, USAGE,
            what << " has " << q.size() << " values; the artifact's head dim is " << dim);
}

py::tuple receipt_tuple(const CandidateReceipt& rc) {
  py::array_t<int64_t> ids(static_cast<py::ssize_t>(rc.candidates.size()));
  std::copy(rc.candidates.begin(), rc.candidates.end(), ids.mutable_data());
  py::array_t<float> scores(static_cast<py::ssize_t>(rc.scores.size()));
  std::copy(rc.scores.begin(), rc.scores.end(), scores.mutable_data());
  return py::make_tuple(json_text(rc.to_json()), ids, scores);
}

std::vector<PublicKeyRaw> trusted_key_files(const std::vector<std::string>& paths) {
  std::vector<PublicKeyRaw> keys;
  for (const auto& p : paths) {
    struct stat st {};
    KVT_CHECK(stat(p.c_str(), &st) == 0, IO_ERROR, "trusted key '" << p << "' does not exist");
    if (!S_ISDIR(st.st_mode)) {
      keys.push_back(load_public_key(p));
      continue;
    }
    auto more = load_trusted_keys(p);
    KVT_CHECK(!more.empty(), USAGE, "trusted key directory '" << p << "' holds no *.pem keys");
    keys.insert(keys.end(), more.begin(), more.end());
  }
  return keys;
}

}  // namespace kvtool::python
