// Registry of artifact kinds (runtime layer). Each kind is one folder, lib/kinds/KIND/: its runtime
// half (KIND_select.cpp: structural validation, the part selector, query options, the KindSpec)
// and its offline half (KIND_build.cpp: the builder). docs/adding-a-kind.md walks through one.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kvtool/error.h"
#include "kvtool/json.h"

namespace kvtool {

class ArtifactReader;
struct SectionEntry;

// A budget counts index-chosen rows only: a fraction of the indexed rows (0 < value < 1, or a
// value written with a '%') or a row count (an integer >= 1).
struct Budget {
  double value = 0.1;
  bool fraction = true;
  int64_t rows(int64_t indexed) const;
  std::string str() const;
  static Budget parse(const std::string& s);  // USAGE on error
};

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

// How a kind chooses rows (receipts and eval treat the modes alike; only the kind knows its own).
enum class SelectionMode {
  budget_top_k,        // up to a budget of rows, best first (pq, clusterkv)
  quantile_threshold,  // every row whose cluster score reaches a calibrated threshold (squeeze)
  collision_sampling,  // every row colliding often enough, with its inclusion probability (lsh)
};

// One query option a kind takes: the same name on the command line (--budget), in the C API's
// option text ("budget=0.1") and in eval sweeps. An empty default_value means the kind derives
// it from the artifact (e.g. squeeze's first calibrated quantile).
struct QueryOption {
  std::string name, help, default_value;
};

// Option name -> value text, as a user wrote them. Parsing belongs to the kind.
using QuerySettings = std::map<std::string, std::string>;

// A kind's query parameters, parsed from QuerySettings by its KindSpec (the FAISS
// SearchParameters pattern: each kind derives its own; selectors take only their own type).
struct QueryParams {
  virtual ~QueryParams() = default;
  // The common option "order" (every kind; kinds.cpp registers it): "best" (the default) lists a
  // query's candidates best first, as receipts and reports show them; "rows" lists the same
  // candidates with the same scores in increasing row order, the order an engine gathers rows in,
  // which spares the kinds that can the best-first sort (formats/kinds-v1.md).
  bool row_order = false;
  // The receipt's "selector" object for a part with `indexed` rows.
  virtual json receipt(int64_t indexed) const = 0;
  // Eval: this setting's short label ("0.1", "c=2", "q=0.8/hier") and its keys in the summary.
  // Text after a '/' names a variant: compare's plot draws each variant of a kind as its own curve.
  virtual std::string label() const = 0;
  virtual json setting() const = 0;
};

struct SelectRequest {
  const float* q = nullptr;
  const QueryParams* params = nullptr;  // the part's kind's own type
  const KeyRows* keys = nullptr;        // full key rows, for kinds whose receipts need them
};

// The request's parameters as the kind's own type (INTERNAL when a caller mixed kinds up).
template <typename P>
const P& params_of(const SelectRequest& req) {
  const P* p = dynamic_cast<const P*>(req.params);
  KVT_CHECK(p, INTERNAL, "query parameters of another kind reached a selector");
  return *p;
}

struct Selection {
  std::vector<int64_t> ids;       // absolute dump rows, best first (ties by lower id) or ascending
  std::vector<float> scores;      // kind-specific score of each id
  std::vector<double> inclusion;  // sampling kinds: inclusion probability of each id
  int64_t centroids_scored = -1;  // centroid kinds: how many centroids this query scored
  int64_t budget_rows = -1;       // budget kinds: the rows the budget allowed this part
  bool dense = false;             // a dense part's listing of all its rows (no budget, no ranking)
  void clear() {                  // empty, its buffers kept
    ids.clear();
    scores.clear();
    inclusion.clear();
    centroids_scored = -1;
    budget_rows = -1;
    dense = false;
  }
};

class DeviceBackend;
struct ProductCodes;

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
  const DeviceSection* find(std::string_view name) const {  // a view: no string made per query
    for (const auto& [n, s] : sections)
      if (n == name) return &s;
    return nullptr;
  }
};

