// fuzz_store_key: bytes split at '\n' into the seven parts of a store key (tenant, model, adapter,
// prefix hash, kind, params digest, position contract) through check_store_key. A key it accepts
// must keep the rule of formats/store-v1.md for names that become path components: not "." or
// "..", no '/', '\\', NUL or control character, at most 256 bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "kvtool/store.h"

namespace {

void check_part(const std::string& part, const char* name) {
  bool ok = part != "." && part != ".." && part.size() <= 256;
  for (unsigned char ch : part) ok = ok && ch >= 0x20 && ch != 0x7f && ch != '/' && ch != '\\';
  if (ok) return;
  std::fprintf(stderr, "fuzz finding: check_store_key accepted %s part of %zu bytes that is no path component\n", name,
               part.size());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<std::string> parts(7);
  size_t i = 0;
  for (size_t at = 1; at < size; ++at) {
    if (data[at] == '\n' && i + 1 < parts.size()) {
      ++i;
      continue;
    }
    parts[i].push_back(static_cast<char>(data[at]));
  }
  kvtool::StoreKey k{parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]};
  try {
    kvtool::check_store_key(k, (data[0] & 1) != 0);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
    return 0;
  }
  const char* names[] = {"tenant", "model", "adapter", "prefix hash", "kind", "params digest", "position contract"};
  for (size_t p = 0; p < parts.size(); ++p)
    if (p < 5 || !parts[p].empty()) check_part(parts[p], names[p]);
  return 0;
}
