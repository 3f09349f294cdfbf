// fuzz_store_ref: bytes as the text of a ref file (formats/store-v1.md §Ref) through
// parse_store_ref. A ref it accepts must name a 64-hex object and a key check_store_key accepts,
// and must read back identically from its own JSON.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_common.h"
#include "kvtool/store.h"

namespace {

void fail(const char* what) {
  std::fprintf(stderr, "fuzz finding: parse_store_ref %s\n", what);
  std::abort();
}

bool hex64(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kvtool::StoreRef ref;
  try {
    ref = kvtool::parse_store_ref(text);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
    return 0;
  }
  if (!hex64(ref.object)) fail("accepted an object name that is not 64 lowercase hex digits");
  try {
    kvtool::check_store_key(ref.key, false);
    const kvtool::StoreRef again = kvtool::parse_store_ref(ref.to_json().dump());
    if (again.to_json() != ref.to_json()) fail("does not read back its own JSON identically");
  } catch (const kvtool::Error& e) {
    std::fprintf(stderr, "%s: %s\n", e.reason_name(), e.what());
    fail("accepted a ref whose key or JSON it then refuses");
  }
  return 0;
}
