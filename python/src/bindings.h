// The pybind11 extension `kvtool._kvtool` (python/README.md): thin bindings over libkvtool. Each
// file binds one area; module.cpp calls them in order. The Python package python/kvtool/ wraps
// this module (dicts from JSON, NumPy/torch conversion, from_cache).
//
// Conventions every binding follows:
// - Errors: kvtool::Error (and any other C++ exception, via error_from_exception) becomes
//   kvtool.Error (or its subclass for the exit class) with .reason and .exit_code (errors.cpp).
// - Reports cross as JSON text (the same text as `--json`); the package turns them into dicts.
// - Long calls release the GIL (py::gil_scoped_release) around the library call only, never while
//   touching Python objects.
#pragma once
#include <pybind11/pybind11.h>

namespace kvtool::python {

namespace py = pybind11;

void bind_errors(py::module_& m);       // errors.cpp: exception translation, reasons()
void bind_dump(py::module_& m);         // dump.cpp: DumpWriter, write_dump
void bind_reports(py::module_& m);      // reports.cpp: inspect, verify, build, eval, query
void bind_pool(py::module_& m);         // pool.cpp: Pool, Lease
void bind_paged(py::module_& m);        // paged.cpp: the paged-cache planner and fp8 decode of gather_paged
void bind_kind_params(py::module_& m);  // kind_params.cpp: each kind's build parameter table
void bind_models(py::module_& m);       // models.cpp: dump_gguf (kvtool dump --gguf)

}  // namespace kvtool::python
