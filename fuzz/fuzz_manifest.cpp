// fuzz_manifest: arbitrary bytes as manifest text through the JSON parser kvtool uses and its
// canonical form (lib/format/include/kvtool/json.h): canonical_json(parse(canonical(x))) must be
// canonical(x), and parse(canonical(x)) must equal x (formats/kvi-v1.md, "Manifest").
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_common.h"
#include "kvtool/json.h"

namespace {

// NaN never comes out of the parser, but a double that does not survive its own shortest form
// would; compare numbers by value and everything else structurally.
bool same(const kvtool::json& a, const kvtool::json& b) {
  if (a.is_number_integer() && b.is_number_integer()) return a == b;
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it)
      if (!b.contains(it.key()) || !same(it.value(), b[it.key()])) return false;
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

void fail(const char* what, const std::string& canon) {
  std::fprintf(stderr, "fuzz finding: %s\ncanonical: %.400s\n", what, canon.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const kvtool::json x = kvtool::parse_json(text, kvtool::Reason::BAD_MANIFEST, "fuzz manifest");
    const std::string c1 = kvtool::canonical_json(x);
    const kvtool::json y = kvtool::parse_json(c1, kvtool::Reason::BAD_MANIFEST, "canonical form");
    if (!same(x, y)) fail("parse(canonical(x)) != x", c1);
    if (kvtool::canonical_json(y) != c1) fail("canonical form is not idempotent", c1);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
