// JSON helpers: kvtool uses nlohmann::json; canonical form = sorted keys, no whitespace,
// shortest round-trip numbers (what nlohmann's dump() produces for std::map-ordered objects).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "kvtool/error.h"

namespace kvtool {
using json = nlohmann::json;
inline constexpr int kJsonSchemaVersion = 1;  // schema_version of every --json output
std::string canonical_json(const json& j);
// Parses; throws Error(reason) when the text is not JSON.
json parse_json(const std::string& text, Reason reason, const std::string& what);
}  // namespace kvtool