// The queries of one batch that share a part, for PartSelector::select_device_batch (and
// select_batch, on the host): query j of the group is the batch's query members[j] (increasing).
struct DeviceQueries {
  const float* batch_q = nullptr;    // the whole batch's vectors [batch count, d]
  const int64_t* members = nullptr;  // [count]
  int64_t count = 0, d = 0;
  const QueryParams* params = nullptr;  // the part's kind's own type
  const KeyRows* keys = nullptr;        // full key rows of the part's kv head (lsh inclusion) or nullptr
  void* stream = nullptr;               // the caller's device stream (QueryBatch::stream)
  const float* q(int64_t j) const { return batch_q + members[j] * d; }
  // The group's vectors [count, d] in one block: in place when the members are consecutive (a
  // batch laid out by kv head), else gathered into `scratch` (grown, never shrunk).
  const float* contiguous(std::vector<float>& scratch) const;
  // Query j as a SelectRequest (for the host half of a selection the device scored).
  SelectRequest request(int64_t j) const {
    SelectRequest r;
    r.q = q(j);
    r.params = params;
    r.keys = keys;
    return r;
  }
};

// Where select_device_batch puts its answers: query j of the group's selection.
class GroupAnswers {
 public:
  virtual ~GroupAnswers() = default;
  virtual void put(int64_t j, const Selection& sel) = 0;
  // Room to write query j's answer of up to `count` candidates in place (ids; scores unless
  // nullptr: the caller wants none), for a selection without inclusion probabilities, or false
  // (then put() it). finish(j, written) once they are.
  virtual bool room(int64_t /*j*/, int64_t /*count*/, int64_t*& /*ids*/, float*& /*scores*/) { return false; }
  virtual void finish(int64_t /*j*/, int64_t /*count*/) {}
};

template <typename T>
int64_t vector_bytes(const std::vector<T>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}

// The clusters a part's selection is made of (clusterkv, squeeze's fine level), as loaded: cluster c
// has centroid centroids[c * d, (c + 1) * d) and sizes[c] members (absolute rows, ascending) at
// members[prefix[c] - sizes[c], prefix[c]). For estimates of what a selection leaves out
// (eval-decode --estimated-zone).
struct ClusterView {
  int64_t count = 0, d = 0;
  const float* centroids = nullptr;
  const uint32_t *sizes = nullptr, *prefix = nullptr, *members = nullptr;
};

// Loaded selector state of one (layer, kv head) part.
class PartSelector {
 public:
  virtual ~PartSelector() = default;
  virtual int64_t indexed_rows() const = 0;
  // What rows a part returns is the kind's (SelectionMode); a part that keeps attention dense
  // returns all its indexed rows.
  virtual void select(const SelectRequest& req, Selection& out) const = 0;
  // The same selection with the scoring done on the device (the pool's device tier): equal ids and
  // scores. Returns false when this part has no device path (it is then answered on the host).
  virtual bool select_device(const SelectRequest&, const DevicePart&, Selection&) const { return false; }
  // Sizes the device's batch buffers for up to `max_queries` queries of this part per batch (the
  // pool calls it at publish, so that batches allocate nothing).
  virtual void reserve_device_batches(const DevicePart&, int64_t /*max_queries*/) const {}
  // A batch's queries of this part at once on the device (the pool's device tier): put()s each
  // query's selection, equal to what select() gives it. Queries it does not put (no batched path
  // for this part or device, a batch outside the reserved shape) are answered one by one.
  virtual void select_device_batch(const DevicePart&, const DeviceQueries&, GroupAnswers&) const {}
  // The same on the host (a batch on the host tier): a kind that scores a part's rows once for all
  // the queries sharing them (the query heads of one kv head) put()s each query's selection, equal
  // to what select() gives it; queries it does not put are answered one by one.
  virtual void select_batch(const DeviceQueries&, GroupAnswers&) const {}
  // For kinds whose whole selection runs on the device (Lease::plan_device_step): this part's
  // device-resident codes, the rows a query gets under `params` and the part's first row id.
  // false when the part has none (another kind, a dense part, a host-tier generation).
  virtual bool device_pq_selection(const DevicePart&, const QueryParams&, ProductCodes&, int64_t& /*top*/,
                                   int64_t& /*row_base*/) const {
    return false;
  }
  virtual json describe() const { return json::object(); }
  // The part's clusters, for kinds that select whole clusters; false for others and dense parts.
  virtual bool cluster_view(ClusterView& /*out*/) const { return false; }
  // Bytes of selector state this part holds in memory (the pool charges them to its host tier).
  virtual int64_t resident_bytes() const = 0;
};

