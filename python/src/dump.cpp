// Binds kvtool::DumpWriter (lib/offline/include/kvtool/dump.h) as kvtool._kvtool._DumpWriter, the
// engine under python/kvtool/dump.py (DumpWriter, write_dump, from_cache).
//
// The Python side turns NumPy arrays and torch tensors into C-contiguous float32 arrays
// (python/kvtool/_arrays.py, no copy when they already are); this side takes them as they are,
// refusing anything else rather than converting, so that a float32 input never gets copied here.
// Every check formats/kvdump-v1.md makes on a dump is made before a byte is written (geometry and
// identity at construction, shapes and finiteness per layer, row datasets when set), with the
// reason the dump reader would give the same defect, so that a dump this writer commits is one
// `kvtool verify` accepts. The GIL is released around every check over the data and every HDF5 call.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bindings.h"
#include "kvtool/dump.h"
#include "kvtool/error.h"
#include "kvtool/half.h"
#include "kvtool/identity.h"

namespace kvtool::python {

namespace {

using F32Array = py::array_t<float, py::array::c_style>;

// A string entry of the identity dict the package passes (python/kvtool/dump.py fills defaults).
std::string id_str(const py::dict& d, const char* key) {
  KVT_CHECK(d.contains(key), USAGE, "identity has no \"" << key << "\"");
  py::handle h = d[key];
  KVT_CHECK(py::isinstance<py::str>(h), USAGE, "identity[\"" << key << "\"] must be a str");
  auto s = h.cast<std::string>();
  // HDF5 string attributes end at the first NUL: the dump would silently hold a shorter value.
  KVT_CHECK(s.find('\0') == std::string::npos, USAGE, "identity[\"" << key << "\"] contains a NUL character");
  return s;
}

int64_t id_int(const py::dict& d, const char* key) {
  KVT_CHECK(d.contains(key), USAGE, "identity has no \"" << key << "\"");
  py::handle h = d[key];
  KVT_CHECK(PyLong_Check(h.ptr()), USAGE, "identity[\"" << key << "\"] must be an int");
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  KVT_CHECK(overflow == 0, USAGE, "identity[\"" << key << "\"] does not fit in 64 bits");
  return static_cast<int64_t>(x);
}

// The identity checks quote the offending value; a caller's multi-megabyte string must not become
// a multi-megabyte exception message.
void check_identity_short(const DumpIdentity& id, const DumpGeometry& g, int64_t frontier) {
  try {
    check_dump_identity(id, g, frontier);
  } catch (const Error& e) {
    constexpr size_t kMax = 400;
    std::string m = e.what();
    if (m.size() <= kMax) throw;
    throw Error(e.reason(), m.substr(0, kMax) + "... (" + std::to_string(m.size()) + " characters)");
  }
}

// Whether `x` stays finite once stored as `t` (a finite float32 above 65504 becomes Inf in f16):
// the value the reader will see is what formats/kvdump-v1.md requires to be finite.
bool finite_as(DType t, float x) {
  switch (t) {
    case DType::f16:
      return (f32_to_f16(x) & 0x7c00u) != 0x7c00u;
    case DType::bf16:
      return (f32_to_bf16(x) & 0x7f80u) != 0x7f80u;
    default:
      return std::isfinite(x);
  }
}

// Index of the first of n values that is not finite once stored, or -1.
int64_t first_non_finite(DType t, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!finite_as(t, x[i])) return static_cast<int64_t>(i);
  return -1;
}

// A float32 C-contiguous, aligned, native-order array of exactly `shape`: what the package hands
// over. Anything else is refused (no silent copy, no conversion).
const float* f32_data(const py::array& a, const char* name, int64_t layer, const std::vector<int64_t>& shape) {
  KVT_CHECK(py::isinstance<F32Array>(a), USAGE,
            name << " must be a C-contiguous float32 array (kvtool.DumpWriter converts; _DumpWriter does not)");
  KVT_CHECK(reinterpret_cast<uintptr_t>(a.data()) % alignof(float) == 0, USAGE, name << " is not aligned");
  bool same = a.ndim() == static_cast<py::ssize_t>(shape.size());
  for (size_t i = 0; same && i < shape.size(); ++i) same = a.shape(static_cast<py::ssize_t>(i)) == shape[i];
  if (!same) {
    std::ostringstream got, want;
    for (py::ssize_t i = 0; i < a.ndim(); ++i) got << (i ? ", " : "") << a.shape(i);
    for (size_t i = 0; i < shape.size(); ++i) want << (i ? ", " : "") << shape[i];
    KVT_THROW(SHAPE_MISMATCH,
              name << " of layer " << layer << " has shape [" << got.str() << "], expected [" << want.str() << "]");
  }
  return static_cast<const float*>(a.data());
}

std::vector<int64_t> i64_vector(const py::array& a, const char* name) {
  KVT_CHECK((py::isinstance<py::array_t<int64_t, py::array::c_style>>(a)) && a.ndim() == 1, USAGE,
            name << " must be a 1-D C-contiguous int64 array");
  const auto* p = static_cast<const int64_t*>(a.data());
  return std::vector<int64_t>(p, p + a.shape(0));
}

class PyDumpWriter {
 public:
  PyDumpWriter(const std::string& path, int64_t layers, int64_t kv_heads, int64_t head_dim, int64_t tokens,
               int64_t q_tokens, const std::string& dtype, const py::dict& identity,
               const std::vector<int64_t>& q_to_kv_head, bool overwrite)
      : path_(path), overwrite_(overwrite) {
    // std::string keeps a NUL, open() would stop at it and create a different file.
    KVT_CHECK(path.find('\0') == std::string::npos, USAGE, "path contains a NUL character");
    spec_.geo.dtype = parse_dtype(dtype);
    spec_.geo.layers = layers;
    spec_.geo.kv_heads = kv_heads;
    spec_.geo.head_dim = head_dim;
    spec_.geo.tokens = tokens;
    spec_.geo.q_tokens = q_tokens;
    spec_.geo.q_heads = static_cast<int64_t>(q_to_kv_head.size());
    // The writer itself only asks for positive sizes; the reader's rules (check_dump_identity) are
    // checked here too, so that a bad identity fails now, not after the whole cache was written.
    KVT_CHECK(layers >= 1 && kv_heads >= 1 && head_dim >= 1 && tokens >= 1, SHAPE_MISMATCH,
              "layers, kv_heads, head_dim and tokens must be at least 1 (got " << layers << ", " << kv_heads << ", "
                                                                               << head_dim << ", " << tokens << ")");
    for (int64_t h : q_to_kv_head) {
      KVT_CHECK(h >= 0 && h < kv_heads && h < kMaxDumpHeads, BAD_HEAD_MAP,
                "q_to_kv_head entry " << h << " is not a kv head in [0, " << kv_heads << ")");
      spec_.id.q_to_kv_head.push_back(static_cast<int32_t>(h));
    }
    read_identity(identity);
    check_identity_short(spec_.id, spec_.geo, spec_.committed_frontier);
    added_.assign(static_cast<size_t>(layers), false);
    q_added_.assign(static_cast<size_t>(layers), false);
    py::gil_scoped_release nogil;
    check_no_output();
    writer_ = std::make_unique<DumpWriter>(path_, spec_, overwrite);
  }

