// Placeholder: filled by the dump bindings.
#include "bindings.h"

namespace kvtool::python {

void bind_dump(py::module_&) {}

}  // namespace kvtool::python
