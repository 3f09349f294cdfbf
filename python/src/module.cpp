// Entry point of the extension module kvtool._kvtool (see bindings.h).
#include "bindings.h"

PYBIND11_MODULE(_kvtool, m) {
  m.doc() = "libkvtool bindings; use the kvtool package, not this module directly";
  m.attr("__version__") = KVTOOL_VERSION;
  kvtool::python::bind_errors(m);
  kvtool::python::bind_dump(m);
  kvtool::python::bind_reports(m);
  kvtool::python::bind_pool(m);
  kvtool::python::bind_paged(m);
  kvtool::python::bind_kind_params(m);
  kvtool::python::bind_models(m);
}