  void add_layer(int64_t layer, const py::array& k, const py::array& v, const py::object& q) {
    const auto& g = spec_.geo;
    KVT_CHECK(layer >= 0 && layer < g.layers, USAGE, "layer " << layer << " is not in [0, " << g.layers << ")");
    const float* kp = f32_data(k, "k", layer, {g.kv_heads, g.tokens, g.head_dim});
    const float* vp = f32_data(v, "v", layer, {g.kv_heads, g.tokens, g.head_dim});
    const float* qp = nullptr;
    if (!q.is_none()) {
      KVT_CHECK(g.q_tokens > 0, USAGE, "q given but the writer was created with q_tokens=0 (no /kv/q)");
      KVT_CHECK(py::isinstance<py::array>(q), USAGE, "q must be a float32 array or None");
      qp = f32_data(py::reinterpret_borrow<py::array>(q), "q", layer, {g.q_heads, g.q_tokens, g.head_dim});
    }
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu_);
    check_open();
    KVT_CHECK(!added_[static_cast<size_t>(layer)], USAGE, "layer " << layer << " was already added");
    check_finite(layer, kp, vp, qp);
    const size_t slice = static_cast<size_t>(g.tokens * g.head_dim);
    for (int64_t h = 0; h < g.kv_heads; ++h) writer_->write_kv(layer, h, kp + h * slice, vp + h * slice);
    const size_t qslice = static_cast<size_t>(g.q_tokens * g.head_dim);
    if (qp)
      for (int64_t h = 0; h < g.q_heads; ++h) writer_->write_q(layer, h, qp + h * qslice);
    added_[static_cast<size_t>(layer)] = true;
    q_added_[static_cast<size_t>(layer)] = qp != nullptr;
  }

