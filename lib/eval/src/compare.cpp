// `kvtool compare`: the artifacts' bindings and the options checked first, then evaluate() per
// artifact over its kind's curve, and the oracle points gathered from every setting.
#include "kvtool/compare.h"

#include <algorithm>
#include <set>

#include "kvtool/error.h"
#include "kvtool/sha256.h"
#include "kvtool/source_binding.h"

namespace kvtool {

namespace {

json identity(const ArtifactReader& art) {
  const json& m = art.manifest();
  return {{"path", art.path()},
          {"kind", art.kind()},
          {"file_bytes", art.file_size()},
          {"manifest_sha256", to_hex(art.manifest_digest())},
          {"index_generation", m.value("index_generation", json(1))},
          {"params", m.value("params", json::object())},
          {"coverage_end", art.source().coverage_end},
          {"content_digest", art.source().content_digest}};
}

// Every named option must be taken by some artifact's kind: a knob that would change nothing is a
// mistake worth a message (eval, with one artifact, ignores the other kinds' flags instead).
void check_named_options(const std::vector<const KindSpec*>& kinds, const CompareOptions& opt) {
  for (const auto& [name, values] : opt.sweep) {
    std::set<std::string> given;
    bool taken = false;
    for (const KindSpec* k : kinds) {
      given.insert(k->name);
      for (const auto& o : k->query_options) taken = taken || o.name == name;
    }
    std::string list;
    for (const auto& k : given) list += (list.empty() ? "" : ", ") + k;
    KVT_CHECK(taken, USAGE, "no artifact compared takes the option '" << name << "' (kinds: " << list << ")");
  }
}

}  // namespace

std::map<std::string, std::vector<std::string>> compare_sweep(const ArtifactReader& art, const CompareOptions& opt) {
  const KindSpec& kind = validate_kind(art);
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& o : kind.query_options) {
    if (auto it = opt.sweep.find(o.name); it != opt.sweep.end() && !it->second.empty())
      out[o.name] = it->second;
    else if (kind.curve_sweep)
      out[o.name] = kind.curve_sweep(art, o.name);
    if (auto it = out.find(o.name); it != out.end() && it->second.empty()) out.erase(it);  // eval's default
  }
  return out;
}

CompareReport compare(const std::vector<const ArtifactReader*>& arts, const DumpReader& dump,
                      const CompareOptions& opt) {
  KVT_CHECK(!arts.empty(), USAGE, "compare needs at least one artifact");
  std::vector<const KindSpec*> kinds;
  for (const ArtifactReader* a : arts) {
    try {
      kinds.push_back(&validate_kind(*a));
      check_source_fields(a->source(), dump);
    } catch (const Error& e) {
      throw Error(e.reason(), "artifact " + a->path() + ": " + e.what());
    }
  }
  check_named_options(kinds, opt);
  std::vector<EvalOptions> per_artifact;
  for (const ArtifactReader* a : arts) {  // every option value parsed before any evaluation
    per_artifact.push_back(opt);
    per_artifact.back().sweep = compare_sweep(*a, opt);
    try {
      check_eval_settings(*a, per_artifact.back());
    } catch (const Error& e) {
      throw Error(e.reason(), "artifact " + a->path() + ": " + e.what());
    }
  }
  CompareReport rep;
  rep.source = dump.path();
  for (size_t i = 0; i < arts.size(); ++i) {
    const ArtifactReader* a = arts[i];
    const EvalOptions& eo = per_artifact[i];
    try {
      rep.artifacts.push_back({identity(*a), evaluate(*a, dump, eo)});
    } catch (const Error& e) {
      throw Error(e.reason(), "artifact " + a->path() + ": " + e.what());
    }
  }
  for (size_t i = 0; i < rep.artifacts.size(); ++i)
    for (const auto& s : rep.artifacts[i].report.settings)
      rep.oracle.push_back({s.overall.selected_fraction_mean, s.overall.oracle_retained_mass_mean, i, s.label});
  std::stable_sort(rep.oracle.begin(), rep.oracle.end(), [](const OraclePoint& x, const OraclePoint& y) {
    return x.selected_fraction < y.selected_fraction;
  });
  return rep;
}

json CompareReport::to_json() const {
  json as = json::array(), os = json::array();
  for (const auto& a : artifacts) as.push_back({{"identity", a.identity}, {"eval", a.report.to_json()}});
  for (const auto& o : oracle)
    os.push_back({{"selected_fraction_mean", o.selected_fraction},
                  {"oracle_retained_mass_mean", o.retained_mass},
                  {"artifact", o.artifact},
                  {"setting", o.setting}});
  return {{"schema_version", kJsonSchemaVersion}, {"source", source}, {"artifacts", as}, {"oracle", os}};
}

}  // namespace kvtool
