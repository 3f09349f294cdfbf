// kvtool.Pool and kvtool.Lease (python/kvtool/pool.py wraps these): kvtool::Pool
// (lib/runtime/include/kvtool/pool.h) with receipts as the JSON text of the C++ to_json() and
// candidates/scores as arrays. Publishing, retiring and queries release the GIL.
#include <pybind11/stl.h>

#include <memory>
#include <optional>

#include "bindings.h"
#include "kvtool/device.h"
#include "kvtool/pool.h"
#include "receipts.h"

namespace kvtool::python {

namespace {

// Key rows for kinds whose receipts need them (lsh): [E, d] (the query's kv head's rows) or
// [kv_heads, E, d] (the rows of every kv head; each query head takes its kv head's).
struct KeysArg {
  std::optional<FloatArray> a;
  KeyRows for_head(const ArtifactReader& r, int64_t q_head) const {
    const auto& src = r.source();
    if (!a) return {};
    const int64_t nd = a->ndim();
    KVT_CHECK(nd == 2 || nd == 3, USAGE, "keys must be [E, d] or [kv_heads, E, d], got " << nd << " dimensions");
    const int64_t rows = a->shape(nd - 2), d = a->shape(nd - 1);
    KVT_CHECK(d == src.geo.head_dim && rows >= src.coverage_end, USAGE,
              "keys must hold at least the " << src.coverage_end << " covered rows of head dim " << src.geo.head_dim);
    int64_t head = 0;
    if (nd == 3) {
      KVT_CHECK(q_head >= 0 && q_head < static_cast<int64_t>(src.id.q_to_kv_head.size()), USAGE,
                "q_head " << q_head << " is outside 0-" << src.id.q_to_kv_head.size() - 1);
      head = src.id.q_to_kv_head[static_cast<size_t>(q_head)];
      KVT_CHECK(a->shape(0) == src.geo.kv_heads, USAGE,
                "keys [kv_heads, E, d] must have " << src.geo.kv_heads << " kv heads");
    }
    return KeyRows{a->data() + head * rows * d, rows, d};
  }
};

class PyLease {
 public:
  explicit PyLease(Lease l) : l_(std::move(l)) {}
  const Lease& get() const {
    KVT_CHECK(static_cast<bool>(l_), USAGE, "this lease was released; acquire a new one");
    return l_;
  }
  void release() { l_ = Lease(); }
  bool held() const { return static_cast<bool>(l_); }

  py::tuple query(int64_t layer, int64_t q_head, const FloatArray& q, int64_t position,
                  std::optional<FloatArray> keys_array, const QuerySettings& settings) const {
    const KeysArg keys{std::move(keys_array)};
    const Lease l = get();  // a copy: another thread may release() this lease while the query runs
    const std::vector<float> v = vector_values(q, "q");
    check_dim(v, l.artifact().source().geo.head_dim, "q");
    const KeyRows k = keys.for_head(l.artifact(), q_head);
    CandidateReceipt rc;
    {
      py::gil_scoped_release nogil;
      rc = l.query(layer, q_head, v.data(), position, *l.params(settings), keys.a ? &k : nullptr);
    }
    return receipt_tuple(rc);
  }

  py::list query_batch(int64_t layer, const std::vector<int64_t>& q_heads, const FloatArray& batch, int64_t position,
                       std::optional<FloatArray> keys_array, const QuerySettings& settings) const {
    const KeysArg keys{std::move(keys_array)};
    const Lease l = get();  // a copy: another thread may release() this lease while the query runs
    const int64_t dim = l.artifact().source().geo.head_dim;
    KVT_CHECK(batch.ndim() == 2 && batch.shape(1) == dim, USAGE,
              "Q must be [n, " << dim << "] (one query vector per row)");
    KVT_CHECK(static_cast<int64_t>(q_heads.size()) == batch.shape(0), USAGE,
              "q_heads has " << q_heads.size() << " heads for " << batch.shape(0) << " rows of Q");
    std::vector<KeyRows> k;
    for (int64_t h : q_heads) k.push_back(keys.for_head(l.artifact(), h));
    const float* rows = batch.data();
    check_finite(rows, batch.shape(0) * dim, "Q");
    std::vector<CandidateReceipt> out(q_heads.size());
    {
      py::gil_scoped_release nogil;
      const auto params = l.params(settings);
      for (size_t i = 0; i < q_heads.size(); ++i)
        out[i] = l.query(layer, q_heads[i], rows + static_cast<int64_t>(i) * dim, position, *params,
                         keys.a ? &k[i] : nullptr);
    }
    py::list answers;
    for (const auto& rc : out) answers.append(receipt_tuple(rc));
    return answers;
  }

