// kvtool._kvtool.kind_params(): each kind's build parameters from its table
// (kvtool/kinds/KIND_params.def), from which python/kvtool/reports.py writes kvtool.build's
// docstring, so that it names what the builders take, with the command line's help.
#include <pybind11/stl.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "bindings.h"
#include "kvtool/kinds/clusterkv.h"
#include "kvtool/kinds/lsh.h"
#include "kvtool/kinds/pq.h"
#include "kvtool/kinds/squeeze.h"

namespace kvtool::python {

namespace {

template <typename T>
const char* type_label() {
  if constexpr (std::is_same_v<T, std::string>) return "str";
  if constexpr (std::is_floating_point_v<T>) return "float";
  return "int";
}

std::string one_of(std::initializer_list<const char*> choices) {
  std::string s;
  for (const char* c : choices) s += (s.empty() ? "\"" : " | \"") + std::string(c) + "\"";
  return s;
}

py::dict row(const char* name, const char* type, py::object def, const std::string& bounds, const char* flag,
             const char* help) {
  py::dict d;
  d["name"] = name;
  d["type"] = type;
  d["default"] = def;
  d["bounds"] = bounds;
  d["flag"] = flag;
  d["help"] = help;
  return d;
}

// A text row's default: its command-line text, else the field's (a list), none for a file's bytes.
template <typename T>
py::object text_default(const char* text, const char* source, const T& field) {
  if (*text) return py::str(text);
  if (std::string(source) == "bytes") return py::none();
  return py::cast(field);
}

// What a text row takes from Python: a string, a list of numbers (or their text), a file's path.
const char* source_type(const std::string& source) {
  return source == "text" ? "str" : source == "list" ? "list" : "path";
}

// The table's columns as Python values: bounds as text, text rows typed as their Python value.
#define KVTOOL_RANGE(lo, hi) std::string(#lo ".." #hi)
#define KVTOOL_MIN(lo) std::string(">= " #lo)
#define KVTOOL_ABOVE(lo, hi) std::string("(" #lo ", " #hi "]")
#define KVTOOL_ONE_OF(...) one_of({__VA_ARGS__})
#define KVTOOL_NOTE(text) std::string(text)
#define ROW_PARAM(kind, name, type, def, bounds, manifest, cli, flag, help) \
  rows.append(row(#name, type_label<type>(), py::cast(P{}.name), bounds, flag, help));
#define ROW_TEXT(kind, name, type, def, text_def, source, bounds, manifest, cli, flag, help) \
  rows.append(row(#name, source_type(#source), text_default(text_def, #source, P{}.name), bounds, flag, help));

py::list pq_rows() {
  using P = PqParams;
  py::list rows;
#define KVTOOL_PARAM ROW_PARAM
#define KVTOOL_PARAM_TEXT ROW_TEXT
#include "kvtool/kinds/pq_params.def"
  return rows;
}

py::list clusterkv_rows() {
  using P = ClusterKvParams;
  py::list rows;
#define KVTOOL_PARAM ROW_PARAM
#define KVTOOL_PARAM_TEXT ROW_TEXT
#include "kvtool/kinds/clusterkv_params.def"
  return rows;
}

py::list lsh_rows() {
  using P = LshParams;
  py::list rows;
#define KVTOOL_PARAM ROW_PARAM
#define KVTOOL_PARAM_TEXT ROW_TEXT
#include "kvtool/kinds/lsh_params.def"
  return rows;
}

py::list squeeze_rows() {
  using P = SqueezeParams;
  py::list rows;
#define KVTOOL_PARAM ROW_PARAM
#define KVTOOL_PARAM_TEXT ROW_TEXT
#include "kvtool/kinds/squeeze_params.def"
  return rows;
}

// [(kind, [row dict, ...]), ...] in kvtool/kinds.def's order.
py::list kind_params() {
  py::list out;
#define KVTOOL_KIND(name, about) out.append(py::make_tuple(#name, name##_rows()));
#include "kvtool/kinds.def"
#undef KVTOOL_KIND
  return out;
}

}  // namespace

void bind_kind_params(py::module_& m) {
  m.def("kind_params", &kind_params,
        "[(kind, [{name, type, default, bounds, flag, help}, ...]), ...]: each kind's build parameters, from its "
        "table kvtool/kinds/KIND_params.def.");
}

}  // namespace kvtool::python
