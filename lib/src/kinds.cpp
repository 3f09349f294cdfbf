#include "kvtool/kinds.h"

#include "kvtool/artifact.h"
#include "kvtool/error.h"

namespace kvtool {

namespace {

// "container-test": the reserved kind used by tests and fixtures before (and besides) the index
// kinds. Its sections are opaque; validation checks that part-bound sections name a real part.
void validate_container_test(const ArtifactReader& r) {
  const auto& g = r.source().geo;
  for (const auto& s : r.sections()) {
    KVT_CHECK((s.layer == -1 && s.kv_head == -1) || (s.layer >= 0 && s.layer < g.layers && s.kv_head >= 0 && s.kv_head < g.kv_heads),
              "SHAPE_MISMATCH", "section '" << s.name << "' names part (" << s.layer << ", " << s.kv_head
                                            << ") outside the source geometry");
  }
}

const std::vector<KindInfo>& registry() {
  static const std::vector<KindInfo> kinds = {
      {"container-test", "opaque test sections (container self-test, fixtures)", validate_container_test},
  };
  return kinds;
}

}  // namespace

const KindInfo* find_kind(const std::string& name) {
  for (const auto& k : registry())
    if (k.name == name) return &k;
  return nullptr;
}

std::vector<std::string> kind_names() {
  std::vector<std::string> n;
  for (const auto& k : registry()) n.push_back(k.name);
  return n;
}

}  // namespace kvtool