  void set_tokens(const py::array& a) {
    auto t = i64_vector(a, "tokens");
    KVT_CHECK(static_cast<int64_t>(t.size()) == spec_.geo.tokens, SHAPE_MISMATCH,
              "tokens has " << t.size() << " entries, the dump has T=" << spec_.geo.tokens << " rows");
    for (size_t i = 0; i < t.size(); ++i)  // /kv/tokens is int32 on disk (formats/kvdump-v1.md writer)
      KVT_CHECK(t[i] >= std::numeric_limits<int32_t>::min() && t[i] <= std::numeric_limits<int32_t>::max(), USAGE,
                "token id " << t[i] << " at row " << i << " does not fit in int32");
    std::lock_guard<std::mutex> lk(mu_);
    check_open();
    tokens_ = std::move(t);
  }

  void set_positions(const py::array& a) {
    auto p = i64_vector(a, "positions");
    KVT_CHECK(static_cast<int64_t>(p.size()) == spec_.geo.tokens, SHAPE_MISMATCH,
              "positions has " << p.size() << " entries, the dump has T=" << spec_.geo.tokens << " rows");
    for (size_t i = 1; i < p.size(); ++i)
      KVT_CHECK(p[i] > p[i - 1], BAD_ATTRIBUTE, "positions is not strictly increasing at row " << i);
    std::lock_guard<std::mutex> lk(mu_);
    check_open();
    positions_ = std::move(p);
  }

  void set_q_positions(const py::array& a) {
    auto p = i64_vector(a, "q_positions");
    KVT_CHECK(spec_.geo.q_tokens > 0, USAGE, "q_positions given but the writer was created with q_tokens=0");
    KVT_CHECK(static_cast<int64_t>(p.size()) == spec_.geo.q_tokens, SHAPE_MISMATCH,
              "q_positions has " << p.size() << " entries, expected q_tokens=" << spec_.geo.q_tokens);
    for (size_t i = 0; i < p.size(); ++i)
      KVT_CHECK(p[i] >= 0 && p[i] < spec_.geo.tokens, BAD_ATTRIBUTE,
                "q_positions[" << i << "] = " << p[i] << " is not a row in [0, " << spec_.geo.tokens << ")");
    std::lock_guard<std::mutex> lk(mu_);
    check_open();
    q_positions_ = std::move(p);
  }