// Everything the kind-agnostic code (query, eval, the pool, the C API, verify, inspect, merge)
// knows of a kind: one registration per kind, in lib/kinds/KIND/KIND_select.cpp, listed once in
// lib/runtime/src/kinds.cpp (docs/adding-a-kind.md). Builders (offline) are KindBuilder
// subclasses; the tools register their command-line options (tools/common/kind_commands.cpp).
struct KindSpec {
  std::string name;
  std::string summary;
  SelectionMode mode = SelectionMode::budget_top_k;
  // Throws Error with a kind-specific reason (CODE_OUT_OF_RANGE, ...) when the artifact is invalid.
  std::function<void(const ArtifactReader&)> validate;
  // Loads the selector of one part (nullptr for kinds without queries).
  std::function<std::unique_ptr<PartSelector>(const ArtifactReader&, int64_t layer, int64_t kv_head)> load;
  // The query options this kind takes, and their parser: names it does not take are USAGE;
  // absent ones take their default (or one the kind reads from the artifact).
  std::vector<QueryOption> query_options;
  std::function<std::unique_ptr<QueryParams>(const ArtifactReader&, const QuerySettings&)> parse_query;
  // Eval: the values of one option evaluated when the user gives none (e.g. every calibrated
  // quantile). Unset: the option's default only.
  std::function<std::vector<std::string>(const ArtifactReader&, const std::string& option)> default_sweep = nullptr;
  // Compare (kvtool compare): the values of one option that trace the kind's curve of retained
  // mass against selected fraction when the user names none (a budget sweep, the collision
  // thresholds valid for the artifact). Unset: default_sweep's values.
  std::function<std::vector<std::string>(const ArtifactReader&, const std::string& option)> curve_sweep = nullptr;
  // Sections that the kind's device path reads as f32 where the artifact stores them as f16
  // (centroids, codebooks): the pool's device image holds them widened (exactly).
  std::vector<std::string> device_f32_sections;
  // Optional: host bytes the kind's selectors of this artifact may hold beyond the pool's generic
  // bound (twice the raw sections plus 4 KiB a part), for state that is not a widened copy of a
  // section (pq's rows grouped by code pair). The pool reserves them before the selectors load.
  std::function<int64_t(const ArtifactReader&)> selector_extra_bytes = nullptr;
  // Receipts need the full key rows (inclusion probabilities): callers pass KeyRows.
  bool needs_keys = false;
  // Optional kind-specific summary shown by inspect (e.g. table bytes, bucket occupancy).
  std::function<json(const ArtifactReader&)> summarize = nullptr;
  // Optional: artifact-level kind_data computed from every part's metadata once all parts exist
  // (build and merge call it alike, so a merged artifact equals an unsharded one).
  std::function<json(const json& params, const json& parts)> finalize = nullptr;
};

// "name=value" pairs separated by commas or spaces (the C API's option text); USAGE when malformed.
QuerySettings parse_query_settings(const std::string& text);
// The settings among `s` that `kind` takes (one set of options for artifacts of several kinds).
QuerySettings settings_for(const KindSpec& kind, const QuerySettings& s);
// Rejects settings naming an option the kind does not take (USAGE, naming the ones it does).
void check_query_settings(const KindSpec& kind, const QuerySettings& s);
// The value of `name` in `s`, or the option's default.
std::string setting_or_default(const KindSpec& kind, const QuerySettings& s, const std::string& name);

const KindSpec* find_kind(const std::string& name);

// The common part of every kind's registration: its selector type answers load().
template <typename Selector>
KindSpec make_kind_spec(std::string name, std::string summary, SelectionMode mode,
                        std::function<void(const ArtifactReader&)> validate) {
  KindSpec k;
  k.name = std::move(name);
  k.summary = std::move(summary);
  k.mode = mode;
  k.validate = std::move(validate);
  k.load = [](const ArtifactReader& r, int64_t layer, int64_t kv_head) -> std::unique_ptr<PartSelector> {
    return std::make_unique<Selector>(r, layer, kv_head);
  };
  return k;
}

