// fuzz_container: arbitrary bytes as a kvi artifact image (formats/kvi-v1.md) through the reader,
// admission (signature, section digests, kind structure) and, when admitted, one query per part.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    kvtool::ArtifactReader r(data, size, "fuzz");
    kvtool::fuzz::admit_and_query(r);
  } catch (...) {
    kvtool::fuzz::on_exception(std::current_exception());
  }
  return 0;
}
