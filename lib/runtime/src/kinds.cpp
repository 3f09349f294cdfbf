#include "kvtool/kinds.h"

#include "kvtool/artifact.h"
#include "kvtool/error.h"

#include <algorithm>

namespace kvtool {

namespace {

// "container-test": the reserved kind used by tests and fixtures before (and besides) the index
// kinds. Its sections are opaque; validation checks that part-bound sections name a real part.
void validate_container_test(const ArtifactReader& r) {
  const auto& g = r.source().geo;
  for (const auto& s : r.sections()) {
    KVT_CHECK((s.layer == -1 && s.kv_head == -1) || (s.layer >= 0 && s.layer < g.layers && s.kv_head >= 0 && s.kv_head < g.kv_heads),
              SHAPE_MISMATCH, "section '" << s.name << "' names part (" << s.layer << ", " << s.kv_head
                                            << ") outside the source geometry");
  }
}

const std::vector<KindInfo>& registry() {
  static const std::vector<KindInfo> kinds = {
      {"container-test", "opaque test sections (container self-test, fixtures)", validate_container_test, nullptr},
      kinds::pq_kind(),
      kinds::clusterkv_kind(),
      kinds::lsh_kind(),
      kinds::squeeze_kind(),
  };
  return kinds;
}

}  // namespace

int64_t IndexedRows::begin() const { return std::min(sink, coverage_end); }
int64_t IndexedRows::end() const { return std::max(begin(), coverage_end - local); }

IndexedRows IndexedRows::of(const ArtifactReader& r) {
  const json& p = r.manifest()["params"];
  KVT_CHECK(p.contains("sink") && p["sink"].is_number_unsigned() && p.contains("local") && p["local"].is_number_unsigned(),
            BAD_MANIFEST, "params.sink and params.local must be non-negative integers");
  IndexedRows x;
  x.coverage_end = r.source().coverage_end;
  x.sink = p["sink"];
  x.local = p["local"];
  return x;
}

void validate_part_list(const ArtifactReader& r) {
  const json& kd = r.manifest()["kind_data"];
  const json& p = r.manifest()["params"];
  const auto& g = r.source().geo;
  KVT_CHECK(kd.contains("parts") && kd["parts"].is_array() && kd.contains("part_range") && kd["part_range"].is_array() &&
                kd["part_range"].size() == 2 && kd.contains("parts_total") && p.contains("layers") && p["layers"].is_array() &&
                p["layers"].size() == 2,
            BAD_MANIFEST, "kind_data must list parts, part_range and parts_total, and params the layer range");
  int64_t lf = p["layers"][0], ll = p["layers"][1];
  KVT_CHECK(lf >= 0 && lf <= ll && ll < g.layers, SHAPE_MISMATCH, "params.layers [" << lf << ", " << ll << "] is outside the geometry");
  int64_t total = kd["parts_total"], a = kd["part_range"][0], b = kd["part_range"][1];
  KVT_CHECK(total == (ll - lf + 1) * g.kv_heads && 0 <= a && a <= b && b <= total &&
                static_cast<int64_t>(kd["parts"].size()) == b - a,
            PART_INVALID, "kind_data lists " << kd["parts"].size() << " parts for part range [" << a << ", " << b << ") of " << total);
  for (int64_t i = a; i < b; ++i) {
    const json& pm = kd["parts"][static_cast<size_t>(i - a)];
    KVT_CHECK(pm.is_object() && pm.value("layer", int64_t{-1}) == lf + i / g.kv_heads && pm.value("kv_head", int64_t{-1}) == i % g.kv_heads,
              PART_INVALID, "kind_data.parts[" << i - a << "] is not part " << i << " (layer " << lf + i / g.kv_heads
                                                 << ", kv head " << i % g.kv_heads << ")");
  }
  for (const auto& s : r.sections()) {
    int64_t idx = (s.layer - lf) * g.kv_heads + s.kv_head;
    KVT_CHECK(s.layer >= lf && s.layer <= ll && s.kv_head >= 0 && s.kv_head < g.kv_heads && idx >= a && idx < b,
              PART_INVALID, "section '" << s.name << "' belongs to part (" << s.layer << ", " << s.kv_head << ") which is not in this artifact");
  }
}

const json& part_meta(const ArtifactReader& r, int64_t layer, int64_t kv_head) {
  for (const auto& pm : r.manifest()["kind_data"]["parts"])
    if (pm["layer"] == layer && pm["kv_head"] == kv_head) return pm;
  KVT_THROW(USAGE, "part (layer " << layer << ", kv head " << kv_head << ") is not in this artifact");
}

const KindInfo* find_kind(const std::string& name) {
  for (const auto& k : registry())
    if (k.name == name) return &k;
  return nullptr;
}

const KindInfo& validate_kind(const ArtifactReader& r) {
  const KindInfo* k = find_kind(r.kind());
  KVT_CHECK(k, UNKNOWN_KIND, "artifact kind '" << r.kind() << "' is not known to this kvtool");
  k->validate(r);
  return *k;
}

std::vector<std::string> kind_names() {
  std::vector<std::string> n;
  for (const auto& k : registry()) n.push_back(k.name);
  return n;
}

}  // namespace kvtool
