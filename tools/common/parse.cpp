#include "parse.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "env.h"
#include "kvtool/error.h"
#include "kvtool/layers.h"

namespace kvtool::cli {

int64_t parse_int(const std::string& s, const char* what) {
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    KVT_CHECK(pos == s.size(), USAGE, "'" << s << "' is not an integer (" << what << ")");
    return v;
  } catch (const Error&) {
    throw;
  } catch (...) {
    KVT_THROW(USAGE, "'" << s << "' is not an integer (" << what << ")");
  }
}

void parse_shard(const std::string& spec, int64_t& index, int64_t& count, int64_t count_flag) {
  if (spec == "auto") {
    scheduler_shard(index, count, count_flag);
  } else {
    KVT_CHECK(count_flag == 0, USAGE, "--shard-count goes with --shard auto only (I/N already names the count)");
    auto slash = spec.find('/');
    KVT_CHECK(slash != std::string::npos, USAGE, "--shard must be I/N (e.g. 0/4) or auto, got '" << spec << "'");
    index = parse_int(spec.substr(0, slash), "--shard index");
    count = parse_int(spec.substr(slash + 1), "--shard count");
  }
  KVT_CHECK(count >= 1 && index >= 0 && index < count, USAGE,
            "shard " << index << "/" << count << " is invalid (need 0 <= I < N)");
}

void parse_layers(const std::string& spec, int64_t& first, int64_t& last) {
  parse_layer_range(spec, "--layers", first, last);
}

int64_t parse_bytes(const std::string& s) {
  size_t pos = 0;
  double v = -1;
  try {
    v = std::stod(s, &pos);
  } catch (...) {}
  std::string unit = s.substr(std::min(pos, s.size()));
  for (const char* tail : {"iB", "B"})
    if (unit.size() >= std::char_traits<char>::length(tail) && unit.ends_with(tail)) {
      unit.resize(unit.size() - std::char_traits<char>::length(tail));
      break;
    }
  static const std::map<std::string, double> mult{
      {"", 1}, {"K", 1024.0}, {"M", 1024.0 * 1024}, {"G", 1024.0 * 1024 * 1024}, {"T", 1024.0 * 1024 * 1024 * 1024}};
  auto it = mult.find(unit);
  KVT_CHECK(pos > 0 && v >= 0 && std::isfinite(v) && it != mult.end() && v * it->second < 9.2e18, USAGE,
            "'" << s << "' is not a byte size (examples: 4096, 512M, 8G)");
  return static_cast<int64_t>(v * it->second);
}

int64_t parse_duration(const std::string& s) {
  try {
    size_t pos = 0;
    long long v = std::stoll(s, &pos);
    std::string unit = s.substr(pos);
    KVT_CHECK(v >= 0, USAGE, "negative duration");
    if (unit.empty() || unit == "s") return v;
    if (unit == "m") return v * 60;
    if (unit == "h") return v * 3600;
    if (unit == "d") return v * 86400;
    if (unit == "w") return v * 7 * 86400;
  } catch (...) {}
  KVT_THROW(USAGE, "duration '" << s << "' must be a number with an optional unit s, m, h, d or w (e.g. 15m, 1w)");
}

}  // namespace kvtool::cli
