#include "kvtool/kinds.h"

#include "kvtool/admission.h"
#include "kvtool/artifact.h"
#include "kvtool/error.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kvtool {

namespace {

// "container-test": the reserved kind used by tests and fixtures before (and besides) the index
// kinds. Its sections are its own small vocabulary (formats/kinds-v1.md, section 7), so an index
// of a real kind relabelled "container-test" is refused rather than passed as opaque bytes; part-
// bound sections must name a real part. It is never served: it has no selector.
void validate_container_test(const ArtifactReader& r) {
  const auto& g = r.source().geo;
  for (const auto& s : r.sections()) {
    const bool part_bound = s.layer != -1 || s.kv_head != -1;
    const bool known = (part_bound && (s.name == "keys" || s.name == "ids")) || (!part_bound && s.name == "note");
    KVT_CHECK(known, PART_INVALID,
              "section '" << s.name << "' is not a container-test section (part-bound 'keys' and 'ids', "
                          << "artifact-wide 'note')");
    KVT_CHECK(
        !part_bound || (s.layer >= 0 && s.layer < g.layers && s.kv_head >= 0 && s.kv_head < g.kv_heads), SHAPE_MISMATCH,
        "section '" << s.name << "' names part (" << s.layer << ", " << s.kv_head << ") outside the source geometry");
  }
}

KindSpec container_test_kind() {
  KindSpec k;
  k.name = "container-test";
  k.summary = "opaque test sections (container self-test, fixtures)";
  k.validate = validate_container_test;
  return k;
}

// The option every kind with queries takes (QueryParams::row_order), parsed here so that no kind
// sees it: the kind's parser gets the other settings.
void add_order_option(KindSpec& k) {
  if (!k.parse_query) return;
  k.query_options.push_back({"order",
                             "best: candidates best first (receipts, reports); rows: the same candidates and scores "
                             "in increasing row order, the order an engine gathers rows in (faster for pq)",
                             "best"});
  k.parse_query = [inner = k.parse_query](const ArtifactReader& r, const QuerySettings& s) {
    QuerySettings rest = s;
    std::string order = "best";
    if (auto it = rest.find("order"); it != rest.end()) order = it->second, rest.erase(it);
    KVT_CHECK(order == "best" || order == "rows", USAGE,
              "query option order='" << excerpt(order, 32) << "' must be best or rows");
    std::unique_ptr<QueryParams> p = inner(r, rest);
    p->row_order = order == "rows";
    return p;
  };
}

// The kinds: container-test, then kvtool/kinds.def's in its order (docs/adding-a-kind.md).
const std::vector<KindSpec>& registry() {
  static const std::vector<KindSpec> kinds = [] {
    std::vector<KindSpec> all = {
        container_test_kind(),
#define KVTOOL_KIND(name, about) kinds::name##_kind(),
#include "kvtool/kinds.def"
#undef KVTOOL_KIND
    };
    for (KindSpec& k : all) add_order_option(k);
    return all;
  }();
  return kinds;
}

}  // namespace

// The largest row-count budget: 2^53, below which doubles hold every integer.
constexpr double kMaxBudgetRows = 9007199254740992.0;

int64_t Budget::rows(int64_t indexed) const {
  // Compared as doubles first: a proposal (budget x rerank) may be beyond int64.
  if (!fraction) return value >= static_cast<double>(indexed) ? indexed : static_cast<int64_t>(value);
  return std::min<int64_t>(indexed, static_cast<int64_t>(std::llround(value * static_cast<double>(indexed))));
}

std::string Budget::str() const {
  std::ostringstream os;
  if (fraction)
    os << value;
  else
    os << static_cast<int64_t>(value);
  return os.str();
}

Budget Budget::parse(const std::string& s) {
  Budget b;
  try {
    size_t pos = 0;
    std::string t = s;
    bool pct = !t.empty() && t.back() == '%';
    if (pct) t.pop_back();
    double v = std::stod(t, &pos);
    KVT_CHECK(pos == t.size() && std::isfinite(v) && v > 0, USAGE, "bad budget");
    if (pct) {
      KVT_CHECK(v <= 100, USAGE, "bad budget");
      b.value = v / 100;
      b.fraction = true;
    } else if (v < 1) {
      b.value = v;
      b.fraction = true;
    } else {
      // A count beyond 2^53 is no row count a dump can have, and beyond it doubles skip integers
      // (1e19 would also overflow int64 in rows()): refused here rather than failing later.
      KVT_CHECK(v == std::floor(v) && v <= kMaxBudgetRows, USAGE, "bad budget");
      b.value = v;
      b.fraction = false;
    }
  } catch (...) {
    KVT_THROW(USAGE, "budget '" << s
                                << "' must be a fraction of the indexed rows in (0, 1) such as 0.1, a percentage "
                                   "such as 10%, or a row count such as 64 (at most 2^53)");
  }
  return b;
}