// Option values as text, parsed strictly (USAGE naming the option on anything else).
int64_t parse_int_option(const std::string& name, const std::string& text);
double parse_double_option(const std::string& name, const std::string& text);
bool parse_bool_option(const std::string& name, const std::string& text);  // true/false/1/0

// Parameters of the budget kinds (pq, clusterkv): "budget", and "rerank" F: the index proposes
// F x the budget's rows and exact q.k over the host keys keeps the budget's best (SelectorSet::query;
// the caller must pass the keys). F = 1: no rerank. "top_p" P (an adaptive budget, docs/quality.md):
// of the budget's rows, best first, the fewest whose softmax mass — as the index's scores estimate
// it, exp(score / sqrt(head_dim)) over the budget's rows — reaches P; the budget is then a cap. 0: off.
struct BudgetParams : QueryParams {
  Budget budget;
  double rerank = 1;
  double top_p = 0;
  static constexpr double kMaxRerank = 1024;
  json receipt(int64_t indexed) const override;
  std::string label() const override;
  json setting() const override;
  // The budget the index proposes from: F x the budget (fraction or rows).
  Budget proposal() const;
};
// `params` when they are a budget kind's with rerank F > 1, else null.
const BudgetParams* reranking(const QueryParams& params);
// `params` when they are a budget kind's with top_p > 0, else null.
const BudgetParams* top_p_of(const QueryParams& params);
std::vector<QueryOption> budget_query_options();
// The budgets (fractions of the indexed rows) a budget kind's compare curve sweeps.
std::vector<std::string> budget_curve();
std::unique_ptr<QueryParams> parse_budget_params(const KindSpec& kind, const QuerySettings& s);

// A budget kind (budget_top_k, the one option "budget"): pq and clusterkv register with this.
template <typename Selector>
KindSpec make_budget_kind_spec(const std::string& name, std::string summary,
                               std::function<void(const ArtifactReader&)> validate) {
  KindSpec k = make_kind_spec<Selector>(name, std::move(summary), SelectionMode::budget_top_k, std::move(validate));
  k.query_options = budget_query_options();
  k.parse_query = [name](const ArtifactReader&, const QuerySettings& s) {
    return parse_budget_params(*find_kind(name), s);
  };
  k.curve_sweep = [](const ArtifactReader&, const std::string& option) {
    return option == "budget" ? budget_curve() : std::vector<std::string>{};  // rerank: its default
  };
  return k;
}

const KindSpec* find_kind(const std::string& name);
// The kind of an artifact after its structural validation (UNKNOWN_KIND, or the kind's reason).
const KindSpec& validate_kind(const ArtifactReader& r);
std::vector<std::string> kind_names();

// Validation shared by all builder-made kinds: kind_data.parts lists exactly the parts of
// part_range in (layer, kv head) order, inside the params' layer range and the geometry.
void validate_part_list(const ArtifactReader& r);
// kind_data.parts entry of one part (USAGE when the artifact does not hold that part).
const json& part_meta(const ArtifactReader& r, int64_t layer, int64_t kv_head);
// The (layer, kv head) parts kind_data.parts lists (after validate_part_list).
std::set<std::pair<int64_t, int64_t>> artifact_parts(const ArtifactReader& r);
// The section `name` of one part; PART_INVALID when the artifact lacks it (selectors never
// dereference a section lookup unchecked, even after validation).
const SectionEntry& require_section(const ArtifactReader& r, const std::string& name, int64_t layer, int64_t kv_head);
// Typed reads of manifest members: BAD_MANIFEST with the member's name when it is missing or of
// another JSON type (a manifest is hostile input; a type error is never an internal error).
const json& member(const json& obj, const char* name, const std::string& where);
int64_t int_member(const json& obj, const char* name, const std::string& where);
int64_t int_element(const json& arr, size_t i, const std::string& where);

namespace kinds {
// Defined in lib/kinds/KIND/KIND_select.cpp, one per line of kvtool/kinds.def.
#define KVTOOL_KIND(name, about) KindSpec name##_kind();
#include "kvtool/kinds.def"
#undef KVTOOL_KIND
}  // namespace kinds

}  // namespace kvtool