  // The batched call (Lease::query_batch): candidates of every row of Q into [n, capacity] arrays
  // (ids padded with -1, scores with 0), their counts, and inclusion probabilities when keys
  // [kv_heads, E, d] are given (padded with 0; None without keys).
  py::tuple select(int64_t layer, const std::vector<int64_t>& q_heads, const FloatArray& batch,
                   const std::vector<int64_t>& positions, int64_t capacity, int threads,
                   std::optional<FloatArray> keys_array, const QuerySettings& settings, uintptr_t stream) const {
    const Lease l = get();  // a copy: another thread may release() this lease while the query runs
    const auto& src = l.artifact().source();
    const int64_t dim = src.geo.head_dim, n = static_cast<int64_t>(q_heads.size());
    KVT_CHECK(batch.ndim() == 2 && batch.shape(1) == dim, USAGE,
              "Q must be [n, " << dim << "] (one query vector per row)");
    KVT_CHECK(n == batch.shape(0) && positions.size() == q_heads.size(), USAGE,
              "q_heads and positions need one entry per row of Q (" << batch.shape(0) << " rows, " << n << " heads, "
                                                                    << positions.size() << " positions)");
    if (capacity < 0) capacity = src.coverage_end;  // room for every candidate
    KVT_CHECK(capacity <= src.coverage_end, USAGE,
              "capacity must be in 0.." << src.coverage_end << " (the covered rows)");
    check_finite(batch.data(), n * dim, "Q");
    std::vector<KeyRows> kr;
    if (keys_array) {
      KVT_CHECK(keys_array->ndim() == 3, USAGE, "keys for a batch must be [kv_heads, E, d]");
      const KeysArg keys{keys_array};
      for (int64_t h = 0; h < src.geo.kv_heads; ++h) {
        const KeyRows first = keys.for_head(l.artifact(), 0);  // checks the shape
        kr.push_back({first.data + h * first.rows * first.d, first.rows, first.d});
      }
    }
    py::array_t<int64_t> ids({n, capacity}), counts(n);
    py::array_t<float> scores({n, capacity});
    py::array_t<double> incl({n, keys_array ? capacity : int64_t{0}});
    std::fill(ids.mutable_data(), ids.mutable_data() + n * capacity, -1);
    std::fill(scores.mutable_data(), scores.mutable_data() + n * capacity, 0.f);
    std::fill(incl.mutable_data(), incl.mutable_data() + incl.size(), 0.0);
    {
      py::gil_scoped_release nogil;
      const auto params = l.params(settings);
      const QueryBatch b{layer,
                         n,
                         q_heads.data(),
                         batch.data(),
                         positions.data(),
                         kr.empty() ? nullptr : kr.data(),
                         reinterpret_cast<void*>(stream)};
      l.query_batch(b, *params,
                    {capacity, ids.mutable_data(), counts.mutable_data(), scores.mutable_data(),
                     keys_array ? incl.mutable_data() : nullptr},
                    threads);
    }
    return py::make_tuple(ids, scores, counts, keys_array ? py::object(incl) : py::none());
  }

 private:
  Lease l_;
};

std::unique_ptr<Pool> make_pool(int64_t host_budget, int64_t device_budget, bool device, int64_t batch_queries) {
  KVT_CHECK(host_budget > 0 && device_budget >= 0, USAGE, "host_budget must be > 0 and device_budget >= 0");
  PoolOptions o;
  o.host_budget = host_budget;
  o.device_budget = device_budget;
  o.device_batch_queries = batch_queries;
  if (device) {
    o.device = make_device_backend();  // nullptr unless a device tier (cuda/) is linked in
    KVT_CHECK(o.device != nullptr, DEVICE_UNAVAILABLE,
              "device=True: no usable CUDA device (or this kvtool module was built without CUDA)");
  }
  return std::make_unique<Pool>(std::move(o));
}

std::string publish(Pool& p, const std::string& key, const std::string& artifact, const std::string& expected,
                    const std::string& tenant, const std::vector<std::string>& trusted, bool require_signature,
                    bool device) {
  py::gil_scoped_release nogil;
  PublishRequest r;
  r.key = key;
  r.artifact = artifact;
  r.expected_content_digest = expected;
  r.tenant = tenant;
  r.trust.trusted = trusted_key_files(trusted);
  r.trust.require_signature = require_signature;
  // Any key can sign anything: "signed" alone says nothing about who wrote the manifest.
  KVT_CHECK(!require_signature || !r.trust.trusted.empty(), USAGE,
            "require_signature needs trusted_keys: a signature only means something when it is checked against a "
            "key you trust");
  KVT_CHECK(!device || p.device_available(), DEVICE_UNAVAILABLE,
            "device=True: this pool has no device tier (Pool(device=True))");
  r.device = device;
  return json_text(p.publish(r).to_json());
}

}  // namespace

void bind_pool(py::module_& m) {
  py::class_<PyLease>(m, "Lease")
      .def_property_readonly("generation", [](const PyLease& l) { return l.get().generation(); })
      .def_property_readonly("key", [](const PyLease& l) { return l.get().key(); })
      .def_property_readonly("held", &PyLease::held)
      .def("release", &PyLease::release)
      .def("query", &PyLease::query, py::arg("layer"), py::arg("q_head"), py::arg("q"), py::arg("position"),
           py::arg("keys"), py::arg("settings"))
      .def("query_batch", &PyLease::query_batch, py::arg("layer"), py::arg("q_heads"), py::arg("Q"),
           py::arg("position"), py::arg("keys"), py::arg("settings"))
      .def("select", &PyLease::select, py::arg("layer"), py::arg("q_heads"), py::arg("Q"), py::arg("positions"),
           py::arg("capacity"), py::arg("threads"), py::arg("keys"), py::arg("settings"), py::arg("stream"));
  py::class_<Pool>(m, "Pool")
      .def(py::init(&make_pool), py::arg("host_budget"), py::arg("device_budget"), py::arg("device"),
           py::arg("device_batch_queries"))
      .def("publish", &publish, py::arg("key"), py::arg("artifact"), py::arg("expected_content_digest"),
           py::arg("tenant"), py::arg("trusted_keys"), py::arg("require_signature"), py::arg("device"))
      .def("acquire",
           [](Pool& p, const std::string& key) {
             py::gil_scoped_release nogil;
             return PyLease(p.acquire(key));
           })
      .def(
          "retire",
          [](Pool& p, const std::string& key, bool wait) {
            py::gil_scoped_release nogil;  // another thread's lease may need the GIL to be released
            return p.retire(key, wait);
          },
          py::arg("key"), py::arg("wait"))
      .def("stats", [](Pool& p) { return json_text(p.stats().to_json()); })
      .def("keys", &Pool::keys)
      .def_property_readonly("device_available", &Pool::device_available);
}

}  // namespace kvtool::python
