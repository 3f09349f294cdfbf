// Layer lists as text: the one parser of "A-B" ranges, for the builders' parameters (clusterkv's
// dense_layers) and the tools' --layers and --dense-layers. Errors are USAGE and name the value
// as the caller calls it (`what`: a parameter name, or a flag in the tools).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvtool {

// "A" or "A-B" (inclusive, 0 <= A <= B).
void parse_layer_range(const std::string& spec, const std::string& what, int64_t& first, int64_t& last);
// Comma-separated ranges ("0,1" or "0-1,5"): every layer named, ascending, each once.
std::vector<int64_t> parse_layer_list(const std::string& spec, const std::string& what = "layers");

}  // namespace kvtool
