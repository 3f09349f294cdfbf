// A kind's parameter table (kvtool/kinds/KIND_params.def, format in kvtool/kinds/param_table.h)
// expanded into the library's two readings of the parameters: the builder from JSON
// (KIND_params.cpp) and the params the builder records in the manifest (KIND_build.cpp). Offline
// half only (kvtool/kind_builders.h's BuildParams).
//
// The builder from JSON, with BuildParams `in` and the params struct `p` in scope:
//   #define KVTOOL_PARAM KVTOOL_JSON_GET            every row read (text rows into a local text)
//   #define KVTOOL_PARAM_TEXT KVTOOL_JSON_GET_TEXT
//   #include "kvtool/kinds/KIND_params.def"
//   in.finish();                                     no unknown name
//   #define KVTOOL_PARAM_TEXT KVTOOL_JSON_PARSE_TEXT  each given text parsed as the command line's
//   #include "kvtool/kinds/KIND_params.def"
// The manifest params, with json `j` and the params `p_` in scope (the builder's params()):
//   #define KVTOOL_PARAM KVTOOL_MANIFEST_PARAM
//   #define KVTOOL_PARAM_TEXT KVTOOL_MANIFEST_TEXT_PARAM
// writes every `recorded` row; the builder writes its `custom` rows itself.
#pragma once
#include <string>

#include "kvtool/kind_builders.h"
#include "kvtool/kinds/kmeans_options.h"
#include "kvtool/kinds/param_table.h"

namespace kvtool {

// The k-means options of the clustering kinds (clusterkv, squeeze), read before in.finish(); the
// method's text is returned to be parsed after it (parse_kmeans_method), as the command line does.
inline std::string read_kmeans_options(BuildParams& in, KmeansOptions& k) {
  std::string method = "auto";
  in.get("kmeans", method);
  in.get("kmeans_branching", k.branching);
  in.get("kmeans_leaf_clusters", k.leaf_clusters);
  return method;
}

}  // namespace kvtool

#define KVTOOL_JSON_GET(kind, name, type, def, ...) in.get(#name, p.name);
#define KVTOOL_JSON_GET_TEXT(kind, name, type, def, text_def, source, ...) \
  std::string name##_text = text_def;                                      \
  KVTOOL_JSON_##source(#name, name##_text);
#define KVTOOL_JSON_text(key, text) in.get(key, text)
#define KVTOOL_JSON_list(key, text) in.get_list_text(key, text)
#define KVTOOL_JSON_bytes(key, text) in.get_bytes(key, text)
// Given (even as an empty list), a text is parsed and checked as the command line's value.
#define KVTOOL_JSON_PARSE_TEXT(kind, name, ...) \
  if (in.has(#name)) p.name = kind##_parse_##name(name##_text, #name);

#define KVTOOL_MANIFEST_PARAM(kind, name, type, def, bounds, manifest, ...) KVTOOL_MANIFEST_##manifest(name)
#define KVTOOL_MANIFEST_TEXT_PARAM(kind, name, type, def, text_def, source, bounds, manifest, ...) \
  KVTOOL_MANIFEST_##manifest(name)
#define KVTOOL_MANIFEST_recorded(name) j[#name] = p_.name;
#define KVTOOL_MANIFEST_custom(name)
