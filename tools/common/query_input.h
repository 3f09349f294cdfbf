#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvtool::cli {

// Reads a query vector file: whitespace/comma separated floats (text) or raw little-endian float32
// (.f32 / .bin); exactly `d` values.
std::vector<float> read_query_vector(const std::string& path, int64_t d);

}  // namespace kvtool::cli
