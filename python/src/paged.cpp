// Paged caches for kvtool.gather_paged (python/kvtool/paged.py): the library's layout parser, its
// paged-cache slot planner with every refusal (kvtool/paged_layout.h) and its fp8 decode
// (kvtool/tensor_file.h), so that Python and `kvtool import` share one implementation. The
// gathering itself (NumPy indexing of the caller's arrays) stays in Python.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.h"
#include "kvtool/error.h"
#include "kvtool/paged_layout.h"
#include "kvtool/tensor_file.h"

namespace kvtool::python {

namespace {

// `entries`: the first min(row_entries, paged_entries_needed()) entries of the request's row.
py::array_t<int64_t> token_slots(bool blocks, int64_t per, int64_t units, bool by_block,
                                 const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& entries,
                                 int64_t row_entries, int64_t num_tokens, const std::string& table) {
  KVT_CHECK(entries.ndim() == 1, USAGE, "the entries of " << table << " must be one row");
  const std::vector<int64_t> e(entries.data(), entries.data() + entries.size());
  const PagedCache cache{blocks, per, units, "the cache"};
  const std::vector<int64_t> slots = paged_token_slots(cache, by_block, e, row_entries, num_tokens, table);
  py::array_t<int64_t> out(static_cast<py::ssize_t>(slots.size()));
  std::copy(slots.begin(), slots.end(), out.mutable_data());
  return out;
}

// The 256 values of fp8 codes of `kind` ("e4m3" | "e5m2"), unscaled.
py::array_t<float> fp8_table(const std::string& kind) {
  KVT_CHECK(kind == "e4m3" || kind == "e5m2", USAGE, "fp8 must be 'e4m3' or 'e5m2', got '" << excerpt(kind) << "'");
  const TensorType t = kind == "e4m3" ? TensorType::f8_e4m3 : TensorType::f8_e5m2;
  py::array_t<float> out(256);
  for (int c = 0; c < 256; ++c) out.mutable_data()[c] = decode_fp8(static_cast<uint8_t>(c), t);
  return out;
}

}  // namespace

void bind_paged(py::module_& m) {
  m.def(
      "parse_cache_layout", [](const std::string& text) { return parse_cache_layout(text, true, true, "layout"); },
      py::arg("layout"),
      "The axes of a cache layout in storage order, checked as `kvtool import --layout` checks them.");
  m.def(
      "paged_entries_needed",
      [](bool blocks, int64_t per, int64_t units, bool by_block, int64_t num_tokens) {
        return paged_entries_needed(PagedCache{blocks, per, units, "the cache"}, by_block, num_tokens);
      },
      py::arg("blocks"), py::arg("per"), py::arg("units"), py::arg("by_block"), py::arg("num_tokens"),
      "Entries of a block table (by_block) or slot mapping row the request's tokens need.");
  m.def("paged_token_slots", &token_slots, py::arg("blocks"), py::arg("per"), py::arg("units"), py::arg("by_block"),
        py::arg("entries"), py::arg("row_entries"), py::arg("num_tokens"), py::arg("table"),
        "The slot of each token of a request in a paged cache, with every refusal of `kvtool import`.");
  m.def("fp8_table", &fp8_table, py::arg("kind"), "The 256 float32 values of OCP fp8 codes (e4m3 or e5m2).");
}

}  // namespace kvtool::python