  void commit() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu_);
    check_open();
    check_complete();
    check_no_output();
    if (spec_.geo.q_tokens > 0 && q_positions_.empty())  // documented default: the last T_q rows
      for (int64_t i = spec_.geo.tokens - spec_.geo.q_tokens; i < spec_.geo.tokens; ++i) q_positions_.push_back(i);
    try {
      if (spec_.geo.q_tokens > 0) writer_->write_q_positions(q_positions_);
      if (!tokens_.empty()) writer_->write_tokens(tokens_);
      if (!positions_.empty()) writer_->write_positions(positions_);
      writer_->commit();
    } catch (...) {
      writer_.reset();  // removes the temporary: a failed commit leaves nothing behind
      state_ = "failed";
      throw;
    }
    writer_.reset();
    state_ = "committed";
  }

  // Drops everything written so far; the path is left as it was. A no-op once committed.
  void abort() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(mu_);
    if (!writer_) return;
    writer_.reset();
    state_ = "aborted";
  }

  std::vector<int64_t> missing_layers() {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<int64_t> out;
    for (size_t l = 0; l < added_.size(); ++l)
      if (!added_[l]) out.push_back(static_cast<int64_t>(l));
    return out;
  }

  std::string state() {
    std::lock_guard<std::mutex> lk(mu_);
    return state_;
  }
  const std::string& path() const { return path_; }

 private:
  void read_identity(const py::dict& d) {
    auto& id = spec_.id;
    id.model_artifact_sha256 = id_str(d, "model_artifact_sha256");
    id.checkpoint_generation = id_int(d, "checkpoint_generation");
    id.adapter_set_sha256 = id_str(d, "adapter_set_sha256");
    id.position_contract = id_str(d, "position_contract");
    id.rope_config = id_str(d, "rope_config");
    id.tenant_namespace = id_str(d, "tenant_namespace");
    id.namespace_generation = id_int(d, "namespace_generation");
    id.request_generation = id_int(d, "request_generation");
    id.cache_generation = id_int(d, "cache_generation");
    id.publication_generation = id_int(d, "publication_generation");
    id.representation = id_str(d, "representation");
    spec_.committed_frontier = id_int(d, "committed_frontier");
    spec_.generator = id_str(d, "generator");
    spec_.synthetic = id_int(d, "synthetic") != 0;
  }

  void check_open() const { KVT_CHECK(writer_ != nullptr, USAGE, "the DumpWriter is " << state_); }

  // overwrite=False: nothing at the path, not even a dangling symlink (which the library's stat()
  // check follows, and the rename would replace). Checked again at commit, because a notebook
  // writer may stay open for minutes while another process creates the file; the remaining
  // window is the commit's own fsync and rename.
  void check_no_output() const {
    struct stat st {};
    KVT_CHECK(overwrite_ || lstat(path_.c_str(), &st) != 0, OUTPUT_EXISTS,
              "'" << path_ << "' already exists; refusing to overwrite it (overwrite=False)");
  }

  // Rows [0, committed_frontier) of K and V and every query must stay finite in the dump dtype
  // (formats/kvdump-v1.md, "Values"; the reader refuses them with NON_FINITE); rows beyond the
  // frontier are not committed history and may hold anything.
  void check_finite(int64_t layer, const float* k, const float* v, const float* q) const {
    const auto& g = spec_.geo;
    const size_t rows = static_cast<size_t>(spec_.committed_frontier), d = static_cast<size_t>(g.head_dim);
    const size_t slice = static_cast<size_t>(g.tokens) * d;
    for (int64_t h = 0; h < g.kv_heads; ++h)
      for (const auto& [name, x] : {std::pair{"k", k}, std::pair{"v", v}}) {
        int64_t i = first_non_finite(g.dtype, x + static_cast<size_t>(h) * slice, rows * d);
        KVT_CHECK(i < 0, NON_FINITE,
                  name << " of layer " << layer << ", kv head " << h << " has a value that is not finite as "
                       << dtype_name(g.dtype) << " at committed row " << i / g.head_dim);
      }
    if (!q) return;
    const size_t qn = static_cast<size_t>(g.q_heads * g.q_tokens) * d;
    int64_t i = first_non_finite(g.dtype, q, qn);
    KVT_CHECK(i < 0, NON_FINITE,
              "q of layer " << layer << ", query head " << i / (g.q_tokens * g.head_dim)
                            << " has a value that is not finite as " << dtype_name(g.dtype) << " at query "
                            << (i / g.head_dim) % g.q_tokens);
  }

  // Every layer added (an unwritten chunk would make the reader refuse the dump) and, with
  // queries, every layer's queries.
  void check_complete() const {
    std::ostringstream missing, missing_q;
    int n = 0, nq = 0;
    // Up to kListed numbers, then a count: 4096 missing layers must not make a 20 KB message.
    constexpr int kListed = 16;
    auto note = [](std::ostringstream& os, int& count, size_t l) {
      if (count < kListed) os << (count ? ", " : "") << l;
      ++count;
    };
    for (size_t l = 0; l < added_.size(); ++l) {
      if (!added_[l]) note(missing, n, l);
      if (added_[l] && spec_.geo.q_tokens > 0 && !q_added_[l]) note(missing_q, nq, l);
    }
    if (n > kListed) missing << ", ... (" << n << " layers)";
    if (nq > kListed) missing_q << ", ... (" << nq << " layers)";
    KVT_CHECK(n == 0, USAGE, "cannot commit: layer(s) " << missing.str() << " were never added");
    KVT_CHECK(nq == 0, USAGE,
              "cannot commit: the writer has q_tokens=" << spec_.geo.q_tokens << " but layer(s) " << missing_q.str()
                                                        << " were added without q");
    // The default q_positions, the last q_tokens rows, exist only when q_tokens <= T.
    KVT_CHECK(spec_.geo.q_tokens <= spec_.geo.tokens || !q_positions_.empty(), USAGE,
              "cannot commit: q_tokens=" << spec_.geo.q_tokens << " exceeds T=" << spec_.geo.tokens
                                         << ", so the default q_positions (the last q_tokens rows) do not exist; "
                                            "call set_q_positions");
  }

  std::string path_;
  bool overwrite_;
  DumpSpec spec_;
  std::unique_ptr<DumpWriter> writer_;
  std::mutex mu_;  // the GIL is released during writes: two threads may share one writer
  std::vector<bool> added_, q_added_;
  std::vector<int64_t> tokens_, positions_, q_positions_;
  std::string state_ = "open";
};

}  // namespace

