// Placeholder: filled by the pool bindings.
#include "bindings.h"

namespace kvtool::python {

void bind_pool(py::module_&) {}

}  // namespace kvtool::python
