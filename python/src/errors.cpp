// Maps every C++ exception leaving a binding to kvtool.Error (python/kvtool/errors.py): the class
// for the reason's exit class, with .reason (the stable name of kvtool/reasons.def) and
// .exit_code (what the command-line tools would exit with).
#include <pybind11/stl.h>

#include <cstring>

#include "bindings.h"
#include "kvtool/error.h"

namespace kvtool::python {

namespace {

const char* class_for(ExitCode e) {
  switch (e) {
    case ExitCode::usage:
      return "UsageError";
    case ExitCode::io:
      return "IOError";
    case ExitCode::internal:
      return "InternalError";
    default:
      return "InvalidInputError";
  }
}

// Raises the Python exception for `err` (called with the GIL held, inside the translator).
void raise_error(const Error& err) {
  py::module_ errors = py::module_::import("kvtool.errors");
  py::object cls = errors.attr(class_for(err.exit_code()));
  // Messages quote paths, which need not be UTF-8: undecodable bytes become \xNN escapes rather than
  // a UnicodeDecodeError in place of the real error.
  auto message =
      py::reinterpret_steal<py::str>(PyUnicode_DecodeUTF8(err.what(), std::strlen(err.what()), "backslashreplace"));
  py::object exc = cls(message, err.reason_name(), static_cast<int>(err.exit_code()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

}  // namespace

void bind_errors(py::module_& m) {
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const py::error_already_set&) {
      throw;  // a Python exception raised inside a callback stays what it was
    } catch (const py::builtin_exception&) {
      throw;  // pybind11's own (TypeError, ValueError, ...) for argument conversion
    } catch (...) {
      raise_error(error_from_exception(std::current_exception()));
    }
  });
  m.def(
      "reasons",
      [] {
        std::vector<std::tuple<std::string, int, std::string>> out;
        for (const auto& r : all_reasons()) out.emplace_back(r.code, static_cast<int>(r.exit), r.meaning);
        return out;
      },
      "Every reason code as (name, exit code, meaning), in the order of `kvtool reasons`.");
}

}  // namespace kvtool::python