json BudgetParams::receipt(int64_t indexed) const {
  json j = {{"budget", budget.str()}, {"budget_rows", budget.rows(indexed)}};
  if (rerank > 1) j["rerank"] = rerank, j["proposed_rows"] = proposal().rows(indexed);
  if (top_p > 0) j["top_p"] = top_p;
  return j;
}

// Without a rerank the label and setting are what they were before the option existed, so that
// reports of plain budgets keep their keys.
std::string BudgetParams::label() const {
  if (rerank <= 1 && top_p <= 0) return budget.str();
  std::ostringstream os;
  os << budget.str();
  if (rerank > 1) os << " r" << rerank;
  if (top_p > 0) os << " p" << top_p;
  return os.str();
}

json BudgetParams::setting() const {
  json j = {{"budget", budget.str()}, {"budget_is_fraction", budget.fraction}};
  if (rerank > 1) j["rerank"] = rerank;
  if (top_p > 0) j["top_p"] = top_p;
  return j;
}

Budget BudgetParams::proposal() const {
  Budget b = budget;
  // A row count stays a budget a dump can have (at most 2^53 rows, as Budget::parse allows).
  b.value = budget.fraction ? std::min(1.0, budget.value * rerank)
                            : std::min(kMaxBudgetRows, std::floor(budget.value * rerank));
  return b;
}

const BudgetParams* reranking(const QueryParams& params) {
  const auto* b = dynamic_cast<const BudgetParams*>(&params);
  return b && b->rerank > 1 ? b : nullptr;
}

const BudgetParams* top_p_of(const QueryParams& params) {
  const auto* b = dynamic_cast<const BudgetParams*>(&params);
  return b && b->top_p > 0 ? b : nullptr;
}

std::vector<QueryOption> budget_query_options() {
  return {{"budget", "index-chosen rows: a fraction of the indexed rows (0.1, 10%) or a count (64)", "0.1"},
          {"rerank",
           "F >= 1: the index proposes F x budget rows, exact q.k over the host keys keeps the budget (1: off)", "1"},
          {"top_p",
           "P in (0, 1]: of the budget's rows, best first, the fewest whose softmax mass as the index estimates it "
           "reaches P (an adaptive budget; the budget is its cap; 0: off)",
           "0"}};
}

// From near the sink/local floor to well past eval's default 0.1: where the budget kinds' curves
// bend (docs/reports/quality-runs.md, "PQCache quality" and "ClusterKV quality", quote 0.05 to 0.2).
std::vector<std::string> budget_curve() { return {"0.02", "0.05", "0.1", "0.2", "0.3"}; }

std::unique_ptr<QueryParams> parse_budget_params(const KindSpec& kind, const QuerySettings& s) {
  check_query_settings(kind, s);
  auto p = std::make_unique<BudgetParams>();
  p->budget = Budget::parse(setting_or_default(kind, s, "budget"));
  p->rerank = parse_double_option("rerank", setting_or_default(kind, s, "rerank"));
  KVT_CHECK(p->rerank >= 1 && p->rerank <= BudgetParams::kMaxRerank, USAGE,
            "query option rerank=" << p->rerank << " must be between 1 (no rerank) and " << BudgetParams::kMaxRerank);
  p->top_p = parse_double_option("top_p", setting_or_default(kind, s, "top_p"));
  KVT_CHECK(p->top_p >= 0 && p->top_p <= 1, USAGE,
            "query option top_p=" << p->top_p << " must be in (0, 1] (0: off, a fixed budget)");
  return p;
}

namespace {
// `parse(text, &pos)` must consume all of the text (std::stoll, std::stod).
template <typename T, typename Parse>
T parse_whole(const std::string& name, const std::string& text, const char* what, Parse parse) {
  size_t pos = 0;
  T v{};
  try {
    v = parse(text, &pos);
  } catch (...) {
    pos = 0;
  }
  // Decimal text only: stoll/stod also read leading blanks, and stod hex ("0x10") and "inf"/"nan".
  const bool decimal = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
  KVT_CHECK(decimal && pos == text.size() && std::isfinite(static_cast<double>(v)), USAGE,
            "query option " << printable(name) << "='" << printable(text) << "' is not " << what);
  return v;
}
}  // namespace

int64_t parse_int_option(const std::string& name, const std::string& text) {
  return parse_whole<int64_t>(name, text, "an integer",
                              [](const std::string& t, size_t* p) { return std::stoll(t, p); });
}

