// Index kind builders by name, from JSON parameters: what a caller without a command line (the
// Python package's kvtool.build(kind, dump, out, **params)) uses in place of the tools' options.
// Each kind fills its params struct from the JSON object in its own folder
// (lib/kinds/KIND/KIND_params.cpp); the names are the long options of `kvtool build KIND` with
// '_' for '-' (pq: subspaces, bits, iters, max_points_per_centroid). The builder equals the one
// the command line makes for the same options, so the artifacts are byte-identical.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "kvtool/builder.h"
#include "kvtool/json.h"

namespace kvtool {

// The builder of `kind` with `params` (a JSON object; absent names take the kind's defaults).
// USAGE for an unknown kind, a name the kind does not take, or a value of the wrong type.
std::unique_ptr<KindBuilder> make_builder(const std::string& kind, const json& params);
// The kinds make_builder knows, in the order of `kvtool build`'s list.
std::vector<std::string> builder_kinds();

// Strict reads of one kind's parameter object: each get() marks its name as known; finish()
// rejects any other name (USAGE naming it and the known ones), so a misspelt parameter is never
// silently ignored.
class BuildParams {
 public:
  BuildParams(std::string kind, const json& params);  // USAGE unless params is an object (or null)
  bool has(const char* name) const;
  void get(const char* name, int64_t& out);      // an integer
  void get(const char* name, double& out);       // a finite number
  void get(const char* name, std::string& out);  // a string
  // Bytes (a JSON binary value): data the caller read from a file for the kind, as squeeze's
  // calibration_queries (the library opens no file named in parameters).
  void get_bytes(const char* name, std::string& out);
  // A list of numbers as the comma-separated text the kind's option parser reads ("0.5,0.7"), or a
  // string given as such: the kind then parses and checks it exactly as the command line's value.
  void get_list_text(const char* name, std::string& out);
  void finish() const;

 private:
  const json* find(const char* name);
  std::string kind_;
  json params_;
  std::set<std::string> known_;
};

// The per-kind halves (lib/kinds/KIND/KIND_params.cpp), one per line of kvtool/kinds.def.
#define KVTOOL_KIND(name, about) std::unique_ptr<KindBuilder> make_##name##_builder(const json& params);
#include "kvtool/kinds.def"
#undef KVTOOL_KIND

}  // namespace kvtool
