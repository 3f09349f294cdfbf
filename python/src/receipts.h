// Helpers the reports and pool bindings share: query vectors in, receipts out, trusted keys.
#pragma once
#include <pybind11/numpy.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "kvtool/query.h"
#include "kvtool/signing.h"

namespace kvtool::python {

// What python/kvtool/_arrays.as_float32 hands over: C-contiguous float32.
using FloatArray = py::array_t<float, py::array::c_style>;

// A 1-D query vector's values (USAGE naming `what` unless 1-D, NON_FINITE for NaN/Inf). Call with the GIL held.
std::vector<float> vector_values(const FloatArray& a, const char* what);
// NON_FINITE when one of the n values is NaN or Inf.
void check_finite(const float* x, int64_t n, const char* what);
// USAGE unless `q` has `dim` values.
void check_dim(const std::vector<float>& q, int64_t dim, const char* what);
// (receipt JSON text, candidates as an int64 array, scores as a float32 array). GIL held.
py::tuple receipt_tuple(const CandidateReceipt& rc);
// Public keys from PEM files or directories of *.pem (USAGE for a directory without any).
std::vector<PublicKeyRaw> trusted_key_files(const std::vector<std::string>& paths);

}  // namespace kvtool::python
