#include "kvtool/layers.h"

#include <algorithm>
#include <sstream>

#include "kvtool/error.h"

namespace kvtool {

namespace {
int64_t parse_layer(const std::string& t, const std::string& what) {
  size_t pos = std::string::npos;
  long long v = 0;
  try {
    v = std::stoll(t, &pos);
  } catch (...) {}
  KVT_CHECK(pos == t.size(), USAGE, "'" << t << "' is not an integer (" << what << ")");
  return v;
}
}  // namespace

void parse_layer_range(const std::string& spec, const std::string& what, int64_t& first, int64_t& last) {
  const size_t dash = spec.find('-');
  first = parse_layer(spec.substr(0, dash), what);
  last = dash == std::string::npos ? first : parse_layer(spec.substr(dash + 1), what);
  KVT_CHECK(first >= 0 && last >= first, USAGE, what << " '" << spec << "' is an empty or negative range");
}

std::vector<int64_t> parse_layer_list(const std::string& spec, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t a = 0, b = 0;
    parse_layer_range(item, what, a, b);
    for (int64_t l = a; l <= b; ++l) out.push_back(l);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace kvtool
