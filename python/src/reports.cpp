// Placeholder: filled by the reports bindings.
#include "bindings.h"

namespace kvtool::python {

void bind_reports(py::module_&) {}

}  // namespace kvtool::python