double parse_double_option(const std::string& name, const std::string& text) {
  return parse_whole<double>(name, text, "a finite decimal number",
                             [](const std::string& t, size_t* p) { return std::stod(t, p); });
}

bool parse_bool_option(const std::string& name, const std::string& text) {
  if (text == "true" || text == "1") return true;
  if (text == "false" || text == "0") return false;
  KVT_THROW(USAGE, "query option " << printable(name) << "='" << printable(text) << "' is not true or false");
}

QuerySettings parse_query_settings(const std::string& text) {
  QuerySettings s;
  std::string t = text;
  for (char& c : t)
    if (c == ',') c = ' ';
  std::istringstream is(t);
  std::string item;
  while (is >> item) {
    size_t eq = item.find('=');
    KVT_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < item.size(), USAGE,
              "query option '" << item << "' is not name=value");
    KVT_CHECK(s.emplace(item.substr(0, eq), item.substr(eq + 1)).second, USAGE,
              "query option '" << item.substr(0, eq) << "' is given twice");
  }
  return s;
}

QuerySettings settings_for(const KindSpec& kind, const QuerySettings& s) {
  QuerySettings out;
  for (const auto& o : kind.query_options)
    if (auto it = s.find(o.name); it != s.end()) out.insert(*it);
  return out;
}

void check_query_settings(const KindSpec& kind, const QuerySettings& s) {
  for (const auto& [name, value] : s) {
    bool known = false;
    std::string names;
    for (const auto& o : kind.query_options) {
      known = known || o.name == name;
      names += (names.empty() ? "" : ", ") + o.name;
    }
    KVT_CHECK(known, USAGE,
              "query option '" << name << "' does not apply to " << kind.name
                               << " artifacts (they take: " << (names.empty() ? "none" : names) << ")");
  }
}

const float* DeviceQueries::contiguous(std::vector<float>& scratch) const {
  if (count > 0 && members[count - 1] - members[0] == count - 1) return q(0);  // increasing, so consecutive
  if (scratch.size() < static_cast<size_t>(count * d)) scratch.resize(static_cast<size_t>(count * d));
  for (int64_t j = 0; j < count; ++j) std::copy(q(j), q(j) + d, scratch.data() + j * d);
  return scratch.data();
}

std::string setting_or_default(const KindSpec& kind, const QuerySettings& s, const std::string& name) {
  auto it = s.find(name);
  if (it != s.end()) return it->second;
  for (const auto& o : kind.query_options)
    if (o.name == name) return o.default_value;
  KVT_THROW(INTERNAL, "kind " << kind.name << " has no query option '" << name << "'");
}

int64_t IndexedRows::begin() const { return std::min(sink, coverage_end); }
int64_t IndexedRows::end() const { return std::max(begin(), coverage_end - local); }

IndexedRows IndexedRows::of(const ArtifactReader& r) {
  const json& p = member(r.manifest(), "params", "manifest");
  IndexedRows x;
  x.coverage_end = r.source().coverage_end;
  x.sink = int_member(p, "sink", "params");
  x.local = int_member(p, "local", "params");
  // Row ids are int64 and widened to u32 in sections: a sink or window beyond 2^32 rows is a lie.
  KVT_CHECK(x.sink >= 0 && x.local >= 0 && x.sink <= (int64_t{1} << 32) && x.local <= (int64_t{1} << 32), BAD_MANIFEST,
            "params.sink " << x.sink << " / params.local " << x.local << " are out of range");
  return x;
}

const json& member(const json& obj, const char* name, const std::string& where) {
  KVT_CHECK(obj.is_object() && obj.contains(name), BAD_MANIFEST, where << " has no member '" << name << "'");
  return obj[name];
}

namespace {
// An integer that fits int64 (nlohmann stores large non-negative numbers as uint64).
bool is_int64(const json& v) {
  return v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX));
}
}  // namespace

int64_t int_member(const json& obj, const char* name, const std::string& where) {
  const json& v = member(obj, name, where);
  KVT_CHECK(is_int64(v), BAD_MANIFEST, where << "." << name << " is not a 64-bit integer");
  return v.get<int64_t>();
}

int64_t int_element(const json& arr, size_t i, const std::string& where) {
  KVT_CHECK(arr.is_array() && i < arr.size() && is_int64(arr[i]), BAD_MANIFEST,
            where << "[" << i << "] is not a 64-bit integer");
  return arr[i].get<int64_t>();
}

