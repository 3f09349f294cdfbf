// make_builder: the kind registry for builders (kvtool/kind_builders.h), and the strict JSON
// parameter reader every kind's KIND_params.cpp uses.
#include "kvtool/kind_builders.h"

#include <cmath>

#include "kvtool/error.h"

namespace kvtool {

namespace {

using MakeBuilder = std::unique_ptr<KindBuilder> (*)(const json&);

struct BuilderEntry {
  const char* kind;
  MakeBuilder make;
};

// kvtool/kinds.def's kinds in its order, the order of `kvtool build`'s kind list.
const BuilderEntry kBuilders[] = {
#define KVTOOL_KIND(name, about) {#name, make_##name##_builder},
#include "kvtool/kinds.def"
#undef KVTOOL_KIND
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::vector<std::string> builder_kinds() {
  std::vector<std::string> out;
  for (const auto& b : kBuilders) out.emplace_back(b.kind);
  return out;
}

std::unique_ptr<KindBuilder> make_builder(const std::string& kind, const json& params) {
  for (const auto& b : kBuilders)
    if (kind == b.kind) return b.make(params);
  KVT_THROW(USAGE, "unknown index kind '" << kind << "' (kinds: " << join(builder_kinds()) << ")");
}

BuildParams::BuildParams(std::string kind, const json& params) : kind_(std::move(kind)), params_(params) {
  if (params_.is_null()) params_ = json::object();
  KVT_CHECK(params_.is_object(), USAGE, kind_ << " build parameters must be a JSON object of name: value");
}

bool BuildParams::has(const char* name) const {
  auto it = params_.find(name);
  return it != params_.end() && !it->is_null();  // null: the default, as when absent
}

const json* BuildParams::find(const char* name) {
  known_.insert(name);
  auto it = params_.find(name);
  return it == params_.end() || it->is_null() ? nullptr : &*it;
}

void BuildParams::get(const char* name, int64_t& out) {
  const json* v = find(name);
  if (!v) return;
  KVT_CHECK(v->is_number_integer(), USAGE,
            kind_ << " parameter '" << name << "' must be an integer, got " << v->dump());
  KVT_CHECK(!v->is_number_unsigned() || v->get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX), USAGE,
            kind_ << " parameter '" << name << "' is out of range: " << v->dump());
  out = v->get<int64_t>();
}

void BuildParams::get(const char* name, double& out) {
  const json* v = find(name);
  if (!v) return;
  KVT_CHECK(v->is_number(), USAGE, kind_ << " parameter '" << name << "' must be a number, got " << v->dump());
  const double x = v->get<double>();
  KVT_CHECK(std::isfinite(x), USAGE, kind_ << " parameter '" << name << "' must be finite");
  out = x;
}

void BuildParams::get(const char* name, std::string& out) {
  const json* v = find(name);
  if (!v) return;
  KVT_CHECK(v->is_string(), USAGE, kind_ << " parameter '" << name << "' must be a string, got " << v->dump());
  out = v->get<std::string>();
}

void BuildParams::get_bytes(const char* name, std::string& out) {
  const json* v = find(name);
  if (!v) return;
  KVT_CHECK(v->is_binary(), USAGE, kind_ << " parameter '" << name << "' must be bytes, got " << v->type_name());
  const auto& b = v->get_binary();
  out.assign(b.begin(), b.end());
}

void BuildParams::get_list_text(const char* name, std::string& out) {
  const json* v = find(name);
  if (!v) return;
  if (v->is_string()) {
    out = v->get<std::string>();
    return;
  }
  KVT_CHECK(v->is_array(), USAGE,
            kind_ << " parameter '" << name << "' must be a list of numbers or a string, got " << v->dump());
  std::string text;
  for (const auto& x : *v) {
    KVT_CHECK(x.is_number(), USAGE, kind_ << " parameter '" << name << "' must hold numbers, got " << x.dump());
    text += (text.empty() ? "" : ",") + x.dump();
  }
  out = text;
}

void BuildParams::finish() const {
  std::vector<std::string> unknown;
  for (auto it = params_.begin(); it != params_.end(); ++it)
    if (!known_.count(it.key())) unknown.push_back(it.key());
  KVT_CHECK(unknown.empty(), USAGE,
            kind_ << " takes no build parameter " << join(unknown)
                  << " (it takes: " << join(std::vector<std::string>(known_.begin(), known_.end())) << ")");
}

}  // namespace kvtool
