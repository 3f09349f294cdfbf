#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvtool::cli {

// Reads a query vector file: a 1-D NumPy .npy of float32/float16/float64 (by name or content),
// whitespace/comma separated floats (text) or raw little-endian float32 (.f32 / .bin); exactly `d`
// values.
std::vector<float> read_query_vector(const std::string& path, int64_t d);

}  // namespace kvtool::cli
