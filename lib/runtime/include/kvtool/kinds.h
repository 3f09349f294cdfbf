// Registry of artifact kinds. Each kind lives in one place (lib/src/kinds/KIND.cpp): its builder,
// the structural validation `verify` runs, and the selector that answers queries.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvtool/json.h"

namespace kvtool {

class ArtifactReader;

// Rows of the dump an artifact indexes: coverage [0, coverage_end), sink rows [0, sink) and the
// local window [coverage_end - local, coverage_end) are not indexed but always included.
struct IndexedRows {
  int64_t coverage_end = 0, sink = 0, local = 0;
  int64_t begin() const;
  int64_t end() const;
  int64_t count() const { return end() - begin(); }
  static IndexedRows of(const ArtifactReader& r);  // from the manifest (params sink/local, coverage)
};

// Full key rows of the source dump (row-major, absolute row ids), for kinds whose receipts are
// computed from the full keys (lsh inclusion probabilities).
struct KeyRows {
  const float* data = nullptr;
  int64_t rows = 0, d = 0;
  const float* row(int64_t i) const { return data + i * d; }
};

struct SelectRequest {
  const float* q = nullptr;
  int64_t budget = 0;          // index-chosen rows (kinds that rank)
  int64_t min_collisions = 2;  // c (kinds that sample)
  double quantile = 0.5;       // calibrated threshold to apply (threshold kinds: squeeze)
  bool flat = false;           // squeeze: score every fine centroid instead of the two-level pass
  const KeyRows* keys = nullptr;
};

struct Selection {
  std::vector<int64_t> ids;       // absolute dump rows, best first (ties by lower id) or ascending
  std::vector<float> scores;      // kind-specific score of each id
  std::vector<double> inclusion;  // sampling kinds: inclusion probability of each id
  int64_t centroids_scored = -1;  // centroid kinds: how many centroids this query scored
};

class DeviceBackend;

// One section of a part resident in device memory (raw image, as in the artifact).
struct DeviceSection {
  const void* ptr = nullptr;
  std::string dtype;
  std::vector<int64_t> shape;
};

// A part's sections in the pool's device tier and the backend that scores on them.
struct DevicePart {
  DeviceBackend* dev = nullptr;
  std::vector<std::pair<std::string, DeviceSection>> sections;
  const DeviceSection* find(const std::string& name) const {
    for (const auto& [n, s] : sections)
      if (n == name) return &s;
    return nullptr;
  }
};

template <typename T>
int64_t vector_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

// Loaded selector state of one (layer, kv head) part.
class PartSelector {
 public:
  virtual ~PartSelector() = default;
  virtual int64_t indexed_rows() const = 0;
  // Ranking kinds return up to `budget` rows; a part that keeps attention dense returns all its
  // indexed rows; sampling kinds ignore the budget and return every row with >= c collisions.
  virtual void select(const SelectRequest& req, Selection& out) const = 0;
  // The same selection with the scoring done on the device (the pool's device tier): equal ids and
  // scores. Returns false when this part has no device path (it is then answered on the host).
  virtual bool select_device(const SelectRequest&, const DevicePart&, Selection&) const { return false; }
  virtual bool uses_budget() const { return true; }
  virtual bool uses_quantile() const { return false; }
  virtual bool needs_keys() const { return false; }
  virtual json describe() const { return json::object(); }
  // Bytes of selector state this part holds in memory (the pool charges them to its host tier).
  virtual int64_t resident_bytes() const = 0;
};

struct KindInfo {
  std::string name;
  std::string summary;
  // Throws Error with a kind-specific reason (CODE_OUT_OF_RANGE, ...) when the artifact is invalid.
  std::function<void(const ArtifactReader&)> validate;
  // Loads the selector of one part (nullptr for kinds without queries).
  std::function<std::unique_ptr<PartSelector>(const ArtifactReader&, int64_t layer, int64_t kv_head)> load;
  // Optional kind-specific summary shown by inspect (e.g. table bytes, bucket occupancy).
  std::function<json(const ArtifactReader&)> summarize = nullptr;
  // Optional: artifact-level kind_data computed from every part's metadata once all parts exist
  // (build and merge call it alike, so a merged artifact equals an unsharded one).
  std::function<json(const json& params, const json& parts)> finalize = nullptr;
};

const KindInfo* find_kind(const std::string& name);
// The kind of an artifact after its structural validation (UNKNOWN_KIND, or the kind's reason).
const KindInfo& validate_kind(const ArtifactReader& r);
std::vector<std::string> kind_names();

// Validation shared by all builder-made kinds: kind_data.parts lists exactly the parts of
// part_range in (layer, kv head) order, inside the params' layer range and the geometry.
void validate_part_list(const ArtifactReader& r);
// kind_data.parts entry of one part (USAGE when the artifact does not hold that part).
const json& part_meta(const ArtifactReader& r, int64_t layer, int64_t kv_head);

namespace kinds {
// Defined in lib/src/kinds/*.cpp.
KindInfo pq_kind();
KindInfo clusterkv_kind();
KindInfo lsh_kind();
KindInfo squeeze_kind();
}  // namespace kinds

}  // namespace kvtool