void bind_dump(py::module_& m) {
  py::class_<PyDumpWriter>(
      m, "_DumpWriter", "Engine of kvtool.DumpWriter: takes only C-contiguous float32 arrays; use kvtool.DumpWriter.")
      .def(py::init<const std::string&, int64_t, int64_t, int64_t, int64_t, int64_t, const std::string&,
                    const py::dict&, const std::vector<int64_t>&, bool>(),
           py::arg("path"), py::arg("layers"), py::arg("kv_heads"), py::arg("head_dim"), py::arg("tokens"),
           py::arg("q_tokens"), py::arg("dtype"), py::arg("identity"), py::arg("q_to_kv_head"), py::arg("overwrite"))
      .def("add_layer", &PyDumpWriter::add_layer, py::arg("layer"), py::arg("k"), py::arg("v"),
           py::arg("q") = py::none())
      .def("set_tokens", &PyDumpWriter::set_tokens)
      .def("set_positions", &PyDumpWriter::set_positions)
      .def("set_q_positions", &PyDumpWriter::set_q_positions)
      .def("commit", &PyDumpWriter::commit)
      .def("abort", &PyDumpWriter::abort)
      .def("missing_layers", &PyDumpWriter::missing_layers)
      .def_property_readonly("state", &PyDumpWriter::state)
      .def_property_readonly("path", [](const PyDumpWriter& w) { return py::bytes(w.path()); });
}

}  // namespace kvtool::python