void validate_part_list(const ArtifactReader& r) {
  const json& kd = member(r.manifest(), "kind_data", "manifest");
  const json& p = member(r.manifest(), "params", "manifest");
  const auto& g = r.source().geo;
  const json& parts = member(kd, "parts", "kind_data");
  const json& range = member(kd, "part_range", "kind_data");
  const json& layers = member(p, "layers", "params");
  KVT_CHECK(parts.is_array() && range.is_array() && range.size() == 2 && layers.is_array() && layers.size() == 2,
            BAD_MANIFEST, "kind_data must list parts and a part_range [a, b), and params a layer range [first, last]");
  const int64_t lf = int_element(layers, 0, "params.layers"), ll = int_element(layers, 1, "params.layers");
  KVT_CHECK(lf >= 0 && lf <= ll && ll < g.layers, SHAPE_MISMATCH,
            "params.layers [" << lf << ", " << ll << "] is outside the geometry");
  const int64_t total = int_member(kd, "parts_total", "kind_data");
  const int64_t a = int_element(range, 0, "kind_data.part_range"), b = int_element(range, 1, "kind_data.part_range");
  KVT_CHECK(total == (ll - lf + 1) * g.kv_heads && 0 <= a && a <= b && b <= total &&
                static_cast<int64_t>(parts.size()) == b - a,
            PART_INVALID,
            "kind_data lists " << parts.size() << " parts for part range [" << a << ", " << b << ") of " << total);
  for (int64_t i = a; i < b; ++i) {
    const json& pm = parts[static_cast<size_t>(i - a)];
    const std::string where = "kind_data.parts[" + std::to_string(i - a) + "]";
    KVT_CHECK(
        pm.is_object() && int_member(pm, "layer", where) == lf + i / g.kv_heads &&
            int_member(pm, "kv_head", where) == i % g.kv_heads,
        PART_INVALID,
        where << " is not part " << i << " (layer " << lf + i / g.kv_heads << ", kv head " << i % g.kv_heads << ")");
  }
  for (const auto& s : r.sections()) {
    int64_t idx = (s.layer - lf) * g.kv_heads + s.kv_head;
    KVT_CHECK(s.layer >= lf && s.layer <= ll && s.kv_head >= 0 && s.kv_head < g.kv_heads && idx >= a && idx < b,
              PART_INVALID,
              "section '" << s.name << "' belongs to part (" << s.layer << ", " << s.kv_head
                          << ") which is not in this artifact");
  }
}

const json& part_meta(const ArtifactReader& r, int64_t layer, int64_t kv_head) {
  for (const auto& pm : member(member(r.manifest(), "kind_data", "manifest"), "parts", "kind_data"))
    if (pm.is_object() && pm.value("layer", json()) == layer && pm.value("kv_head", json()) == kv_head) return pm;
  KVT_THROW(USAGE, "part (layer " << layer << ", kv head " << kv_head << ") is not in this artifact");
}

std::set<std::pair<int64_t, int64_t>> artifact_parts(const ArtifactReader& r) {
  std::set<std::pair<int64_t, int64_t>> out;
  for (const auto& pm : member(member(r.manifest(), "kind_data", "manifest"), "parts", "kind_data"))
    out.emplace(int_member(pm, "layer", "part"), int_member(pm, "kv_head", "part"));
  return out;
}

const SectionEntry& require_section(const ArtifactReader& r, const std::string& name, int64_t layer, int64_t kv_head) {
  const SectionEntry* s = r.find(name, layer, kv_head);
  KVT_CHECK(s, PART_INVALID, "part (layer " << layer << ", kv head " << kv_head << ") has no section '" << name << "'");
  return *s;
}

const KindSpec* find_kind(const std::string& name) {
  for (const auto& k : registry())
    if (k.name == name) return &k;
  return nullptr;
}

const KindSpec& validate_kind(const ArtifactReader& r) {
  const KindSpec* k = find_kind(r.kind());
  KVT_CHECK(k, UNKNOWN_KIND, "artifact kind '" << r.kind() << "' is not known to this kvtool");
  try {
    k->validate(r);
  } catch (const json::exception& e) {
    // A member of another JSON type than the kind's reader expects is a malformed manifest; the
    // kinds check types where they read, this is the net under them.
    KVT_THROW(BAD_MANIFEST, "the " << r.kind() << " manifest has a member of the wrong type (" << e.what() << ")");
  }
  return *k;
}

const KindSpec& admit_artifact(const ArtifactReader& r, const TrustPolicy& trust) {
  r.verify_signature(trust.trusted, trust.require_signature);
  r.verify_sections();
  return validate_kind(r);
}

std::vector<std::string> kind_names() {
  std::vector<std::string> n;
  for (const auto& k : registry()) n.push_back(k.name);
  return n;
}

}  // namespace kvtool
